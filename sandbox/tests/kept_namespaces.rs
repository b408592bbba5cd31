//! The mount namespace a command enters is made once per deny list and kept: commands
//! share it, and it still hides what a namespace made for the command would (a hidden file
//! replaced, a hidden path that appeared) and shows the host's mounts of the moment.
#![cfg(target_os = "linux")]
#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sandbox::{CommandGrant, CommandMode, Prepared, PrivateTmp, Settings};

const SECRET: &str = "hunter2";

/// A workspace with `.env` and `keys/` on the deny list.
struct Setup {
    workspace: tempfile::TempDir,
    tmp: PrivateTmp,
}

impl Setup {
    fn new() -> Setup {
        let workspace = tempfile::tempdir().unwrap();
        std::fs::create_dir(workspace.path().join("keys")).unwrap();
        std::fs::write(workspace.path().join("keys/id"), SECRET).unwrap();
        Setup {
            workspace,
            tmp: PrivateTmp::new().unwrap(),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.workspace.path().join(rel)
    }

    /// Runs `script` with sh in the workspace under `workspace-write`, no network.
    fn run(&self, script: &str) -> Output {
        let settings = Settings {
            deny_read: vec![self.path(".env"), self.path("keys")],
            ..Settings::default()
        };
        let grant = CommandGrant {
            mode: CommandMode::WorkspaceWrite,
            network: false,
        };
        let c = settings
            .confinement(grant, self.workspace.path(), self.tmp.path())
            .unwrap();
        let mut command = Command::new("/bin/sh");
        command
            .args(["-c", script])
            .current_dir(self.workspace.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let _attached = Prepared::new(&c).unwrap().attach(&mut command).unwrap();
        command.output().unwrap()
    }

    fn stdout(&self, script: &str) -> String {
        let o = self.run(script);
        assert!(o.status.success(), "{}", report(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
}

fn report(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The command could not read the secret, and nothing of it reached its output.
fn assert_hidden(o: &Output) {
    assert!(!o.status.success(), "expected a refusal: {}", report(o));
    assert!(
        !report(o).contains(SECRET),
        "the secret leaked: {}",
        report(o)
    );
}

fn mount_namespace_of(pid: &str) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap()
}

#[test]
fn commands_with_the_same_deny_list_share_one_mount_namespace_not_the_hosts() {
    let s = Setup::new();
    let ns = || s.stdout("readlink /proc/self/ns/mnt");
    let first = ns();
    assert_ne!(Path::new(&first), mount_namespace_of("self"));
    // A mount anywhere on the host between two commands (another test mounts) makes a new
    // one: two in a row share it.
    assert!((0..5).any(|_| ns() == ns()), "each command had its own");
    assert_hidden(&s.run("cat keys/id"));
}

#[test]
fn a_command_runs_in_its_working_directory() {
    let s = Setup::new();
    let pwd = s.stdout("pwd -P");
    assert_eq!(Path::new(&pwd), s.workspace.path().canonicalize().unwrap());
}

#[test]
fn a_hidden_file_replaced_after_a_command_ran_is_hidden_from_the_next() {
    let s = Setup::new();
    std::fs::write(s.path(".env"), "TOKEN=first").unwrap();
    assert_hidden(&s.run("cat .env"));
    std::fs::remove_file(s.path(".env")).unwrap();
    std::fs::write(s.path(".env"), format!("TOKEN={SECRET}")).unwrap();
    assert_hidden(&s.run("cat .env"));
    assert!(
        std::fs::read_to_string(s.path(".env"))
            .unwrap()
            .contains(SECRET)
    );
}

#[test]
fn a_hidden_path_that_appears_after_a_command_ran_is_hidden_from_the_next() {
    let s = Setup::new();
    assert_eq!(s.stdout("ls -a"), ".\n..\nkeys");
    std::fs::write(s.path(".env"), format!("TOKEN={SECRET}")).unwrap();
    assert_hidden(&s.run("cat .env"));
}

#[test]
fn a_mount_made_on_the_host_after_a_command_ran_is_seen_by_the_next() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test mounts a tmpfs: run the suite as root (as CI does)"
    );
    let s = Setup::new();
    std::fs::create_dir(s.path("mnt")).unwrap();
    assert_eq!(s.stdout("ls mnt"), "");
    let mount = |args: &[&str]| {
        let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", report(&o));
    };
    let target = s.path("mnt");
    let target = target.to_str().unwrap();
    mount(&["mount", "-t", "tmpfs", "tmpfs", target]);
    std::fs::write(s.path("mnt/new"), "on the new mount").unwrap();
    let seen = s.run("cat mnt/new");
    mount(&["umount", "-l", target]);
    assert!(seen.status.success(), "{}", report(&seen));
    assert_eq!(String::from_utf8_lossy(&seen.stdout), "on the new mount");
}
