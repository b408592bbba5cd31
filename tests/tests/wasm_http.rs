//! Outgoing HTTP from WebAssembly components: a tool declared `network` reaches the hosts
//! its plugin's `http_hosts` lists through `wasi:http`, and nothing else; a request the
//! host refuses is named in the call's error, and a request that hangs is stopped with
//! its call. The component is `tests/fixtures/wasm/fetch` (JavaScript, `fetch()`).
#![cfg(test)]

mod common;

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::allow_all;
use common::wasm::{Components, assert_fails, assert_returns_cancelled, run_on_thread};
use dispatcher_core::{Dispatcher, DispatcherConfig, ErrorClass};
use plugin_host::PluginSandbox;
use serde_json::json;

/// How a test server answers every request.
#[derive(Clone)]
enum Answer {
    /// `200 OK` with this body.
    Ok(&'static str),
    /// `302 Found` to this URL.
    Redirect(String),
    /// Reads the request and never answers.
    Hang,
    /// Answers `200 OK` with the first of the 100 bytes it promises, then nothing more.
    HangInBody,
}

/// An HTTP/1.1 server on loopback, one thread, that keeps the request lines it read.
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(answer: Answer) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let log = log.clone();
                let answer = answer.clone();
                std::thread::spawn(move || serve(stream, &answer, &log));
            }
        });
        Server { port, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, answer: &Answer, log: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header) {
            Ok(0) | Err(_) => break,
            Ok(_) if header == "\r\n" => break,
            Ok(_) => {}
        }
    }
    log.lock()
        .unwrap()
        .push(request_line.trim_end().to_string());
    let mut stream = stream;
    let response = match answer {
        Answer::Ok(body) => format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
        Answer::Redirect(to) => format!(
            "HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ),
        Answer::Hang => String::new(),
        Answer::HangInBody => {
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\nx".into()
        }
    };
    let hangs = matches!(answer, Answer::Hang | Answer::HangInBody);
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
    if hangs {
        std::thread::sleep(Duration::from_secs(30));
    }
}

/// A loopback port that is listened on but must never be reached.
struct Untouched(TcpListener);

impl Untouched {
    fn new() -> Untouched {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        Untouched(l)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.0.local_addr().unwrap().port())
    }

    fn reached(&self) -> bool {
        !matches!(self.0.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock)
    }
}

/// The fetch component loaded with `hosts` as its `http_hosts`.
fn fetch_env(hosts: &[String], config: DispatcherConfig) -> Option<Components> {
    let hosts = hosts.to_vec();
    Components::loaded_by(
        &["fetch"],
        Dispatcher::builder().policy(allow_all()).config(config),
        move |env| {
            env.host().sandbox(
                "fetch",
                PluginSandbox {
                    http_hosts: plugin_host::plugin_wasm::HostList::new(&hosts)
                        .expect("valid hosts"),
                    ..PluginSandbox::default()
                },
            )
        },
    )
}

fn allowing(server: &Server) -> Vec<String> {
    vec![format!("127.0.0.1:{}", server.port)]
}

#[tokio::test]
async fn a_network_tool_reaches_a_host_its_plugin_is_allowed() {
    let server = Server::start(Answer::Ok("hello from the test server"));
    let Some(env) = fetch_env(&allowing(&server), DispatcherConfig::default()) else {
        return;
    };
    let r = env
        .call("http_get", json!({"url": server.url("/hello")}))
        .await;
    assert!(!r.is_error(), "{}", r.text());
    assert_eq!(r.text(), "hello from the test server");
    assert_eq!(server.requests(), ["GET /hello HTTP/1.1"]);
}

#[tokio::test]
async fn a_host_not_allowed_is_refused_and_named_in_the_error() {
    let server = Server::start(Answer::Ok("allowed"));
    let other = Untouched::new();
    let Some(env) = fetch_env(&allowing(&server), DispatcherConfig::default()) else {
        return;
    };
    let r = env.call("http_get", json!({"url": other.url()})).await;
    let port = other.0.local_addr().unwrap().port();
    assert_fails(
        &r,
        ErrorClass::ExecutionError,
        &format!(
            "127.0.0.1:{port} is not one of the hosts [plugins.fetch] http_hosts allows (127.0.0.1:{})",
            server.port
        ),
    );
    assert!(!other.reached());
}

#[tokio::test]
async fn with_no_http_hosts_every_request_is_refused() {
    let server = Server::start(Answer::Ok("unreachable"));
    let Some(env) = fetch_env(&[], DispatcherConfig::default()) else {
        return;
    };
    let r = env.call("http_get", json!({"url": server.url("/")})).await;
    assert_fails(&r, ErrorClass::ExecutionError, "http_hosts allows (none)");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_tool_not_declared_network_may_not_send_requests_even_to_an_allowed_host() {
    let server = Server::start(Answer::Ok("unreachable"));
    let Some(env) = fetch_env(&allowing(&server), DispatcherConfig::default()) else {
        return;
    };
    let r = env
        .call("http_get_undeclared", json!({"url": server.url("/")}))
        .await;
    assert_fails(
        &r,
        ErrorClass::ExecutionError,
        "declares side effect 'none'; only a tool declared 'network' may send HTTP requests",
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_redirect_does_not_take_a_request_to_a_host_not_allowed() {
    let other = Untouched::new();
    let server = Server::start(Answer::Redirect(other.url()));
    let Some(env) = fetch_env(&allowing(&server), DispatcherConfig::default()) else {
        return;
    };
    // The component gets the 302 itself (wasi:http follows nothing); had its fetch()
    // followed it, the host would have refused the second request like any other.
    let r = env
        .call("http_get", json!({"url": server.url("/go")}))
        .await;
    assert!(r.is_error(), "a 302 is not a success: {r:?}");
    assert_eq!(server.requests(), ["GET /go HTTP/1.1"]);
    assert!(!other.reached());
}

#[tokio::test]
async fn a_request_that_hangs_is_stopped_by_its_calls_timeout() {
    let server = Server::start(Answer::Hang);
    let mut config = DispatcherConfig::default();
    config
        .timeouts
        .per_tool
        .insert("http_get".into(), Duration::from_millis(500));
    let Some(env) = fetch_env(&allowing(&server), config) else {
        return;
    };
    let r = env
        .call("http_get", json!({"url": server.url("/slow")}))
        .await;
    assert_fails(&r, ErrorClass::Timeout, "");
}

#[test]
fn cancel_ends_a_request_that_hangs_not_only_the_wait_for_it() {
    // Hanging before the answer, then in the middle of its body.
    for answer in [Answer::Hang, Answer::HangInBody] {
        let server = Server::start(answer);
        let hosts = plugin_host::plugin_wasm::HostList::new(allowing(&server)).unwrap();
        let Some(tool) = common::wasm::lone_tool("fetch", "http_get", hosts) else {
            return;
        };
        let ended = run_on_thread(tool.clone(), json!({"url": server.url("/slow")}));
        std::thread::sleep(Duration::from_millis(300));
        assert!(ended.try_recv().is_err(), "still waiting for the answer");
        assert_eq!(server.requests(), ["GET /slow HTTP/1.1"]);
        assert!(tool.cancel());
        assert_returns_cancelled(&ended, "the thread waiting for the answer");
    }
}

#[tokio::test]
async fn listings_say_a_component_runs_in_wasm_and_where_its_requests_may_go() {
    let hosts = vec!["api.example.com".to_string(), "*.cdn.example:8443".into()];
    let Some(env) = fetch_env(&hosts, DispatcherConfig::default()) else {
        return;
    };
    let listing = env.d().listing_for_session(&env.fx.session);
    let placement = |tool: &str| {
        listing
            .iter()
            .find(|l| l.definition.name == tool)
            .map(|l| l.placement.clone())
            .unwrap()
    };
    assert_eq!(
        placement("http_get"),
        tool_api::Placement::Wasm { http_hosts: hosts }
    );
    assert_eq!(
        placement("http_get_undeclared"),
        tool_api::Placement::Wasm { http_hosts: vec![] }
    );
}
