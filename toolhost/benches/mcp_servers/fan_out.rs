//! Many calls in flight at once to a tool that takes its time: a stdio server is started,
//! initialized, and sent every call in one write; the bench reads until all are answered.
//! It prints `fan-out NAME: N calls in S s, at most T threads (B before)`: the wall time
//! from the write to the last answer, and the most threads the server's process had
//! meanwhile (looked at every 5 ms) beside how many it had once warm.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

use crate::{Answer, Running, Server, initialize_params};

/// One fan-out of the plan.
#[derive(Deserialize, Clone)]
pub struct FanOut {
    pub name: String,
    pub tool: String,
    pub arguments: Value,
    pub command: Vec<String>,
    pub calls: u64,
}

/// Runs `fan_out`: the seconds its calls took, the most threads meanwhile, and before.
pub fn run(fan_out: &FanOut) -> (f64, usize, usize) {
    let server = Server {
        name: fan_out.name.clone(),
        tool: fan_out.tool.clone(),
        arguments: fan_out.arguments.clone(),
        command: fan_out.command.clone(),
        ..crate::echo("")
    };
    let mut s = Running::start(&server);
    s.request(0, "initialize", initialize_params());
    s.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let params = serde_json::json!({"name": server.tool, "arguments": server.arguments});
    let first = s.request(1, "tools/call", params.clone());
    assert_ne!(first["isError"], true, "{}: {first}", server.name);
    let before = toolhost_tests::threads(s.pid);
    let most = Arc::new(AtomicUsize::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (most, done, pid) = (most.clone(), done.clone(), s.pid);
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                most.fetch_max(toolhost_tests::threads(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let started = Instant::now();
    for id in 0..fan_out.calls {
        s.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{params}}}"#,
            1000 + id
        ));
    }
    s.flush();
    let (mut answered, mut failed) = (0, 0);
    while answered < fan_out.calls {
        let answer: Answer = serde_json::from_str(s.next()).unwrap();
        if answer
            .id
            .as_ref()
            .and_then(Value::as_u64)
            .is_some_and(|id| id >= 1000)
        {
            answered += 1;
            failed += u64::from(
                answer.error.is_some()
                    || answer
                        .result
                        .as_ref()
                        .is_none_or(|r| r.is_error == Some(true)),
            );
        }
    }
    let took = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    s.stop();
    assert_eq!(failed, 0, "{}: {failed} calls failed", server.name);
    (took, most.load(Ordering::Relaxed), before)
}
