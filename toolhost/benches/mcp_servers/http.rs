//! The bench's client over streamable HTTP: `inflight` keep-alive connections, each with
//! one `tools/call` outstanding, multiplexed by one thread with `poll`. A server speaking
//! 2026-07-28 is sent stateless requests (each with its `_meta` and the SEP-2243 headers);
//! any other gets one 2025-11-25 session (`initialize`, then `Mcp-Session-Id` on every
//! request) shared by the connections. An answer may be JSON or an event stream (read to
//! the end of the response, chunked or not). Its own limit is shown by the HTTP echo server
//! this binary becomes with `--echo-http-server PORT`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    Answer, Figures, Meter, Server, all_answered, assert_lists_tool, echo_result, idle_mib,
};

/// How a server of the plan is reached over HTTP.
#[derive(Deserialize, Clone)]
pub struct Http {
    /// Whether it takes 2026-07-28 stateless requests (else a 2025-11-25 session).
    pub stateless: bool,
    /// A bearer token every request carries (a static token, or an OAuth access token):
    /// `{token}` is one the bench's issuer signs for `resource` ([`crate::issuer`]).
    #[serde(default)]
    pub bearer: Option<String>,
    /// The resource `{token}` is for.
    #[serde(default)]
    pub resource: Option<String>,
    /// Where its MCP endpoint is (`/mcp` unless given).
    #[serde(default)]
    pub path: Option<String>,
}

/// The version of a session's requests.
const SESSION_VERSION: &str = "2025-11-25";

/// A port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One whole HTTP response.
struct Reply {
    status: u16,
    session: Option<String>,
    events: bool,
    body: Vec<u8>,
}

impl Reply {
    /// The JSON-RPC message in the body (an event stream's message with an id).
    fn message(&self) -> Value {
        let text = String::from_utf8_lossy(&self.body);
        if !self.events {
            return serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        }
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some())
            .unwrap_or_else(|| panic!("no answer in the event stream: {text}"))
    }
}

/// The response at the front of `buf`, when all of it has come: its length and it.
fn parse(buf: &[u8]) -> Option<(usize, Reply)> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..head_end]).expect("an HTTP head in ASCII");
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let (mut length, mut chunked, mut events, mut session) = (None, false, false, None);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.contains("chunked"),
            "content-type" => events = value.starts_with("text/event-stream"),
            "mcp-session-id" => session = Some(value.to_string()),
            _ => {}
        }
    }
    let mut body = Vec::new();
    let end = if chunked {
        let mut at = head_end;
        loop {
            let line_end = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
            let size_text = std::str::from_utf8(&buf[at..line_end]).ok()?;
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            let data = line_end + 2;
            if size == 0 {
                // No trailers are sent: the last chunk ends with an empty line.
                if buf.len() < data + 2 {
                    return None;
                }
                break data + 2;
            }
            if buf.len() < data + size + 2 {
                return None;
            }
            body.extend_from_slice(&buf[data..data + size]);
            at = data + size + 2;
        }
    } else {
        let length = length.unwrap_or(0);
        if buf.len() < head_end + length {
            return None;
        }
        body.extend_from_slice(&buf[head_end..head_end + length]);
        head_end + length
    };
    Some((
        end,
        Reply {
            status,
            session,
            events,
            body,
        },
    ))
}

/// A request to `path` with `headers` and a JSON `body`.
fn post(port: u16, path: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// How the client talks to one server: its port, and its session when it has one.
struct Client {
    port: u16,
    /// Its MCP endpoint.
    path: String,
    stateless: bool,
    session: Option<String>,
    /// `Bearer TOKEN`, when the server wants one.
    authorization: Option<String>,
}

impl Client {
    /// The request for `method` with `params` and `id`, as this server takes it.
    fn request(&self, id: u64, method: &str, mut params: Value, name: Option<&str>) -> Vec<u8> {
        if self.stateless {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "toolhost-bench", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
            });
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.message(method, name, &body)
    }

    /// `message` posted with the headers this server takes: the version, the session,
    /// and (stateless) `Mcp-Method` and `Mcp-Name`.
    fn message(&self, method: &str, name: Option<&str>, message: &Value) -> Vec<u8> {
        let mut headers = vec![("Mcp-Method", method)];
        if self.stateless {
            headers.push(("MCP-Protocol-Version", "2026-07-28"));
            if let Some(name) = name {
                headers.push(("Mcp-Name", name));
            }
        } else {
            headers.push(("MCP-Protocol-Version", SESSION_VERSION));
        }
        if let Some(session) = &self.session {
            headers.push(("Mcp-Session-Id", session));
        }
        if let Some(authorization) = &self.authorization {
            headers.push(("Authorization", authorization));
        }
        post(self.port, &self.path, &headers, &message.to_string())
    }

    /// One request on a blocking connection of its own, and its whole response.
    fn exchange(&self, bytes: &[u8]) -> Reply {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("a connection");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream.write_all(bytes).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16384];
        loop {
            if let Some((_, reply)) = parse(&buf) {
                return reply;
            }
            let n = stream.read(&mut chunk).expect("an answer within 30 s");
            assert!(n > 0, "the server closed the connection before answering");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends a request and returns its answer's result.
    fn call(&self, id: u64, method: &str, params: Value, name: Option<&str>) -> Value {
        let reply = self.exchange(&self.request(id, method, params, name));
        let message = reply.message();
        assert!(
            reply.status == 200 && message.get("error").is_none(),
            "{method} failed ({}): {message}",
            reply.status
        );
        message["result"].clone()
    }
}

/// `Bearer TOKEN` for a server that wants one: `{token}` is one the bench's issuer signs.
fn authorization(http: &Http) -> Option<String> {
    http.bearer.as_ref().map(|t| {
        let token = match (t.as_str(), &http.resource) {
            ("{token}", Some(resource)) => crate::issuer().token("bench-user", resource),
            _ => t.clone(),
        };
        format!("Bearer {token}")
    })
}

/// Waits until something listens on `port` (at most 20 s).
fn wait_listening(name: &str, port: u16) {
    wait_listening_for(name, port, Duration::from_secs(20));
}

/// Waits until something listens on `port`, at most `wait`.
fn wait_listening_for(name: &str, port: u16, wait: Duration) {
    let deadline = Instant::now() + wait;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{name}: nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts the HTTP server `command` (with `env`) on a free port that `{port}` names in
/// both, and waits until it listens: the server and its port.
pub fn start(
    name: &str,
    command: &[String],
    env: &std::collections::BTreeMap<String, String>,
) -> (std::process::Child, u16) {
    let port = free_port();
    let fill = |s: &str| s.replace("{port}", &port.to_string());
    let (program, args) = command
        .split_first()
        .unwrap_or_else(|| panic!("{name}: no command"));
    let child = Command::new(program)
        .args(args.iter().map(|a| fill(a)))
        .env("XDG_STATE_HOME", crate::state_home())
        .envs(env.iter().map(|(k, v)| (k, fill(v))))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: cannot start {program}: {e}"));
    wait_listening(name, port);
    (child, port)
}

/// One round against one server over HTTP: started for the round, or one that runs
/// already ([`crate::Attached`]).
pub fn round(server: &Server, http: &Http, calls: u64, inflight: u64) -> Figures {
    // Stopped between its rounds: running for this one.
    let _awake = server.attached.as_ref().map(|a| a.awake());
    let (mut child, port, pid) = match &server.attached {
        Some(attached) => (None, attached.port, attached.pids[0]),
        None => {
            let (child, port) = start(&server.name, &server.command, &server.env);
            let pid = child.id();
            (Some(child), port, pid)
        }
    };
    let mut client = Client {
        port,
        path: http.path.clone().unwrap_or_else(|| "/mcp".into()),
        stateless: http.stateless,
        session: None,
        authorization: authorization(http),
    };
    if !http.stateless {
        let reply = client.exchange(&client.request(
            0,
            "initialize",
            json!({
                "protocolVersion": SESSION_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "toolhost-bench", "version": "1"}
            }),
            None,
        ));
        assert_eq!(reply.status, 200, "{}: initialize failed", server.name);
        client.session = reply.session;
        let method = "notifications/initialized";
        client.exchange(&client.message(
            method,
            None,
            &json!({"jsonrpc": "2.0", "method": method}),
        ));
    }
    assert_lists_tool(server, &client.call(1, "tools/list", json!({}), None));
    let params = json!({"name": server.tool, "arguments": server.arguments});
    let first = client.call(2, "tools/call", params.clone(), Some(&server.tool));
    assert_ne!(first["isError"], true, "{}: {first}", server.name);
    let idle_mib = idle_mib(pid);

    // Each call with an id of its own, as a session requires of requests in flight (a
    // server may refuse an id that is taken; toolhost does), made before the clock starts.
    let requests: Vec<Vec<u8>> = (0..calls)
        .map(|i| client.request(3 + i, "tools/call", params.clone(), Some(&server.tool)))
        .collect();
    let mut conns: Vec<(TcpStream, Vec<u8>, bool)> = (0..inflight)
        .map(|_| {
            let stream = TcpStream::connect(("127.0.0.1", port)).expect("a connection");
            stream.set_nodelay(true).unwrap();
            stream.set_nonblocking(true).unwrap();
            (stream, Vec::with_capacity(1 << 14), false)
        })
        .collect();
    let (mut sent, mut answered, mut failed) = (0u64, 0u64, 0u64);
    let mut chunk = vec![0u8; 1 << 16];
    let beside = [
        server.beside.as_slice(),
        server.attached.as_ref().map_or(&[][..], |a| &a.pids[1..]),
    ]
    .concat();
    let meter = Meter::start(pid, &beside, idle_mib);
    while answered < calls {
        for (stream, _, busy) in &mut conns {
            if !*busy && sent < calls {
                write_all(
                    stream,
                    &requests[usize::try_from(sent).expect("calls fit in memory")],
                );
                *busy = true;
                sent += 1;
            }
        }
        let ready: Vec<usize> = {
            use rustix::event::{PollFd, PollFlags, Timespec, poll};
            let mut fds: Vec<PollFd<'_>> = conns
                .iter()
                .map(|(s, _, _)| PollFd::new(s, PollFlags::IN))
                .collect();
            let timeout = Timespec {
                tv_sec: 30,
                tv_nsec: 0,
            };
            let n = poll(&mut fds, Some(&timeout)).expect("poll");
            assert!(n > 0, "{}: no answer for 30 s", server.name);
            fds.iter()
                .enumerate()
                .filter(|(_, f)| !f.revents().is_empty())
                .map(|(i, _)| i)
                .collect()
        };
        for i in ready {
            let (stream, buf, busy) = &mut conns[i];
            loop {
                match stream.read(&mut chunk) {
                    Ok(0) => panic!("{}: the server closed a connection", server.name),
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{}: {e}", server.name),
                }
            }
            while let Some((used, reply)) = parse(buf) {
                buf.drain(..used);
                let answer: Answer = serde_json::from_value(reply.message()).unwrap();
                failed += u64::from(
                    reply.status != 200
                        || answer.error.is_some()
                        || answer.result.is_none_or(|r| r.is_error == Some(true)),
                );
                answered += 1;
                *busy = false;
            }
        }
    }
    let figures = meter.read(calls);
    if let Some(child) = child.as_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    all_answered(server, failed, calls, figures)
}

/// Instructions per `tools/call` of a stateless server over HTTP, and of the server it
/// mounts where the bench starts that one ([`Server::upstream`]), counted as a stdio
/// server's are ([`crate::count`]): runs of `n` and `2n` calls, per call = (I(2n) − I(n)) / n.
/// The calls go one after another on one kept-alive connection, so that every run reads
/// the same chunks (with calls racing each other, the count moved with how they met).
pub fn per_call_counted(
    server: &Server,
    http: &Http,
    n: u64,
) -> Result<(f64, Option<f64>), String> {
    if !http.stateless {
        return Err("counted only over stateless requests".into());
    }
    crate::count::per_call_of(&server.name, n, |calls| instructions(server, http, calls))
}

/// The instructions one run of `calls` calls took: the server's, and its upstream's.
fn instructions(server: &Server, http: &Http, calls: u64) -> Result<(u64, Option<u64>), String> {
    let upstream = match &server.upstream {
        Some(command) => Some(Counted::start(
            &format!("{}'s upstream", server.name),
            command,
            &Default::default(),
        )?),
        None => None,
    };
    let fill = |s: &str| match &upstream {
        Some(u) => s.replace("{upstream_port}", &u.port.to_string()),
        None => s.to_string(),
    };
    for (path, text) in &server.files {
        std::fs::write(path, crate::with_issuer(&fill(text)))
            .map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    let command: Vec<String> = server.command.iter().map(|a| fill(a)).collect();
    let env = server
        .env
        .iter()
        .map(|(k, v)| (k.clone(), fill(v)))
        .collect();
    let front = Counted::start(&server.name, &command, &env)?;
    let client = Client {
        port: front.port,
        path: http.path.clone().unwrap_or_else(|| "/mcp".into()),
        stateless: true,
        session: None,
        authorization: authorization(http),
    };
    let params = json!({"name": server.tool, "arguments": server.arguments});
    let request = client.request(3, "tools/call", params, Some(&server.tool));
    let mut stream = TcpStream::connect(("127.0.0.1", front.port)).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(|e| e.to_string())?;
    let (mut buf, mut chunk) = (Vec::new(), vec![0u8; 1 << 16]);
    for _ in 0..calls {
        stream.write_all(&request).map_err(|e| e.to_string())?;
        let reply = loop {
            if let Some((used, reply)) = parse(&buf) {
                buf.drain(..used);
                break reply;
            }
            match stream.read(&mut chunk) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("no answer: {e}")),
            }
        };
        let message = reply.message();
        if reply.status != 200
            || message.get("error").is_some()
            || message["result"]["isError"] == true
        {
            return Err(format!("a call failed ({}): {message}", reply.status));
        }
    }
    drop(stream);
    let own = front.stop()?;
    let mounted = upstream.map(Counted::stop).transpose()?;
    Ok((own, mounted))
}

/// A server over HTTP run under callgrind, on its port.
struct Counted {
    child: std::process::Child,
    port: u16,
    report: std::thread::JoinHandle<String>,
}

impl Counted {
    fn start(
        name: &str,
        command: &[String],
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<Counted, String> {
        let port = free_port();
        let fill = |s: &str| s.replace("{port}", &port.to_string());
        let mut child = Command::new("valgrind")
            .args([
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                "--trace-children=no",
            ])
            .args(command.iter().map(|a| fill(a)))
            .env("XDG_STATE_HOME", crate::state_home())
            .envs(env.iter().map(|(k, v)| (k, fill(v))))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{name}: cannot start valgrind: {e}"))?;
        let mut stderr = child.stderr.take().ok_or("no stderr")?;
        let report = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        // Under callgrind a server starts dozens of times slower.
        wait_listening_for(name, port, Duration::from_secs(180));
        Ok(Counted {
            child,
            port,
            report,
        })
    }

    /// Stops the server (SIGTERM, on which it ends as it would anyway, and callgrind
    /// reports): the instructions it ran.
    fn stop(mut self) -> Result<u64, String> {
        let pid = self.child.id();
        if let Some(process) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(process, rustix::process::Signal::TERM);
        }
        let status = self.child.wait().map_err(|e| e.to_string())?;
        let text = self.report.join().unwrap_or_default();
        crate::count::collected(&text, pid).ok_or_else(|| {
            format!(
                "valgrind reported no count ({status}): {}",
                text.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
            )
        })
    }
}

/// Writes all of `bytes` to a non-blocking stream (its buffer is empty between requests,
/// so this rarely waits).
fn write_all(stream: &mut TcpStream, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) => panic!("a request could not be sent: {e}"),
        }
    }
}

/// The trivial HTTP server on `port`: a thread per connection, answering each POST with
/// JSON as the stdio echo server answers a line ([`echo_result`]), keep-alive.
pub fn echo_http_server(port: u16) {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("the echo server's port");
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        std::thread::spawn(move || {
            let _ = stream.set_nodelay(true);
            let mut output = stream.try_clone().expect("a second handle");
            let mut input = BufReader::with_capacity(1 << 16, stream);
            let mut line = String::new();
            loop {
                let mut length = 0usize;
                loop {
                    line.clear();
                    if input.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; length];
                if input.read_exact(&mut body).is_err() {
                    return;
                }
                let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let answer =
                    json!({"jsonrpc": "2.0", "id": message["id"], "result": echo_result(&message)})
                        .to_string();
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
                    answer.len()
                );
                if output.write_all(response.as_bytes()).is_err() {
                    return;
                }
            }
        });
    }
}

/// The echo server over HTTP, in the plan as `echo-http`.
pub fn echo(extra: &str) -> Server {
    Server {
        name: "echo-http".into(),
        tool: "echo".into(),
        arguments: json!({"message": extra}),
        command: vec![
            std::env::current_exe().unwrap().display().to_string(),
            "--echo-http-server".into(),
            "{port}".into(),
        ],
        env: Default::default(),
        http: Some(Http {
            stateless: true,
            bearer: None,
            resource: None,
            path: None,
        }),
        count: false,
        proxy: None,
        upstream: None,
        files: Default::default(),
        beside: Vec::new(),
        counted_as: None,
        counted_with_mounted: None,
        mounted_logs: None,
        calls: None,
        attached: None,
        inflight: None,
    }
}
