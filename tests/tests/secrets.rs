//! Secrets stay out of what a call returns: results are redacted by default, withheld
//! under `block`, passed on under `off`; live output, failures' messages and the audit
//! entry carry no secret; secrets in arguments are refused or asked about when the
//! settings say so.
#![cfg(test)]

mod common;

use std::sync::{Arc, Mutex};

use common::{Fixture, next_of};
use dispatcher_core::audit::{AuditEntry, AuditSink};
use dispatcher_core::{ClassModes, ConfirmationPolicy, Dispatcher, DispatcherConfig, ToolUse};
use dispatcher_core::{ErrorClass, Secrets};
use serde_json::json;

const KEY_ID: &str = "AKIAQWERTYUIOPASDFGH";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const GITHUB: &str = "ghp_R2D2c3poBB8ZzYyXxWwVvUuTtSsRrQqPpOo1";

#[derive(Default)]
struct Audit(Mutex<Vec<AuditEntry>>);

impl AuditSink for Audit {
    fn record(&self, entry: &AuditEntry) {
        self.0.lock().unwrap().push(entry.clone());
    }
}

/// A dispatcher with the built-in tools under `settings` (TOML of the `[secrets]`
/// table), every call allowed, its audit entries kept.
fn with(settings: &str) -> (Dispatcher, Fixture, Arc<Audit>) {
    let audit = Arc::new(Audit::default());
    let config = DispatcherConfig {
        secrets: Secrets::new(toml::from_str(settings).unwrap()).unwrap(),
        ..DispatcherConfig::default()
    };
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .config(config)
            .policy(ConfirmationPolicy {
                default: ClassModes::all_auto(),
                ..ConfirmationPolicy::default()
            })
            .audit(audit.clone()),
    );
    fx.write(
        ".env",
        &format!("AWS_ACCESS_KEY_ID={KEY_ID}\nAWS_SECRET_ACCESS_KEY={SECRET}\nDEBUG=1\n"),
    );
    (d, fx, audit)
}

fn read_env() -> ToolUse {
    ToolUse::new("tu_env", "read_file", json!({"path": ".env"}))
}

#[tokio::test]
async fn a_secret_in_a_result_is_redacted_by_default_naming_its_kind() {
    let (d, fx, audit) = with("");
    let mut events = fx.session.subscribe();
    let r = d.dispatch(read_env(), &fx.session).await;
    assert!(!r.is_error(), "{r:?}");
    let text = r.text();
    assert!(!text.contains(KEY_ID) && !text.contains(SECRET), "{text}");
    assert!(
        text.contains("AWS_ACCESS_KEY_ID=[REDACTED aws-access-key-id]"),
        "{text}"
    );
    assert!(
        text.contains("AWS_SECRET_ACCESS_KEY=[REDACTED aws-secret-access-key]"),
        "{text}"
    );
    assert!(text.contains("DEBUG=1"), "the rest is kept: {text}");
    let found = next_of(&mut events, "tool.secrets_found").await.to_json();
    assert_eq!(found["action"], "redact");
    assert_eq!(found["secrets"][0]["kind"], "aws-access-key-id");
    assert!(
        found["secrets"][0]["location"]
            .as_str()
            .unwrap()
            .starts_with("content[0] line")
    );
    let entry = audit.0.lock().unwrap().pop().unwrap();
    let line = serde_json::to_string(&entry).unwrap();
    assert!(!line.contains(SECRET) && !line.contains(KEY_ID), "{line}");
    assert_eq!(entry.secrets.unwrap().found.len(), 2);
}

#[tokio::test]
async fn under_block_the_result_is_withheld_naming_the_kinds_and_the_key() {
    let (d, fx, _) = with("action = \"block\"");
    let r = d.dispatch(read_env(), &fx.session).await;
    assert_eq!(r.error_class, Some(ErrorClass::ExecutionError));
    let text = r.text();
    assert!(!text.contains(SECRET), "{text}");
    for says in [
        "The result of 'read_file' was withheld",
        "2 secrets",
        "aws-secret-access-key at content[0] line",
        "[secrets] action = \"block\"",
        "\"off\"",
    ] {
        assert!(text.contains(says), "{says:?} in {text}");
    }
}

#[tokio::test]
async fn a_tool_set_off_by_name_or_glob_returns_its_secrets_untouched() {
    for settings in [
        "[per_tool]\nread_file = \"off\"",
        "action = \"block\"\n[per_tool]\n\"read_*\" = \"off\"",
    ] {
        let (d, fx, _) = with(settings);
        let r = d.dispatch(read_env(), &fx.session).await;
        assert!(r.text().contains(SECRET), "{settings}: {}", r.text());
    }
    // The exact name wins over a glob.
    let (d, fx, _) = with("[per_tool]\n\"read_*\" = \"off\"\nread_file = \"redact\"");
    let r = d.dispatch(read_env(), &fx.session).await;
    assert!(!r.text().contains(SECRET), "{}", r.text());
}

#[tokio::test]
async fn live_output_is_redacted_even_when_a_secret_comes_in_two_chunks() {
    let (d, fx, _) = with("");
    let mut events = fx.session.subscribe();
    let (head, tail) = GITHUB.split_at(10);
    let command = format!("printf 'token {head}'; sleep 0.3; printf '{tail} done\\n'; echo after");
    let r = d
        .dispatch(
            ToolUse::new("tu_live", "shell", json!({ "command": command })),
            &fx.session,
        )
        .await;
    assert!(!r.is_error(), "{r:?}");
    assert!(!r.text().contains(GITHUB), "{}", r.text());
    let mut chunks = String::new();
    for e in common::drain(&mut events) {
        if e.kind.name() == "tool.output_delta" {
            chunks.push_str(e.to_json()["chunk"].as_str().unwrap());
        }
    }
    assert!(!chunks.contains(tail), "{chunks}");
    assert_eq!(chunks, "token [REDACTED github-token] done\nafter\n");
}

#[tokio::test]
async fn a_failed_calls_message_is_redacted_in_its_result_and_its_event() {
    let (d, fx, _) = with("");
    let mut events = fx.session.subscribe();
    let command = format!("echo 'could not log in with {GITHUB}' >&2; exit 3");
    let r = d
        .dispatch(
            ToolUse::new("tu_fail", "shell", json!({ "command": command })),
            &fx.session,
        )
        .await;
    assert!(r.is_error());
    assert!(!r.text().contains(GITHUB), "{}", r.text());
    let failed = next_of(&mut events, "tool.failed").await.to_json();
    let failed = failed.to_string();
    assert!(!failed.contains(GITHUB), "{failed}");
    assert!(failed.contains("[REDACTED github-token]"), "{failed}");
}

#[tokio::test]
async fn secrets_in_arguments_are_refused_or_asked_about_when_the_settings_say_so() {
    let call = || {
        ToolUse::new(
            "tu_arg",
            "shell",
            json!({ "command": format!("curl -H 'Authorization: token {GITHUB}' https://api.github.com") }),
        )
    };
    // Off by default: it runs (curl may fail here; what matters is that it ran).
    let (d, fx, _) = with("");
    let r = d.dispatch(call(), &fx.session).await;
    assert_ne!(r.error_class, Some(ErrorClass::UserDenied), "{r:?}");

    let (d, fx, audit) = with("arguments = \"refuse\"");
    let r = d.dispatch(call(), &fx.session).await;
    assert_eq!(r.error_class, Some(ErrorClass::UserDenied));
    let text = r.text();
    assert!(!text.contains(GITHUB), "{text}");
    for says in [
        "github-token at /command",
        "[secrets] arguments = \"refuse\"",
    ] {
        assert!(text.contains(says), "{says:?} in {text}");
    }
    let entry = audit.0.lock().unwrap().pop().unwrap();
    assert_eq!(entry.decision.as_deref(), Some("deny"));
    assert_eq!(entry.secrets.unwrap().action, "refuse");

    // Ask: the call waits for a confirmation that names why.
    let (d, fx, _) = with("arguments = \"ask\"");
    let mut events = fx.session.subscribe();
    let session = fx.session.clone();
    let run = tokio::spawn(async move { d.dispatch(call(), &session).await });
    let asked = next_of(&mut events, "tool.confirmation_requested")
        .await
        .to_json();
    assert!(
        asked
            .to_string()
            .contains("[secrets] arguments = \\\"ask\\\""),
        "{asked}"
    );
    run.abort();
}
