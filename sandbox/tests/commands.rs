//! Commands under `workspace-write` and `read-only`, run for real: each escape is tried
//! with plain shell and checked at its target (no file, nothing at the listener).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use sandbox::{CommandMode, CommandPolicy, Prepared, PrivateTmp, SandboxError};

/// A workspace, a private temp dir, and a directory outside both (a stand-in for the
/// user's home, with a secret in it).
struct Setup {
    workspace: tempfile::TempDir,
    outside: tempfile::TempDir,
    tmp: PrivateTmp,
}

impl Setup {
    fn new() -> Setup {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "hunter2").unwrap();
        Setup {
            workspace: tempfile::tempdir().unwrap(),
            outside,
            tmp: PrivateTmp::new().unwrap(),
        }
    }

    fn policy(&self, mode: CommandMode, network: bool) -> CommandPolicy {
        CommandPolicy {
            mode,
            workspace: self.workspace.path().to_path_buf(),
            readable_roots: Vec::new(),
            writable_roots: Vec::new(),
            network,
        }
    }

    /// Runs `script` with bash under `policy`, in the workspace.
    fn run_under(&self, policy: &CommandPolicy, script: &str) -> Output {
        let prepared = Prepared::new(&policy.confinement(self.tmp.path(), None)).unwrap();
        let mut command = Command::new("/bin/bash");
        command
            .args(["-c", script])
            .current_dir(self.workspace.path())
            .env("TMPDIR", self.tmp.path())
            .env("OUTSIDE", self.outside.path())
            .env("HOST", std::process::id().to_string());
        prepared.attach(&mut command);
        command.output().unwrap()
    }

    fn run(&self, script: &str) -> Output {
        self.run_under(&self.policy(CommandMode::WorkspaceWrite, false), script)
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn assert_ok(o: &Output) {
    assert!(o.status.success(), "{}", text(o));
}

fn assert_refused(o: &Output) {
    assert!(!o.status.success(), "expected a refusal: {}", text(o));
}

#[test]
fn workspace_write_writes_the_workspace_and_its_temp_dir() {
    let s = Setup::new();
    assert_ok(
        &s.run("echo hi > made.txt && mkdir -p d/e && mv made.txt d/e/ && echo t > \"$TMPDIR/t\""),
    );
    assert_eq!(
        std::fs::read_to_string(s.workspace.path().join("d/e/made.txt")).unwrap(),
        "hi\n"
    );
}

#[test]
fn writing_outside_the_workspace_fails_and_leaves_nothing() {
    let s = Setup::new();
    assert_refused(&s.run("echo x > \"$OUTSIDE/planted\""));
    assert!(!s.outside.path().join("planted").exists());
    assert_refused(&s.run("rm \"$OUTSIDE/secret\""));
    assert!(s.outside.path().join("secret").exists());
    assert_refused(&s.run("echo x > /tmp/toolhost-sandbox-test-escape"));
    assert!(!Path::new("/tmp/toolhost-sandbox-test-escape").exists());
}

#[test]
fn a_directory_outside_the_granted_ones_cannot_be_read() {
    let s = Setup::new();
    let o = s.run("cat \"$OUTSIDE/secret\"");
    assert_refused(&o);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("hunter2"));
    assert_refused(&s.run("ls \"$OUTSIDE\""));
}

#[test]
fn the_home_directory_cannot_be_read() {
    let s = Setup::new();
    let home = std::env::var("HOME").unwrap();
    assert_refused(&s.run(&format!("ls {home}")));
}

#[test]
fn connecting_out_fails_and_the_listener_sees_nothing() {
    let s = Setup::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    assert_refused(&s.run(&format!("echo hi > /dev/tcp/127.0.0.1/{port}")));
    assert_eq!(
        listener.accept().map(|_| ()).unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "something connected"
    );
}

#[test]
fn with_network_granted_it_connects() {
    let s = Setup::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let policy = s.policy(CommandMode::WorkspaceWrite, true);
    assert_ok(&s.run_under(&policy, &format!("echo hi > /dev/tcp/127.0.0.1/{port}")));
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_ok(), "the connection did not arrive");
}

#[test]
fn the_host_cannot_be_signalled_nor_its_environment_read() {
    let s = Setup::new();
    assert_refused(&s.run("kill -0 \"$HOST\""));
    assert_refused(&s.run("kill -TERM -- -1"));
    let o = s.run("cat /proc/$HOST/environ");
    assert_refused(&o);
    assert!(o.stdout.is_empty(), "{}", text(&o));
}

#[test]
fn its_own_children_can_be_signalled() {
    let s = Setup::new();
    assert_ok(&s.run("sleep 5 & kill $! && wait $!; test $? -eq 143"));
}

#[test]
fn no_new_namespaces_nor_tracing() {
    let s = Setup::new();
    assert_refused(&s.run("unshare -U true"));
    assert_refused(&s.run("unshare -n true"));
}

#[test]
fn read_only_writes_nothing_but_its_temp_dir() {
    let s = Setup::new();
    std::fs::write(s.workspace.path().join("keep.txt"), "kept").unwrap();
    let policy = s.policy(CommandMode::ReadOnly, false);
    assert_ok(&s.run_under(&policy, "cat keep.txt && echo t > \"$TMPDIR/t\""));
    assert_refused(&s.run_under(&policy, "echo x > new.txt"));
    assert_refused(&s.run_under(&policy, "rm keep.txt"));
    assert!(!s.workspace.path().join("new.txt").exists());
    assert!(s.workspace.path().join("keep.txt").exists());
}

#[test]
fn a_program_built_in_the_workspace_runs() {
    let s = Setup::new();
    std::fs::write(
        s.workspace.path().join("hello.c"),
        "#include <stdio.h>\nint main(void) { puts(\"built and ran\"); return 0; }\n",
    )
    .unwrap();
    let o = s.run("cc -o hello hello.c && ./hello");
    assert_ok(&o);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "built and ran\n");
}

#[test]
fn a_granted_readable_root_can_be_read_but_not_written() {
    let s = Setup::new();
    let mut policy = s.policy(CommandMode::WorkspaceWrite, false);
    policy.readable_roots.push(s.outside.path().to_path_buf());
    assert_ok(&s.run_under(&policy, "cat \"$OUTSIDE/secret\""));
    assert_refused(&s.run_under(&policy, "echo x > \"$OUTSIDE/new\""));
    policy.writable_roots.push(s.outside.path().to_path_buf());
    assert_ok(&s.run_under(&policy, "echo x > \"$OUTSIDE/new\""));
}

#[test]
fn no_device_can_be_made_in_the_workspace() {
    let s = Setup::new();
    assert_refused(&s.run("mknod disk b 8 0"));
    assert!(!s.workspace.path().join("disk").exists());
}

#[test]
fn a_process_with_threads_may_not_confine_itself() {
    // The test harness runs this test on a thread of its own.
    let _other = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(1)));
    match sandbox::confine_self(&sandbox::Confinement::nothing()) {
        Err(SandboxError::Threads(n)) => assert!(n > 1),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
