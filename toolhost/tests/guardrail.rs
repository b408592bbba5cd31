//! `[[guardrails]]`: a service of the user's, started by each test, judges calls before
//! they run and results before the model gets them (allow, deny with a reason, ask, or a
//! modified result); one that fails refuses (fail closed) unless set to let through.
#![cfg(test)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// A guardrail service on loopback: each request's JSON is kept, and `judge` answers it
/// (`None`: it answers nothing for 5 s, longer than any test's timeout).
struct Service {
    url: String,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Service {
    fn start(judge: fn(&Value) -> Option<Value>) -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/judge", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut length = 0usize;
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                        line.clear();
                    }
                    let mut body = vec![0u8; length];
                    reader.read_exact(&mut body).unwrap();
                    let request: Value = serde_json::from_slice(&body).unwrap();
                    kept.lock().unwrap().push(request.clone());
                    let Some(answer) = judge(&request) else {
                        std::thread::sleep(std::time::Duration::from_secs(5));
                        return;
                    };
                    let answer = answer.to_string();
                    let mut s = stream;
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                        answer.len()
                    );
                });
            }
        });
        Service { url, seen }
    }
}

/// `toolhost call TOOL --input INPUT` in a workspace whose config is `config`.
fn call(config: &str, tool: &str, input: Value) -> Output {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolhost.toml"), config).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the meeting is at noon\n").unwrap();
    run(dir.path(), &["call", tool, "--input", &input.to_string()])
}

fn run(dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--config", "toolhost.toml"];
    all.extend(args);
    common::command(dir, &all)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn all(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn config(url: &str, extra: &str) -> String {
    format!(
        "[tool_confirmation.default]\nwrite = \"auto\"\nexecute = \"auto\"\n\n[[guardrails]]\nname = \"policy-service\"\nurl = \"{url}\"\ntimeout_ms = 1000\n{extra}"
    )
}

/// Denies commands that mention `rm -rf`, replaces results that mention `noon`.
fn house_rules(request: &Value) -> Option<Value> {
    let text = request.to_string();
    Some(match request["phase"].as_str() {
        Some("call") if text.contains("rm -rf") => {
            json!({"decision": "deny", "reason": "no recursive deletes"})
        }
        Some("result") if text.contains("noon") => json!({
            "decision": "modify",
            "content": [{"type": "text", "text": "the meeting time is confidential"}],
        }),
        _ => json!({"decision": "allow"}),
    })
}

#[test]
fn a_call_the_service_denies_is_refused_with_its_reason_and_others_run() {
    let service = Service::start(house_rules);
    let denied = call(
        &config(&service.url, ""),
        "shell",
        json!({"command": "rm -rf build"}),
    );
    assert!(!denied.status.success());
    let text = all(&denied);
    assert!(
        text.contains("denied by pre-use hook 'policy-service': no recursive deletes"),
        "{text}"
    );
    let ran = call(
        &config(&service.url, ""),
        "shell",
        json!({"command": "echo fine"}),
    );
    assert!(ran.status.success(), "{}", all(&ran));
    assert!(all(&ran).contains("fine"));
}

#[test]
fn the_service_sees_the_call_and_its_result_as_documented_and_may_modify_the_result() {
    let service = Service::start(house_rules);
    let o = call(
        &config(&service.url, ""),
        "read_file",
        json!({"path": "notes.txt"}),
    );
    assert!(o.status.success(), "{}", all(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "the meeting time is confidential"
    );
    let seen = service.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let (before, after) = (&seen[0], &seen[1]);
    assert_eq!(before["phase"], "call");
    assert_eq!(before["tool"], "read_file");
    assert_eq!(before["class"], "read");
    assert_eq!(before["input"]["path"], "notes.txt");
    assert!(before["tool_use_id"].is_string() && before["session"].is_string());
    assert_eq!(after["phase"], "result");
    assert_eq!(after["result"]["is_error"], false);
    assert_eq!(
        after["result"]["content"][0]["text"],
        "the meeting is at noon\n"
    );
}

#[test]
fn a_result_the_service_denies_is_withheld_with_its_reason() {
    fn deny_results(request: &Value) -> Option<Value> {
        Some(match request["phase"].as_str() {
            Some("result") => json!({"decision": "deny", "reason": "customer data"}),
            _ => json!({"decision": "allow"}),
        })
    }
    let service = Service::start(deny_results);
    let o = call(
        &config(&service.url, ""),
        "read_file",
        json!({"path": "notes.txt"}),
    );
    let text = all(&o);
    assert!(!o.status.success(), "{text}");
    assert!(
        text.contains("withheld by guardrail 'policy-service': customer data"),
        "{text}"
    );
    assert!(!text.contains("noon"), "{text}");
}

#[test]
fn a_service_that_does_not_answer_refuses_the_call_unless_set_to_let_it_through() {
    let service = Service::start(|_| None);
    let o = call(
        &config(&service.url, ""),
        "shell",
        json!({"command": "echo ran"}),
    );
    let text = all(&o);
    assert!(!o.status.success(), "{text}");
    for says in [
        "guardrail 'policy-service' could not judge it",
        "no answer within 1000 ms",
        "on_error = \"deny\"",
    ] {
        assert!(text.contains(says), "{says:?} in {text}");
    }
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("ran"),
        "{text}"
    );
    let open = call(
        &config(&service.url, "on_error = \"allow\"\n"),
        "shell",
        json!({"command": "echo ran"}),
    );
    assert!(open.status.success(), "{}", all(&open));
    assert!(String::from_utf8_lossy(&open.stdout).contains("ran"));
    assert!(
        all(&open).contains("let through (on_error = \"allow\")"),
        "{}",
        all(&open)
    );
}

#[test]
fn a_service_that_answers_nonsense_counts_as_failed() {
    let service = Service::start(|_| Some(json!({"verdict": "fine"})));
    let o = call(
        &config(&service.url, ""),
        "shell",
        json!({"command": "echo ran"}),
    );
    let text = all(&o);
    assert!(!o.status.success(), "{text}");
    assert!(text.contains("its answer is not a decision"), "{text}");
}

#[test]
fn a_guardrail_only_for_some_tools_leaves_the_others_alone() {
    let service = Service::start(|_| Some(json!({"decision": "deny", "reason": "no"})));
    let o = call(
        &config(&service.url, "tools = [\"shell\"]\non = [\"call\"]\n"),
        "read_file",
        json!({"path": "notes.txt"}),
    );
    assert!(o.status.success(), "{}", all(&o));
    assert!(service.seen.lock().unwrap().is_empty());
}

#[test]
fn a_bad_guardrail_entry_is_refused_naming_it() {
    for (entry, says) in [
        (
            "name = \"g\"\nurl = \"ftp://x\"\n",
            "is not http:// or https://",
        ),
        ("name = \"g\"\nurl = \"http://x\"\non = []\n", "on is empty"),
        (
            "name = \"g\"\nurl = \"http://x\"\non = [\"later\"]\n",
            "later",
        ),
        (
            "name = \"g\"\nurl = \"http://x\"\nbearer_token_env = \"TOOLHOST_TEST_UNSET_VAR\"\n",
            "TOOLHOST_TEST_UNSET_VAR, which is not set",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("toolhost.toml"),
            format!("[[guardrails]]\n{entry}"),
        )
        .unwrap();
        let o = run(
            dir.path(),
            &["call", "read_file", "--input", "{\"path\": \"x\"}"],
        );
        let text = all(&o);
        assert!(!o.status.success(), "{entry}: {text}");
        assert!(
            text.contains("guardrails") && text.contains(says),
            "{says:?} in {text}"
        );
    }
}
