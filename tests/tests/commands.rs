//! `shell` runs in the call's sandbox: `workspace-write` by default, or what the config
//! (per tool) or the runtime policy (per call) grants. Under `workspace-write` writing
//! outside, connecting out and reading a secret on the deny list fail (and the result says
//! what was denied and which setting allows it), and building and running something inside
//! the workspace works; `read-only` reaches the file API too.
#![cfg(target_os = "linux")]
#![cfg(test)]

mod common;

use std::io::ErrorKind;
use std::net::TcpListener;
use std::sync::Arc;

use common::{Fixture, allow_all, builtins};
use dispatcher_core::{Dispatcher, DispatcherConfig, ErrorClass, SandboxMode, ToolUse};
use dispatcher_core::{Grant, GrantRequest, RuntimePolicy};
use serde_json::json;

/// A dispatcher with the built-ins, asking for nothing, with `config`.
fn dispatcher(config: DispatcherConfig) -> Dispatcher {
    let d = Dispatcher::builder()
        .policy(allow_all())
        .config(config)
        .build();
    builtins(&d);
    d
}

fn shell(command: &str) -> ToolUse {
    ToolUse::new("tu", "shell", json!({ "command": command }))
}

/// A directory outside the workspace with a secret in it (a stand-in for `~/.ssh`, put on
/// the deny list by [`hiding`]).
fn planted() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("id_ed25519"), "the-planted-secret").unwrap();
    dir
}

#[tokio::test]
async fn shell_defaults_to_workspace_write_and_says_so() {
    let fx = Fixture::new(dispatcher(DispatcherConfig::default()));
    let r = fx
        .dispatcher
        .dispatch(shell("echo hi > made.txt && cat made.txt"), &fx.session)
        .await;
    assert!(!r.is_error(), "{}", r.text());
    assert_eq!(r.metadata["sandbox"], "workspace-write");
    assert_eq!(
        std::fs::read_to_string(fx.path("made.txt")).unwrap(),
        "hi\n"
    );
}

/// The default config with `dir` on the deny list.
fn hiding(dir: &std::path::Path) -> DispatcherConfig {
    let mut config = DispatcherConfig::default();
    config.sandbox.deny_read.push(dir.to_path_buf());
    config
}

#[tokio::test]
async fn under_workspace_write_escapes_fail_at_their_target() {
    let secret = planted();
    let fx = Fixture::new(dispatcher(hiding(secret.path())));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = tempfile::tempdir().unwrap();
    let written = outside.path().join("written");
    let attempts = [
        format!("echo x > {}", written.display()),
        format!("cat {}/id_ed25519", secret.path().display()),
        format!("ls {}", secret.path().display()),
        format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'"),
        format!("kill -0 {}", std::process::id()),
    ];
    for attempt in attempts {
        let r = fx.dispatcher.dispatch(shell(&attempt), &fx.session).await;
        assert!(r.is_error(), "{attempt}: {}", r.text());
        assert!(!r.text().contains("the-planted-secret"), "{}", r.text());
    }
    assert!(!written.exists());
    assert!(matches!(listener.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock));
}

#[tokio::test]
async fn a_denied_read_or_write_is_named_with_the_setting_that_allows_it() {
    let secret = planted();
    let fx = Fixture::new(dispatcher(hiding(secret.path())));
    let key = secret.path().join("id_ed25519");
    let r = fx
        .dispatcher
        .dispatch(shell(&format!("cat {}", key.display())), &fx.session)
        .await;
    assert!(r.is_error());
    assert!(
        r.text().contains(&format!(
            "[sandbox] read of {} denied: {} is on the deny list; `allow_read = [\"{}\"]` in [sandbox] re-opens it",
            key.display(),
            secret.path().display(),
            secret.path().display()
        )),
        "{}",
        r.text()
    );
    assert_eq!(r.metadata["sandbox_denials"].as_array().unwrap().len(), 1);
    let outside = tempfile::tempdir().unwrap();
    let r = fx
        .dispatcher
        .dispatch(
            shell(&format!("touch {}/f", outside.path().display())),
            &fx.session,
        )
        .await;
    assert!(
        r.text().contains("add its directory to `writable_roots`"),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn with_the_protection_removed_the_same_attempts_succeed() {
    // The control for the refusals above: the deny list and the OS sandbox are what
    // stop them.
    let secret = planted();
    let mut config = hiding(secret.path());
    config
        .sandbox
        .per_tool
        .insert("shell".into(), sandbox::Mode::Host);
    let fx = Fixture::new(dispatcher(config));
    let r = fx
        .dispatcher
        .dispatch(
            shell(&format!("cat {}/id_ed25519", secret.path().display())),
            &fx.session,
        )
        .await;
    assert!(r.text().contains("the-planted-secret"), "{}", r.text());
}

#[tokio::test]
async fn under_workspace_write_a_build_in_the_workspace_runs() {
    let fx = Fixture::new(dispatcher(DispatcherConfig::default()));
    fx.write(
        "hello.c",
        "#include <stdio.h>\nint main(void) { puts(\"built\"); return 0; }\n",
    );
    let r = fx
        .dispatcher
        .dispatch(shell("cc -o hello hello.c && ./hello"), &fx.session)
        .await;
    assert!(!r.is_error(), "{}", r.text());
    assert!(r.text().starts_with("built\n"), "{}", r.text());
}

#[tokio::test]
async fn network_granted_by_config_goes_out_through_the_proxy_to_listed_hosts_only() {
    let (port, _) = toolhost_tests::web_server("hello");
    let mut config = DispatcherConfig::default();
    config.sandbox.network = sandbox::NetworkSettings {
        enabled: true,
        allow: sandbox::HostList::new([format!("127.0.0.1:{port}")]).unwrap(),
        deny: sandbox::HostList::none(),
    };
    let fx = Fixture::new(dispatcher(config));
    let r = fx
        .dispatcher
        .dispatch(
            shell(&format!("curl -fsS --max-time 5 http://127.0.0.1:{port}/")),
            &fx.session,
        )
        .await;
    assert!(!r.is_error(), "{}", r.text());
    assert!(r.text().starts_with("hello"), "{}", r.text());
    assert_eq!(
        r.metadata["sandbox"],
        "workspace-write, network through the egress proxy"
    );
    // Straight to the address, around the proxy: nothing there.
    let r = fx
        .dispatcher
        .dispatch(
            shell(&format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'")),
            &fx.session,
        )
        .await;
    assert!(r.is_error(), "{}", r.text());
    // A host not listed: refused by the proxy, and the result says so.
    let r = fx
        .dispatcher
        .dispatch(
            shell("curl -fsS --max-time 5 https://example.com/"),
            &fx.session,
        )
        .await;
    assert!(r.is_error(), "{}", r.text());
    assert!(
        r.text().contains(
            "[sandbox] network: example.com:443 refused, not in [sandbox.network] allow (the egress proxy)"
        ),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn a_per_tool_mode_of_host_runs_the_command_with_the_users_rights() {
    let mut config = DispatcherConfig::default();
    config
        .sandbox
        .per_tool
        .insert("shell".into(), sandbox::Mode::Host);
    let fx = Fixture::new(dispatcher(config));
    let outside = tempfile::tempdir().unwrap();
    let file = outside.path().join("written");
    let r = fx
        .dispatcher
        .dispatch(shell(&format!("echo x > {}", file.display())), &fx.session)
        .await;
    assert!(!r.is_error(), "{}", r.text());
    assert_eq!(r.metadata["sandbox"], "host");
    assert!(file.exists());
}

/// Grants `read-only` to every call of the tools it names.
struct ReadOnlyFor(&'static [&'static str]);
impl RuntimePolicy for ReadOnlyFor {
    fn grant(&self, call: &GrantRequest<'_>, base: Grant) -> Result<Grant, String> {
        Ok(if self.0.contains(&call.tool_name()) {
            Grant {
                sandbox: SandboxMode::ReadOnly,
                ..base
            }
        } else {
            base
        })
    }
}

fn read_only_for(tools: &'static [&'static str]) -> Dispatcher {
    let d = Dispatcher::builder()
        .policy(allow_all())
        .runtime(Arc::new(ReadOnlyFor(tools)))
        .build();
    builtins(&d);
    d
}

#[tokio::test]
async fn a_read_only_grant_lets_a_command_read_the_workspace_and_write_nothing() {
    let fx = Fixture::new(read_only_for(&["shell"]));
    fx.write("kept.txt", "kept");
    let r = fx
        .dispatcher
        .dispatch(shell("cat kept.txt"), &fx.session)
        .await;
    assert_eq!(r.text(), "kept\n[exit code: 0]");
    assert_eq!(r.metadata["sandbox"], "read-only");
    let r = fx
        .dispatcher
        .dispatch(shell("echo x > new.txt; rm kept.txt"), &fx.session)
        .await;
    assert!(r.is_error(), "{}", r.text());
    assert!(!fx.path("new.txt").exists() && fx.path("kept.txt").exists());
}

#[tokio::test]
async fn a_read_only_grant_reaches_the_file_api_too() {
    let fx = Fixture::new(read_only_for(&["write_file", "read_file"]));
    fx.write("a.txt", "a");
    let r = fx
        .dispatcher
        .dispatch(
            ToolUse::new("tu", "write_file", json!({"path": "b.txt", "content": "b"})),
            &fx.session,
        )
        .await;
    assert_eq!(r.error_class, Some(ErrorClass::PermissionDenied), "{r:?}");
    assert!(
        r.text().contains("granted sandbox 'read-only'"),
        "{}",
        r.text()
    );
    assert!(!fx.path("b.txt").exists());
    let r = fx
        .dispatcher
        .dispatch(
            ToolUse::new("tu", "read_file", json!({"path": "a.txt"})),
            &fx.session,
        )
        .await;
    assert!(!r.is_error(), "{}", r.text());
}

/// A workspace of `folders` folders of ten files each, a `.env` in every other folder.
fn many_env_files(fx: &Fixture, folders: usize) -> Vec<std::path::PathBuf> {
    let mut planted = Vec::new();
    for f in 0..folders {
        let dir = fx.path(&format!("pkg{f}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..10 {
            std::fs::write(dir.join(format!("f{i}.js")), "").unwrap();
        }
        if f % 2 == 0 {
            std::fs::write(dir.join(".env"), "the-planted-secret").unwrap();
            planted.push(dir.join(".env"));
        }
    }
    planted
}

/// The default config with `**/.env` on the deny list, searched through at most `limit`
/// entries of the workspace.
fn env_denied(limit: usize) -> DispatcherConfig {
    let mut config = DispatcherConfig::default();
    config.sandbox.deny_read.push("**/.env".into());
    config.sandbox.deny_read_limit = limit;
    config
}

#[tokio::test]
async fn a_workspace_larger_than_the_deny_read_search_refuses_the_command_naming_the_limit() {
    let fx = Fixture::new(dispatcher(env_denied(100)));
    many_env_files(&fx, 40);
    let marker = fx.path("ran");
    let r = fx
        .dispatcher
        .dispatch(
            shell(&format!("touch {}; cat pkg*/.env", marker.display())),
            &fx.session,
        )
        .await;
    assert!(r.is_error(), "{}", r.text());
    assert_eq!(r.error_class, Some(ErrorClass::PermissionDenied));
    assert!(!r.text().contains("the-planted-secret"), "{}", r.text());
    assert!(
        r.text().contains("holds more than 100 entries")
            && r.text().contains("raise deny_read_limit in [sandbox]"),
        "{}",
        r.text()
    );
    assert!(!marker.exists(), "the command ran");
}

#[tokio::test]
async fn every_env_file_a_pattern_names_is_hidden_when_the_search_covers_the_workspace() {
    let fx = Fixture::new(dispatcher(env_denied(sandbox::DENY_READ_LIMIT)));
    let planted = many_env_files(&fx, 40);
    assert_eq!(planted.len(), 20);
    let r = fx
        .dispatcher
        .dispatch(shell("cat pkg*/.env; ls pkg0"), &fx.session)
        .await;
    assert!(!r.text().contains("the-planted-secret"), "{}", r.text());
    assert!(r.text().contains("f9.js"), "{}", r.text());
}
