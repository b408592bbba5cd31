//! `cargo xtask demo`: package the example plugins, sign them with a key it generates and
//! trusts, and run toolhost over them (and over unsigned copies, which run isolated in the
//! OS sandbox: the `snoop` example, which reads files behind its context's back, is
//! refused by the kernel there). It tours native plugins only: WebAssembly components
//! (wasmtime and cranelift) would double a fresh clone's wait; the tour's last words say
//! how to try one.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::plugin::{
    crate_version, inspector, keygen, library_of, package_crate, package_library, sign,
};
use crate::steps::{Result, announce, fail, io, root};

const EXAMPLES: [&str; 3] = [
    "examples/plugins/text-tools",
    "examples/plugins/grep",
    "examples/plugins/snoop",
];

/// The steps of the tour (each a command shown, run, and its exit code).
const TOUR_STEPS: usize = 18;

/// A stand-in for the user's SSH key, outside the demo workspace (`target/demo/home`).
const SECRET: &str = "home/.ssh/id_ed25519";

fn prepare_workspace(ws: &Path, trusted: &plugin_host::PublicKey) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(ws);
    if let Some(demo) = ws.parent() {
        let secret = demo.join(SECRET);
        if let Some(dir) = secret.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&secret, "DEMO-SECRET planted by cargo xtask demo\n")?;
        let _ = std::fs::remove_file(demo.join("escaped.txt"));
    }
    std::fs::create_dir_all(ws.join("src"))?;
    std::fs::write(
        ws.join("README.md"),
        "# Demo project\n\nA scratch workspace for the toolhost demo.\n",
    )?;
    std::fs::write(
        ws.join("src/main.rs"),
        "fn main() {\n    // TODO: parse arguments\n    println!(\"hello\");\n}\n",
    )?;
    std::fs::write(
        ws.join("src/lib.rs"),
        "// TODO: write the library\npub fn answer() -> u32 {\n    42\n}\n",
    )?;
    let log: String = (1..=3000)
        .map(|i| {
            format!(
                "2026-11-22T10:{:02}:{:02} INFO request {i} served\n",
                i / 60 % 60,
                i % 60
            )
        })
        .collect();
    std::fs::write(ws.join("server.log"), log)?;
    std::fs::create_dir_all(ws.join("hooks"))?;
    std::fs::write(
        ws.join("hooks/guard.sh"),
        "#!/bin/sh\n\
         # A pre-use hook: the call arrives as JSON on stdin; exit 2 refuses it, stderr says why.\n\
         if grep -q 'secrets/'; then\n  echo 'the demo guard refuses anything under secrets/' >&2\n  exit 2\nfi\n",
    )?;
    std::fs::write(
        ws.join("toolhost.toml"),
        format!(
            "# Demo configuration: plugins from ../plugins, signed by the demo key trusted here\n\
             # (so they load in process); writes are confirmed (answered by --yes below); the\n\
             # shell is denied outright; results over 4000 characters are spooled; a hook\n\
             # guards secrets/.\n\
             plugin_dirs = [\"../plugins\"]\n\
             trusted_keys = [\"{trusted}\"]\n\n\
             [tool_confirmation.per_tool]\nshell = \"deny\"\n\n\
             [results]\nmax_chars = 4000\npreview_chars = 300\n\n\
             [[hooks.pre_tool_use]]\ncommand = \"sh hooks/guard.sh\"\n"
        ),
    )?;
    std::fs::write(
        ws.join("unsigned.toml"),
        "# The same plugins, unsigned: each runs isolated in a worker process, in the OS\n\
         # sandbox its tools' classes call for. The shell is not denied here: it runs in the\n\
         # workspace-write sandbox, which reads everything but the deny list (your ~/.ssh is\n\
         # on it already; the demo's stand-in home is added here).\n\
         plugin_dirs = [\"../plugins-unsigned\"]\n\n\
         [sandbox]\ndeny_read = [\"../home/.ssh\"]\n",
    )
}

/// How the example plugins' libraries are had.
pub enum Libraries<'a> {
    /// Built as an author ships them, with the release profile (the benches).
    Release,
    /// Already built by the demo's one cargo run (debug builds).
    Built(&'a xtask_launcher::Built),
}

/// Packages the example plugins into `unsigned`, and signed copies into `signed`, with a
/// key it generates at `key_file`; returns that key (to trust).
pub fn package_examples(
    signed: &Path,
    unsigned: &Path,
    key_file: &Path,
    libraries: Libraries<'_>,
) -> Result<plugin_host::PublicKey> {
    let _ = std::fs::remove_dir_all(signed);
    let _ = std::fs::remove_dir_all(unsigned);
    let _ = std::fs::remove_file(key_file);
    let trusted = keygen(key_file)?;
    for (i, example) in EXAMPLES.iter().enumerate() {
        announce(&format!(
            "[{}/{}] package and sign example plugin {example}",
            i + 1,
            EXAMPLES.len()
        ));
        let path = root().join(example);
        let archive = match libraries {
            Libraries::Release => package_crate(&path, unsigned, true)?,
            Libraries::Built(built) => {
                let step = format!("package the example plugin {example}");
                let Some(library) = library_of(built, &path.join("Cargo.toml")) else {
                    return fail(&step, "the demo's build made no library for it");
                };
                let version = crate_version(&path)?;
                package_library(&library, unsigned, &inspector(), Some(&version))?
            }
        };
        let copy = signed.join(archive.file_name().unwrap_or_default());
        io(
            "copy the package",
            std::fs::create_dir_all(signed).and_then(|()| std::fs::copy(&archive, &copy)),
        )?;
        sign(&copy, key_file)?;
    }
    Ok(trusted)
}

/// Runs the demo.
pub fn demo() -> Result {
    eprintln!(
        "cargo xtask demo: builds toolhost and the three example plugins (debug builds), \
         packages and signs the plugins, then tours toolhost over them. Output goes to \
         target/demo; the toolhost it built is left in target/demo/bin."
    );
    let tour = prepare(&root().join("target/demo"))?;
    let shown_ws = tour.shown_ws();
    eprintln!(
        "\nThe tour: each step shows a command as you would type it in {shown_ws}, with \
         `toolhost` on your PATH, then what it printed and its exit code."
    );
    tour.isolation_and_the_sandbox()?;
    tour.tools_and_policy()?;
    tour.try_it_yourself();
    Ok(())
}

/// Packages the examples, builds toolhost, prepares the workspace the tour runs in, and
/// leaves the toolhost it runs in `demo/bin`.
fn prepare(demo: &Path) -> Result<Tour> {
    // The tour's toolhost keeps its caches under target/demo/cache.
    let cache_home = demo.join("cache");
    // Everything the demo runs, in one cargo run with the arguments `cargo xtask demo`'s
    // launcher used: up to date here unless this xtask was started some other way.
    let built = xtask_launcher::build(
        "toolhost and the example plugins (debug)",
        "what this tour runs",
        &xtask_launcher::tool::DEMO_BUILD,
    )
    .or_else(|e| fail("build toolhost", e))?;
    let bin = built.executable("toolhost").map_or_else(
        || fail("build toolhost", "cargo built no toolhost executable"),
        Ok,
    )?;
    let trusted = package_examples(
        &demo.join("plugins"),
        &demo.join("plugins-unsigned"),
        &demo.join("demo-signing.key"),
        Libraries::Built(&built),
    )?;
    let ws = demo.join("workspace");
    io(
        "prepare the demo workspace",
        prepare_workspace(&ws, &trusted),
    )?;
    // The toolhost the tour runs, where a user can put it on PATH at once.
    let installed = demo.join("bin/toolhost");
    io(
        "leave toolhost in target/demo/bin",
        std::fs::create_dir_all(demo.join("bin")).and_then(|()| {
            let _ = std::fs::remove_file(&installed);
            std::fs::copy(&bin, &installed).map(|_| ())
        }),
    )?;
    Ok(Tour {
        bin,
        ws,
        demo: demo.to_path_buf(),
        cache_home,
        step: std::cell::Cell::new(0),
    })
}

/// The tour: toolhost run in the demo workspace, one step at a time.
struct Tour {
    /// The toolhost it runs.
    bin: PathBuf,
    /// The demo workspace.
    ws: PathBuf,
    /// `target/demo`.
    demo: PathBuf,
    /// The `XDG_CACHE_HOME` the tour's toolhost runs with.
    cache_home: PathBuf,
    /// The steps shown so far.
    step: std::cell::Cell<usize>,
}

impl Tour {
    /// The input of a file tool that names the stand-in SSH key, outside the workspace.
    fn outside_input(&self) -> String {
        format!(r#"{{"path": "{}"}}"#, self.demo.join(SECRET).display())
    }

    /// The workspace as the user finds it from the repository root.
    fn shown_ws(&self) -> String {
        let ws = &self.ws;
        ws.strip_prefix(root()).unwrap_or(ws).display().to_string()
    }

    /// One step: `title`, the command as typed, what it printed and its exit code.
    fn show(&self, title: &str, args: &[&str]) -> Result {
        let line: Vec<String> = args.iter().map(|a| shell_quoted(a)).collect();
        self.step.set(self.step.get() + 1);
        eprintln!(
            "\n==> [{}/{TOUR_STEPS}] {title}\n$ toolhost {}",
            self.step.get(),
            line.join(" ")
        );
        let status = Command::new(&self.bin)
            .args(args)
            .current_dir(&self.ws)
            .env("XDG_CONFIG_HOME", self.ws.join(".config"))
            .env("XDG_CACHE_HOME", &self.cache_home)
            .env("XDG_STATE_HOME", self.demo.join("state"))
            .status();
        match status {
            Ok(s) => {
                eprintln!("(exit code {})", s.code().unwrap_or(-1));
                Ok(())
            }
            Err(e) => fail(title, e),
        }
    }

    /// Loading in process and isolated, what the kernel refuses, the shell's sandbox.
    fn isolation_and_the_sandbox(&self) -> Result {
        self.show(
            "which plugin packages loaded (signed by the trusted demo key: in process)",
            &["plugins"],
        )?;
        self.show(
            "the same packages unsigned: each runs isolated in a worker process",
            &["--config", "unsigned.toml", "plugins"],
        )?;
        self.show(
            "an isolated plugin tool reading the workspace (its file access is answered by the host)",
            &[
                "--config",
                "unsigned.toml",
                "call",
                "grep",
                "--input",
                r#"{"pattern": "TODO"}"#,
            ],
        )?;
        let secret = self.demo.join(SECRET).display().to_string();
        let snoop = self.outside_input();
        self.show(
            "what the kernel enforces here, and what confines each tool",
            &["--config", "unsigned.toml", "sandbox"],
        )?;
        self.show(
            "snoop declares `none` and reads a file outside the workspace with std::fs: isolated, the kernel refuses",
            &[
                "--config",
                "unsigned.toml",
                "call",
                "snoop",
                "--input",
                &snoop,
            ],
        )?;
        self.show(
            "the same package signed by a key you trust loads in process: nothing stops it (trust decides who runs unsandboxed)",
            &["call", "snoop", "--input", &snoop],
        )?;
        let escape = format!(r#"{{"command": "cat {secret}; echo escaped > ../escaped.txt"}}"#);
        self.show(
            "the shell runs in the workspace-write sandbox: the (stand-in) SSH key is hidden, writing outside fails, and the result names the setting for each",
            &[
                "--config",
                "unsigned.toml",
                "call",
                "shell",
                "--yes",
                "--input",
                &escape,
            ],
        )?;
        self.show(
            "...while work inside the workspace goes on",
            &[
                "--config",
                "unsigned.toml",
                "call",
                "shell",
                "--yes",
                "--input",
                r#"{"command": "echo built > build.txt && cat build.txt && ls"}"#,
            ],
        )?;
        Ok(())
    }

    /// The tools, a write, a hook, a large result, the policy, bad input.
    fn tools_and_policy(&self) -> Result {
        self.show("every tool, with its side effects and source", &["list"])?;
        self.show(
            "a plugin tool (text-tools, inline)",
            &[
                "call",
                "word_count",
                "--input",
                r#"{"text": "the quick brown fox\njumps"}"#,
            ],
        )?;
        self.show(
            "a plugin tool that reads the workspace (grep-tool)",
            &["call", "grep", "--input", r#"{"pattern": "TODO"}"#],
        )?;
        self.show(
            "a built-in write (write prompts; --yes answers allow)",
            &[
                "call",
                "write_file",
                "--yes",
                "--input",
                r#"{"path": "notes/todo.md", "content": "- ship toolhost\n"}"#,
            ],
        )?;
        self.show(
            "a write the pre-use hook refuses (exit 2, stderr is the reason)",
            &[
                "call",
                "write_file",
                "--yes",
                "--input",
                r#"{"path": "secrets/token", "content": "hunter2"}"#,
            ],
        )?;
        self.show(
            "a large result: spooled to a file, the model gets a preview and the path",
            &["call", "read_file", "--input", r#"{"path": "server.log"}"#],
        )?;
        self.show(
            "...which read_file pages through",
            &[
                "call",
                "read_file",
                "--input",
                r#"{"path": ".toolhost/sessions/cli/tool-results/toolu_cli_1.txt", "offset": 1500, "limit": 3}"#,
            ],
        )?;
        self.show(
            "the shell, denied by the demo policy",
            &["call", "shell", "--yes", "--input", r#"{"command": "ls"}"#],
        )?;
        self.show(
            "a path escaping the workspace, refused",
            &[
                "call",
                "read_file",
                "--input",
                r#"{"path": "../../etc/passwd"}"#,
            ],
        )?;
        self.show(
            "invalid input: every error with its JSON pointer",
            &[
                "call",
                "json_pointer",
                "--json",
                "--input",
                r#"{"document": 5}"#,
            ],
        )?;
        Ok(())
    }

    /// Where things are, and how to go on by hand.
    fn try_it_yourself(&self) {
        let (ws, demo, shown_ws) = (&self.ws, &self.demo, self.shown_ws());
        eprintln!(
            "\nDemo workspace: {}\nPlugin packages: {}\n\nTry it yourself (from the repository root):\n\
             \x20 export PATH=\"$PWD/target/demo/bin:$PATH\"   # the toolhost this demo built (for an optimized one: README, Install)\n\
             \x20 cd {shown_ws} && toolhost list            # the tools this workspace sees\n\
             \x20 toolhost call read_file --input '{{\"path\": \"README.md\"}}'   # then any call above\n\n\
             A tool written in Python, as a WebAssembly component in its own sandbox (builds \
             wasmtime, a few minutes the first time; docs/plugins.md):\n\
             \x20 cargo xtask plugin package examples/wasm/py-text-stats",
            ws.display(),
            demo.join("plugins").display()
        );
    }
}

/// `arg` as a POSIX shell reads it back: bare when it holds only safe characters, else in
/// single quotes (a quote inside written `'\''`).
pub fn shell_quoted(arg: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c);
    if !arg.is_empty() && arg.chars().all(safe) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quoted;

    #[test]
    fn arguments_are_quoted_so_that_a_shell_reads_them_back() {
        let table = [
            ("list", "list"),
            ("unsigned.toml", "unsigned.toml"),
            (r#"{"pattern": "TODO"}"#, r#"'{"pattern": "TODO"}'"#),
            ("it's", r"'it'\''s'"),
            ("", "''"),
            ("a b", "'a b'"),
        ];
        for (arg, want) in table {
            assert_eq!(shell_quoted(arg), want, "{arg}");
            let echoed = std::process::Command::new("sh")
                .args(["-c", &format!("printf %s {}", shell_quoted(arg))])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
            assert_eq!(echoed.ok().as_deref(), Some(arg), "{arg}");
        }
    }
}
