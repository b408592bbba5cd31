//! Hooks and policy: pre-use hooks (allow, deny, ask, rewrite), post-use hooks,
//! external command hooks, runtime grants and session approvals.
#![cfg(test)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Fixture, builtins, policy};
use dispatcher_core::{
    CommandHook, HookCall, HookDecision, HookFuture, HookMatcher, PostDecision, PostUseCall,
    PostUseHook, pre_use_fn,
};
use dispatcher_core::{ConfirmationRequest, Confirmer, Decision, Dispatcher, ErrorClass, ToolUse};
use dispatcher_core::{Grant, GrantRequest, RuntimePolicy, SandboxMode};
use serde_json::{Value, json};

/// Answers every prompt with one decision and counts the prompts.
#[derive(Default)]
struct Counting {
    decision: Option<Decision>,
    asked: AtomicUsize,
}

impl Counting {
    fn new(decision: Decision) -> Arc<Counting> {
        Arc::new(Counting {
            decision: Some(decision),
            asked: AtomicUsize::new(0),
        })
    }
    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

impl Confirmer for Counting {
    fn name(&self) -> &str {
        "counting"
    }
    fn confirm(&self, _r: ConfirmationRequest) -> dispatcher_core::ConfirmFuture {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let d = self.decision.unwrap_or(Decision::Deny);
        Box::pin(async move { d.into() })
    }
}

fn write(path: &str) -> ToolUse {
    ToolUse::new("tu", "write_file", json!({"path": path, "content": "x"}))
}

#[tokio::test]
async fn hook_allow_skips_the_prompt() {
    let asker = Counting::new(Decision::Deny);
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .hook(pre_use_fn("allow-writes", |_| HookDecision::Allow))
            .confirmer(asker.clone()),
    );
    let r = d.dispatch(write("a.txt"), &fx.session).await;
    assert!(!r.is_error(), "{r:?}");
    assert_eq!(asker.asked(), 0);
}

#[tokio::test]
async fn hook_allow_never_bypasses_a_policy_deny() {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .policy(policy(r#"per_tool = { write_file = "deny" }"#))
            .hook(pre_use_fn("allow-everything", |_| HookDecision::Allow)),
    );
    let r = d.dispatch(write("a.txt"), &fx.session).await;
    assert_eq!(r.error_class, Some(ErrorClass::UserDenied));
    assert!(
        r.text().contains("tool_confirmation.per_tool.write_file"),
        "{}",
        r.text()
    );
    assert!(!fx.path("a.txt").exists());
}

#[tokio::test]
async fn hook_deny_beats_another_hooks_allow_and_its_reason_reaches_the_model() {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .hook(pre_use_fn("allow", |_| HookDecision::Allow))
            .hook(pre_use_fn("guard", |_| {
                HookDecision::Deny("writes are frozen until the release".into())
            })),
    );
    let r = d.dispatch(write("a.txt"), &fx.session).await;
    assert_eq!(r.error_class, Some(ErrorClass::UserDenied));
    assert_eq!(
        r.text(),
        "Tool 'write_file' was denied by pre-use hook 'guard': writes are frozen until the release"
    );
}

#[tokio::test]
async fn hook_ask_forces_a_prompt_even_after_always_allow() {
    let asker = Counting::new(Decision::AlwaysAllow);
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .hook(pre_use_fn("ask-on-env", |c: &HookCall<'_>| {
                if c.input["path"] == ".env" {
                    HookDecision::Ask("touches secrets".into())
                } else {
                    HookDecision::Continue
                }
            }))
            .confirmer(asker.clone()),
    );
    assert!(!d.dispatch(write("a.txt"), &fx.session).await.is_error());
    assert!(!d.dispatch(write("b.txt"), &fx.session).await.is_error());
    assert_eq!(asker.asked(), 1, "always-allow covers the second write");
    assert!(!d.dispatch(write(".env"), &fx.session).await.is_error());
    assert_eq!(asker.asked(), 2, "the hook's ask still prompts");
}

#[tokio::test]
async fn hook_rewrite_is_validated_again_before_the_call_runs() {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .policy(policy(r#"per_tool = { write_file = "auto" }"#))
            .hook(pre_use_fn("normalize", |c: &HookCall<'_>| {
                match c.input["path"].as_str() {
                    Some("bad") => HookDecision::Rewrite(json!({"path": 42})),
                    Some("escape") => {
                        HookDecision::Rewrite(json!({"path": "../outside.txt", "content": "x"}))
                    }
                    Some(p) if !p.starts_with("out/") => HookDecision::Rewrite(
                        json!({"path": format!("out/{p}"), "content": c.input["content"]}),
                    ),
                    _ => HookDecision::Continue,
                }
            })),
    );
    let r = d.dispatch(write("a.txt"), &fx.session).await;
    assert!(!r.is_error(), "{r:?}");
    assert!(fx.path("out/a.txt").is_file(), "the rewritten input ran");
    assert!(!fx.path("a.txt").exists());

    let r = d.dispatch(write("bad"), &fx.session).await;
    assert_eq!(r.error_class, Some(ErrorClass::ValidationError));
    assert!(
        r.text()
            .contains("as rewritten by pre-use hook 'normalize'")
            && r.text().contains("/path"),
        "{}",
        r.text()
    );

    let r = d.dispatch(write("escape"), &fx.session).await;
    assert_eq!(r.error_class, Some(ErrorClass::PermissionDenied));
}

struct Reviewer;
impl PostUseHook for Reviewer {
    fn name(&self) -> &str {
        "reviewer"
    }
    fn after_use<'a>(&'a self, call: &'a PostUseCall<'a>) -> HookFuture<'a, PostDecision> {
        let decision = if call.result.text().contains("SECRET") {
            PostDecision::Replace {
                text: "[redacted by policy]".into(),
                is_error: true,
            }
        } else if call.call.tool_name() == "read_file" {
            PostDecision::Annotate("this file is generated; do not edit it".into())
        } else {
            PostDecision::Keep
        };
        Box::pin(std::future::ready(decision))
    }
}

#[tokio::test]
async fn post_use_hook_annotates_or_replaces_the_result() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().post_hook(Arc::new(Reviewer)));
    fx.write("gen.rs", "fn main() {}");
    fx.write("keys.txt", "SECRET=1");
    let r = d
        .dispatch(
            ToolUse::new("t1", "read_file", json!({"path": "gen.rs"})),
            &fx.session,
        )
        .await;
    assert_eq!(
        r.text(),
        "fn main() {}\nNote from hook 'reviewer': this file is generated; do not edit it"
    );
    let r = d
        .dispatch(
            ToolUse::new("t2", "read_file", json!({"path": "keys.txt"})),
            &fx.session,
        )
        .await;
    assert!(r.is_error());
    assert_eq!(r.text(), "[redacted by policy]");
}

fn command_hook(script: &str) -> CommandHook {
    CommandHook {
        command: script.to_string(),
        matcher: HookMatcher::All,
        timeout: Duration::from_secs(5),
    }
}

fn with_command_hook(hook: CommandHook) -> (Dispatcher, Fixture) {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .policy(policy(r#"per_tool = { write_file = "auto" }"#))
            .hook(Arc::new(hook)),
    );
    (d, fx)
}

#[tokio::test]
async fn command_hook_exit_2_denies_with_stderr_as_the_reason() {
    let (d, fx) = with_command_hook(command_hook("echo 'no writes to .github' >&2; exit 2"));
    let r = d.dispatch(write("a.txt"), &fx.session).await;
    assert_eq!(r.error_class, Some(ErrorClass::UserDenied));
    assert!(r.text().ends_with(": no writes to .github"), "{}", r.text());
    assert!(!fx.path("a.txt").exists());
}

#[tokio::test]
async fn command_hook_gets_the_call_as_json_on_stdin_and_exit_0_lets_it_run() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.json");
    let (d, fx) = with_command_hook(command_hook(&format!("cat > '{}'", seen.display())));
    let r = d.dispatch(write("a.txt"), &fx.session).await;
    assert!(!r.is_error(), "{r:?}");
    let call: Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(call["hook_event"], "pre_tool_use");
    assert_eq!(call["tool_name"], "write_file");
    assert_eq!(call["side_effects"], "write");
    assert_eq!(call["input"]["path"], "a.txt");
    assert_eq!(call["tool_use_id"], "tu");
}

#[tokio::test]
async fn command_hook_other_exit_codes_timeouts_and_garbage_are_logged_and_let_the_call_run() {
    for script in ["exit 1", "exit 7", "sleep 5", "echo 'not a decision'"] {
        let mut hook = command_hook(script);
        hook.timeout = Duration::from_millis(200);
        let (d, fx) = with_command_hook(hook);
        let r = d.dispatch(write("a.txt"), &fx.session).await;
        assert!(!r.is_error(), "{script}: {r:?}");
    }
}

#[tokio::test]
async fn command_hook_can_rewrite_the_input_through_stdout() {
    let (d, fx) = with_command_hook(command_hook(
        r#"echo '{"input": {"path": "rewritten.txt", "content": "y"}}'"#,
    ));
    assert!(!d.dispatch(write("a.txt"), &fx.session).await.is_error());
    assert_eq!(
        std::fs::read_to_string(fx.path("rewritten.txt")).unwrap(),
        "y"
    );
}

#[tokio::test]
async fn command_hook_runs_only_for_the_tools_it_names() {
    let mut hook = command_hook("exit 2");
    hook.matcher = HookMatcher::Tools(vec!["shell".into()]);
    let (d, fx) = with_command_hook(hook);
    assert!(!d.dispatch(write("a.txt"), &fx.session).await.is_error());
}

#[tokio::test]
async fn command_post_hook_annotates_the_result() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().post_hook(Arc::new(command_hook(
        r#"echo '{"annotate": "reviewed by audit"}'"#,
    ))));
    fx.write("a.txt", "hello");
    let r = d
        .dispatch(
            ToolUse::new("t", "read_file", json!({"path": "a.txt"})),
            &fx.session,
        )
        .await;
    assert!(r.text().ends_with("reviewed by audit"), "{}", r.text());
}

struct Limits {
    sandbox: SandboxMode,
}
impl RuntimePolicy for Limits {
    fn grant(&self, call: &GrantRequest<'_>, base: Grant) -> Result<Grant, String> {
        if call.tool_name() == "list_dir" {
            return Err("directory listings are not allowed for this agent".into());
        }
        Ok(Grant {
            sandbox: self.sandbox,
            network: false,
            timeout: base.timeout.min(Duration::from_millis(300)),
            max_result_chars: 10,
        })
    }
}

#[tokio::test]
async fn runtime_policy_grant_sets_the_timeout_and_output_size() {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .policy(policy(r#"per_tool = { shell = "auto" }"#))
            .runtime(Arc::new(Limits {
                sandbox: SandboxMode::Host,
            })),
    );
    let r = d
        .dispatch(
            ToolUse::new("t", "shell", json!({"command": "sleep 5"})),
            &fx.session,
        )
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::Timeout), "{r:?}");
    let r = d
        .dispatch(
            ToolUse::new("t2", "shell", json!({"command": "seq 1 100"})),
            &fx.session,
        )
        .await;
    assert!(r.text().contains("Output too large"), "{}", r.text());
    let r = d
        .dispatch(
            ToolUse::new("t3", "list_dir", json!({"path": "."})),
            &fx.session,
        )
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::PermissionDenied));
    assert!(
        r.text().contains("not allowed for this agent"),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn unsupported_sandbox_mode_in_a_grant_is_refused_never_ignored() {
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .policy(policy(r#"per_tool = { shell = "auto" }"#))
            .runtime(Arc::new(Limits {
                sandbox: SandboxMode::Container,
            })),
    );
    let r = d
        .dispatch(
            ToolUse::new("t", "shell", json!({"command": "touch ran"})),
            &fx.session,
        )
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::PermissionDenied));
    assert!(
        r.text().contains(
            "sandbox mode 'container' is not supported by this host (supported: host, read-only, workspace-write)"
        ),
        "{}",
        r.text()
    );
    assert!(!fx.path("ran").exists(), "the call did not run");
}

#[tokio::test]
async fn always_allow_lasts_for_the_session_and_can_be_listed_and_revoked() {
    let asker = Counting::new(Decision::AlwaysAllow);
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().confirmer(asker.clone()));
    for p in ["a", "b", "c"] {
        assert!(!d.dispatch(write(p), &fx.session).await.is_error());
    }
    assert_eq!(asker.asked(), 1);
    assert_eq!(fx.session.approvals(), ["write_file"]);
    assert!(fx.session.revoke_approval("write_file").await);
    assert!(!fx.session.revoke_approval("write_file").await);
    assert!(fx.session.approvals().is_empty());
    assert!(!d.dispatch(write("d"), &fx.session).await.is_error());
    assert_eq!(asker.asked(), 2, "prompts again after the revoke");
    assert_eq!(fx.session.revoke_all_approvals().await, 1);
}

#[tokio::test]
async fn a_grant_that_cannot_be_read_means_asking() {
    let asker = Counting::new(Decision::AlwaysAllow);
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().confirmer(asker.clone()).store(
        Arc::new(dispatcher_core::store::Unreachable::new(
            "redis://cache:6379/0",
        )),
    ));
    for p in ["a", "b"] {
        assert!(!d.dispatch(write(p), &fx.session).await.is_error());
    }
    assert_eq!(asker.asked(), 2, "each call asked: no grant could be read");
}

#[tokio::test]
async fn a_shared_sessions_grant_holds_on_every_instance_and_a_local_ones_does_not() {
    use dispatcher_core::SessionSpec;
    let store = dispatcher_core::store::MemoryStore::new();
    let instance = |asker: &Arc<Counting>| {
        let d = Dispatcher::builder()
            .confirmer(asker.clone())
            .store(store.clone())
            .build();
        builtins(&d);
        d
    };
    let (asked_a, asked_b) = (
        Counting::new(Decision::AlwaysAllow),
        Counting::new(Decision::AlwaysAllow),
    );
    let (a, b) = (instance(&asked_a), instance(&asked_b));
    let dir = tempfile::tempdir().unwrap();
    for (shared, asked_at_b) in [(true, 0), (false, 1)] {
        let id = format!("mcp-alice-{shared}");
        let spec = || SessionSpec::new(&id, dir.path()).shared(shared);
        let at_a = a.open_session(spec()).unwrap();
        let at_b = b.open_session(spec()).unwrap();
        let before = asked_b.asked();
        assert!(!a.dispatch(write("x"), &at_a).await.is_error());
        assert!(!b.dispatch(write("y"), &at_b).await.is_error());
        assert_eq!(asked_b.asked() - before, asked_at_b, "shared: {shared}");
    }
}

#[tokio::test]
async fn user_interrupt_while_a_pre_use_hook_runs_keeps_the_call_from_running() {
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("hook-started");
    let pid_file = dir.path().join("sleeper.pid");
    let (d, fx) = with_command_hook(command_hook(&format!(
        "sleep 30 & echo $! > '{}'; touch '{}'; wait",
        pid_file.display(),
        started.display()
    )));
    let (d2, session) = (d.clone(), fx.session.clone());
    let call = tokio::spawn(async move { d2.dispatch(write("a.txt"), &session).await });
    while !started.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(d.cancel_session_tools(fx.session.id()).await, 1);
    let r = call.await.unwrap();
    assert_eq!(r.error_class, Some(ErrorClass::Cancelled), "{r:?}");
    assert!(!fx.path("a.txt").exists(), "the write never ran");
    // The hook's own children went with it.
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = || {
        std::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while alive() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(), "the hook's sleep {pid} was killed");
}

#[tokio::test]
async fn a_panicking_host_hook_fails_its_call_and_the_batch_still_finishes() {
    let (d, fx) = Fixture::with_builtins(Dispatcher::builder().hook(pre_use_fn(
        "buggy",
        |c: &HookCall<'_>| {
            if c.input["path"] == "boom" {
                panic!("bug in the host's hook")
            }
            HookDecision::Continue
        },
    )));
    fx.write("ok.txt", "fine");
    let results = d
        .dispatch_batch(
            vec![
                ToolUse::new("t1", "read_file", json!({"path": "boom"})),
                ToolUse::new("t2", "read_file", json!({"path": "ok.txt"})),
            ],
            &fx.session,
        )
        .await;
    assert_eq!(results[0].error_class, Some(ErrorClass::ExecutionError));
    assert!(
        results[0].text().contains("host log"),
        "{}",
        results[0].text()
    );
    assert_eq!(results[1].text(), "fine");
}

#[tokio::test]
async fn hook_allow_does_not_skip_a_prompt_a_per_tool_rule_asks_for() {
    let asker = Counting::new(Decision::Allow);
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .policy(policy(r#"per_tool = { write_file = "prompt" }"#))
            .hook(pre_use_fn("allow-everything", |_| HookDecision::Allow))
            .confirmer(asker.clone()),
    );
    let r = d.dispatch(write("a.txt"), &fx.session).await;
    assert!(!r.is_error(), "{r:?}");
    assert_eq!(
        asker.asked(),
        1,
        "the user asked to be asked about write_file"
    );
}

/// Records the base grant the dispatcher computed for each tool.
#[derive(Default)]
struct BaseTimeouts(std::sync::Mutex<Vec<(String, Duration)>>);
impl RuntimePolicy for BaseTimeouts {
    fn grant(&self, call: &GrantRequest<'_>, base: Grant) -> Result<Grant, String> {
        self.0
            .lock()
            .unwrap()
            .push((call.tool_name().to_string(), base.timeout));
        Ok(base)
    }
}

#[tokio::test]
async fn class_default_timeouts_are_60s_and_600s_for_execute_and_network() {
    let seen = Arc::new(BaseTimeouts::default());
    let (d, fx) = Fixture::with_builtins(
        Dispatcher::builder()
            .policy(policy(r#"default = { write = "auto", execute = "auto" }"#))
            .runtime(seen.clone()),
    );
    fx.write("a.txt", "a");
    for call in [
        ToolUse::new("r", "read_file", json!({"path": "a.txt"})),
        write("b.txt"),
        ToolUse::new("s", "shell", json!({"command": "true"})),
    ] {
        let r = d.dispatch(call, &fx.session).await;
        assert!(!r.is_error(), "{}", r.text());
    }
    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            ("read_file".to_string(), Duration::from_secs(60)),
            ("write_file".to_string(), Duration::from_secs(60)),
            ("shell".to_string(), Duration::from_secs(600)),
        ]
    );
}

#[tokio::test]
async fn a_session_can_have_its_own_confirmation_policy() {
    let d = Dispatcher::builder()
        .policy(policy(r#"default = { write = "auto" }"#))
        .build();
    builtins(&d);
    let dir = tempfile::tempdir().unwrap();
    let open = d
        .open_session(dispatcher_core::SessionSpec::new("open", dir.path()))
        .unwrap();
    let strict = d
        .open_session(
            dispatcher_core::SessionSpec::new("strict", dir.path())
                .policy(policy(r#"per_tool = { write_file = "deny" }"#)),
        )
        .unwrap();
    let r = d.dispatch(write("a.txt"), &open).await;
    assert!(!r.is_error(), "{}", r.text());
    let r = d.dispatch(write("b.txt"), &strict).await;
    assert_eq!(r.error_class, Some(ErrorClass::UserDenied), "{}", r.text());
    assert!(
        r.text().contains("tool_confirmation.per_tool.write_file"),
        "{}",
        r.text()
    );
    assert!(!dir.path().join("b.txt").exists());
}
