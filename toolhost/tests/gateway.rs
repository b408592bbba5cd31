//! toolhost as a gateway at scale: calls to a mounted server are futures, not threads. A
//! thousand calls in flight to a tool that answers after a second grow no thread, and a
//! server that stops answering holds none while its calls wait for their timeout. (How
//! long they take is the bench's to say: `cargo xtask bench`.)
#![cfg(test)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

/// The fixture server's entry, mounted under `fx`, with `extra` in it.
fn fixture_entry(extra: &str) -> String {
    format!(
        "[[mcp_servers]]\nid = \"fixture\"\nprefix = \"fx\"\ncommand = \"{}\"\n{extra}",
        toolhost_tests::fixtures().mcp_server().display()
    )
}

/// `toolhost serve --mcp` over `dir` mounting the fixture server under `fx`, every call of
/// one session to it let through at once, with `extra` in the server's entry; its client
/// and its process id.
async fn gateway(dir: &Path, extra: &str) -> (RunningService<RoleClient, ()>, u32) {
    let entry = fixture_entry(&format!("max_concurrency = 1024\n{extra}"));
    gateway_with(dir, &entry).await
}

/// `toolhost serve --mcp` over `dir` with `config`; its client and its process id.
async fn gateway_with(dir: &Path, config: &str) -> (RunningService<RoleClient, ()>, u32) {
    let transport = TokioChildProcess::new(common::mcp::serve_mcp(dir, config)).unwrap();
    let pid = transport.id().expect("the gateway's pid");
    (().serve(transport).await.unwrap(), pid)
}

/// `n` calls of `fx__slow` taking `ms` each, all sent at once; what each answered.
async fn slow_calls(client: &RunningService<RoleClient, ()>, n: usize, ms: u64) -> Vec<Value> {
    let calls = (0..n).map(|_| {
        let params = CallToolRequestParams::new("fx__slow")
            .with_arguments(json!({"ms": ms}).as_object().unwrap().clone());
        async move {
            let result = client.call_tool(params).await.unwrap();
            serde_json::to_value(result).unwrap()
        }
    });
    futures_util::future::join_all(calls).await
}

/// The most calls of `slow` the fixture server had in flight at once, as its answers say.
fn most_at_once(answers: &[Value]) -> usize {
    answers
        .iter()
        .map(|a| {
            let said = a["content"][1]["text"].as_str().unwrap_or_default();
            let n = said
                .strip_prefix("in flight: ")
                .unwrap_or_else(|| panic!("{a}"));
            n.parse::<usize>().unwrap()
        })
        .max()
        .unwrap_or(0)
}

/// The most threads `pid` had while `work` ran (looked at every 20 ms).
async fn most_threads_during<T>(
    pid: u32,
    work: impl std::future::Future<Output = T>,
) -> (T, usize) {
    let mut most = toolhost_tests::threads(pid);
    tokio::pin!(work);
    let mut every = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            done = &mut work => return (done, most),
            _ = every.tick() => most = most.max(toolhost_tests::threads(pid)),
        }
    }
}

#[tokio::test]
async fn a_thousand_calls_in_flight_to_a_mounted_tool_hold_no_thread_each() {
    let dir = tempfile::tempdir().unwrap();
    let (client, pid) = gateway(dir.path(), "").await;
    // Once warm: a call has run, every thread a call could start is started.
    assert_eq!(slow_calls(&client, 4, 10).await.len(), 4);
    let before = toolhost_tests::threads(pid);
    let (answers, most) = most_threads_during(pid, slow_calls(&client, 1000, 1000)).await;
    assert_eq!(answers.len(), 1000);
    for answer in &answers {
        assert_eq!(answer["content"][0]["text"], "slow: done", "{answer}");
    }
    // A call that held a thread while the server worked would have taken one each (the
    // blocking pool's, up to 512).
    assert!(
        most <= before + 4,
        "{most} threads with 1,000 calls in flight, {before} before"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn under_the_default_config_a_session_sends_a_mounted_server_all_its_calls_at_once() {
    // The session's `max_concurrency` (4 by default) bounds the calls that run in toolhost;
    // a mounted server's run in the server and take places under its entry's own (64).
    let dir = tempfile::tempdir().unwrap();
    let (client, _) = gateway_with(dir.path(), &fixture_entry("")).await;
    let answers = slow_calls(&client, 16, 1500).await;
    assert_eq!(most_at_once(&answers), 16, "{answers:?}");
}

#[tokio::test]
async fn a_servers_max_concurrency_bounds_what_a_session_sends_it_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "max_concurrency = 16\n\n{}",
        fixture_entry("max_concurrency = 2\n")
    );
    let (client, _) = gateway_with(dir.path(), &config).await;
    let answers = slow_calls(&client, 6, 400).await;
    assert!(
        answers
            .iter()
            .all(|a| a["content"][0]["text"] == "slow: done"),
        "{answers:?}"
    );
    assert_eq!(most_at_once(&answers), 2, "{answers:?}");
}

#[tokio::test]
async fn a_server_that_stops_answering_holds_no_thread_and_its_calls_end_at_their_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (client, pid) = gateway(dir.path(), "call_timeout_secs = 2\n").await;
    assert_eq!(slow_calls(&client, 4, 10).await.len(), 4);
    let before = toolhost_tests::threads(pid);
    let server = toolhost_tests::children_of(pid)
        .into_iter()
        .find(|c| toolhost_tests::process_alive(*c))
        .expect("the mounted server's process");
    let server = u32::try_from(server).unwrap();
    toolhost_tests::send_signal(server, rustix::process::Signal::STOP);
    let started = std::time::Instant::now();
    let (answers, most) = most_threads_during(pid, slow_calls(&client, 200, 10)).await;
    toolhost_tests::send_signal(server, rustix::process::Signal::CONT);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    for answer in &answers {
        assert_eq!(answer["isError"], true, "{answer}");
        let text = answer["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("exceeded its 2s time limit"), "{text}");
    }
    assert!(
        most <= before + 4,
        "{most} threads while 200 calls waited on a stopped server, {before} before"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_operators_per_tool_timeout_wins_over_the_servers_call_timeout() {
    // The server's `call_timeout_secs` is its tools' declared time limit, which the
    // dispatcher enforces as any tool's: the operator's entry for one tool wins over it.
    let dir = tempfile::tempdir().unwrap();
    let fixture = toolhost_tests::fixtures().mcp_server();
    let config = format!(
        "[timeouts.per_tool]\nfx__slow = 5\n\n[[mcp_servers]]\nid = \"fixture\"\nprefix = \"fx\"\ncommand = \"{}\"\ncall_timeout_secs = 1\n",
        fixture.display()
    );
    let (client, _) = gateway_with(dir.path(), &config).await;
    let answers = slow_calls(&client, 2, 1500).await;
    for answer in &answers {
        assert_eq!(answer["content"][0]["text"], "slow: done", "{answer}");
    }
    client.cancel().await.unwrap();
    // Without the entry, the same call ends at the server's second.
    let config = format!(
        "[[mcp_servers]]\nid = \"fixture\"\nprefix = \"fx\"\ncommand = \"{}\"\ncall_timeout_secs = 1\n",
        fixture.display()
    );
    let (client, _) = gateway_with(dir.path(), &config).await;
    let answers = slow_calls(&client, 1, 1500).await;
    let text = answers[0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("exceeded its 1s time limit"), "{text}");
    client.cancel().await.unwrap();
}

/// A TCP relay to `to` on a port of its own: its address, and how many connections it
/// has taken.
fn counting_relay(to: &str) -> (String, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let taken = Arc::new(AtomicUsize::new(0));
    let (count, to) = (taken.clone(), to.to_string());
    std::thread::spawn(move || {
        for inbound in listener.incoming().map_while(Result::ok) {
            count.fetch_add(1, Ordering::SeqCst);
            let Ok(outbound) = std::net::TcpStream::connect(&to) else {
                continue;
            };
            let pipe = |mut from: std::net::TcpStream, mut into: std::net::TcpStream| {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut into);
                    let _ = into.shutdown(std::net::Shutdown::Write);
                });
            };
            pipe(inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
            pipe(outbound, inbound);
        }
    });
    (addr, taken)
}

#[tokio::test]
async fn calls_to_a_server_over_http_take_the_connection_the_call_before_left_open() {
    let upstream_ws = common::workspace();
    let upstream = common::serve_http(upstream_ws.path(), &[]);
    let (relay, connections) = counting_relay(&upstream.addr);
    let dir = tempfile::tempdir().unwrap();
    let config =
        format!("[[mcp_servers]]\nid = \"up\"\nprefix = \"up\"\nurl = \"http://{relay}/mcp\"\n");
    let (client, _) = gateway_with(dir.path(), &config).await;
    let call = || async {
        let params = CallToolRequestParams::new("up__read_file")
            .with_arguments(json!({"path": "README.md"}).as_object().unwrap().clone());
        let result = client.call_tool(params).await.unwrap();
        assert_eq!(result.is_error, Some(false), "{result:?}");
    };
    call().await;
    let before = connections.load(Ordering::SeqCst);
    for _ in 0..20 {
        call().await;
    }
    let opened = connections.load(Ordering::SeqCst) - before;
    assert!(
        opened <= 1,
        "20 calls one after another opened {opened} connections to the server"
    );
}

/// Node's reference server `server-everything` over streamable HTTP (a 2025-11-25 server
/// that answers in event streams and keeps a session), on `port`; `None` when the run does
/// not have it.
fn everything_over_http(port: u16) -> Option<std::process::Child> {
    let node = toolhost_tests::peer("TOOLHOST_TEST_NODE")?;
    let server = toolhost_tests::peer("TOOLHOST_TEST_SERVER_EVERYTHING")?;
    let child = std::process::Command::new(node)
        .args([server.as_os_str(), "streamableHttp".as_ref()])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "server-everything never listened on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(child)
}

/// A client that answers a server's form with a color and keeps the progress it is told.
#[derive(Clone, Default)]
struct Asked {
    forms: Arc<std::sync::Mutex<Vec<String>>>,
    progress: Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Asked {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let caps = serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        rmcp::model::ClientConfig::new(caps, rmcp::model::Implementation::new("asked", "1"))
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.forms
            .lock()
            .unwrap()
            .push(serde_json::to_string(&request).unwrap());
        Ok(rmcp::model::ElicitResult::new(
            rmcp::model::ElicitationAction::Decline,
        ))
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.progress
            .lock()
            .unwrap()
            .push(params.message.unwrap_or_default());
    }
}

#[tokio::test]
async fn a_2025_server_over_http_keeps_its_session_progress_and_questions_behind_toolhost() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let Some(mut everything) = everything_over_http(port) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[tool_confirmation.per_tool]\n\"ev__trigger-elicitation-request\" = \"auto\"\n\"ev__trigger-long-running-operation\" = \"auto\"\n\"ev__echo\" = \"auto\"\n\n[[mcp_servers]]\nid = \"ev\"\nprefix = \"ev\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
    );
    let asked = Asked::default();
    let client = asked
        .clone()
        .serve(TokioChildProcess::new(common::mcp::serve_mcp(dir.path(), &config)).unwrap())
        .await
        .unwrap();
    let call = |name: &'static str, arguments: Value| {
        let params =
            CallToolRequestParams::new(name).with_arguments(arguments.as_object().unwrap().clone());
        let client = &client;
        async move { client.call_tool(params).await.unwrap() }
    };
    let echoed = call("ev__echo", json!({"message": "over http"})).await;
    assert!(format!("{echoed:?}").contains("over http"), "{echoed:?}");
    // Its progress comes in the call's event stream, and reaches the client before the
    // answer.
    let done = call(
        "ev__trigger-long-running-operation",
        json!({"duration": 1, "steps": 2}),
    )
    .await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert!(
        !asked.progress.lock().unwrap().is_empty(),
        "no progress reached the client: {done:?}"
    );
    // Its question comes in the call's event stream too, and goes to the client that made
    // the call; its answer goes back in the server's session.
    let elicited = call("ev__trigger-elicitation-request", json!({})).await;
    assert!(
        asked
            .forms
            .lock()
            .unwrap()
            .iter()
            .any(|f| f.contains("Please provide inputs")),
        "the server's form did not reach the client: {elicited:?}"
    );
    assert!(format!("{elicited:?}").contains("decline"), "{elicited:?}");
    client.cancel().await.unwrap();
    everything.kill().unwrap();
    let _ = everything.wait();
}
