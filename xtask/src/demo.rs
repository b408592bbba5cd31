//! `cargo xtask demo`: package the example plugins, sign them with a key it generates and
//! trusts, and run toolhost over them (and over unsigned copies, which run isolated in the
//! OS sandbox: the `snoop` example, which reads files behind its context's back, is
//! refused by the kernel there).

use std::path::Path;
use std::process::Command;

use crate::plugin::{Inspector, keygen, package_crate, sign};
use crate::steps::{Result, announce, fail, io, root};

const EXAMPLES: [&str; 3] = [
    "examples/plugins/text-tools",
    "examples/plugins/grep",
    "examples/plugins/snoop",
];

/// The steps of the tour (each a command shown, run, and its exit code).
const TOUR_STEPS: usize = 20;

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

/// Packages the example plugins into `unsigned`, and signed copies into `signed`, with a
/// key it generates at `key_file`; returns that key (to trust). `release`: built as an
/// author ships them (the benches); otherwise debug builds (the demo: their dependencies
/// are the workspace's, already built, where release builds would compile them all again).
pub fn package_examples(
    signed: &Path,
    unsigned: &Path,
    key_file: &Path,
    release: bool,
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
        let archive = package_crate(
            &root().join(example),
            unsigned,
            &Inspector::child(),
            None,
            release,
        )?;
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
        "cargo xtask demo: packages and signs the three example plugins (debug builds) and \
         builds the Python example into a WebAssembly component, builds toolhost, then tours \
         it. Output goes to target/demo; the toolhost it built is left in target/demo/bin."
    );
    let demo = root().join("target/demo");
    // The tour's toolhost caches what it compiles under target/demo/cache; the component is
    // compiled there once, when it is packaged.
    let cache_home = demo.join("cache");
    let compiled = plugin_host::cache_dir_in(&cache_home).join("wasm");
    let trusted = package_examples(
        &demo.join("plugins"),
        &demo.join("plugins-unsigned"),
        &demo.join("demo-signing.key"),
        false,
    )?;
    // The Python example, built into a WebAssembly component with componentize-py.
    crate::components::package(
        &root().join("examples/wasm/py-text-stats"),
        &demo.join("plugins"),
        plugin_host::Instances::Fresh,
        &compiled,
    )?;
    // Built with the xtask tool (the same arguments as `cargo xtask demo`'s launcher): up to
    // date here unless this xtask was started some other way.
    let bin = xtask_launcher::build(
        "toolhost (debug)",
        "the binary this tour runs",
        &xtask_launcher::tool::DEMO_BUILD,
    )
    .map(|b| b.executable("toolhost"))
    .or_else(|e| fail("build toolhost", e))?
    .map_or_else(
        || fail("build toolhost", "cargo built no toolhost executable"),
        Ok,
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
    let shown_ws = ws.strip_prefix(root()).unwrap_or(&ws).display().to_string();
    eprintln!(
        "\nThe tour: each step shows a command as you would type it in {shown_ws}, with \
         `toolhost` on your PATH, then what it printed and its exit code."
    );
    let step = std::cell::Cell::new(0);
    let show = |title: &str, args: &[&str]| -> Result {
        let line: Vec<String> = args.iter().map(|a| shell_quoted(a)).collect();
        step.set(step.get() + 1);
        eprintln!(
            "\n==> [{}/{TOUR_STEPS}] {title}\n$ toolhost {}",
            step.get(),
            line.join(" ")
        );
        let status = Command::new(&bin)
            .args(args)
            .current_dir(&ws)
            .env("XDG_CONFIG_HOME", ws.join(".config"))
            .env("XDG_CACHE_HOME", &cache_home)
            .env("XDG_STATE_HOME", demo.join("state"))
            .status();
        match status {
            Ok(s) => {
                eprintln!("(exit code {})", s.code().unwrap_or(-1));
                Ok(())
            }
            Err(e) => fail(title, e),
        }
    };
    show(
        "which plugin packages loaded (signed by the trusted demo key: in process)",
        &["plugins"],
    )?;
    show(
        "the same packages unsigned: each runs isolated in a worker process",
        &["--config", "unsigned.toml", "plugins"],
    )?;
    show(
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
    let secret = demo.join(SECRET).display().to_string();
    let snoop = format!(r#"{{"path": "{secret}"}}"#);
    show(
        "what the kernel enforces here, and what confines each tool",
        &["--config", "unsigned.toml", "sandbox"],
    )?;
    show(
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
    show(
        "the same package signed by a key you trust loads in process: nothing stops it (trust decides who runs unsandboxed)",
        &["call", "snoop", "--input", &snoop],
    )?;
    let escape = format!(r#"{{"command": "cat {secret}; echo escaped > ../escaped.txt"}}"#);
    show(
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
    show(
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
    show("every tool, with its side effects and source", &["list"])?;
    show(
        "a plugin tool (text-tools, inline)",
        &[
            "call",
            "word_count",
            "--input",
            r#"{"text": "the quick brown fox\njumps"}"#,
        ],
    )?;
    show(
        "a WebAssembly component written in Python (text-stats, [wasm] in the list above): it reads the workspace only through the host",
        &[
            "call",
            "file_stats",
            "--input",
            r#"{"path": "src/main.rs"}"#,
        ],
    )?;
    show(
        "...and cannot reach a file outside it, whatever path it is given",
        &["call", "file_stats", "--input", &snoop],
    )?;
    show(
        "a plugin tool that reads the workspace (grep-tool)",
        &["call", "grep", "--input", r#"{"pattern": "TODO"}"#],
    )?;
    show(
        "a built-in write (write prompts; --yes answers allow)",
        &[
            "call",
            "write_file",
            "--yes",
            "--input",
            r#"{"path": "notes/todo.md", "content": "- ship toolhost\n"}"#,
        ],
    )?;
    show(
        "a write the pre-use hook refuses (exit 2, stderr is the reason)",
        &[
            "call",
            "write_file",
            "--yes",
            "--input",
            r#"{"path": "secrets/token", "content": "hunter2"}"#,
        ],
    )?;
    show(
        "a large result: spooled to a file, the model gets a preview and the path",
        &["call", "read_file", "--input", r#"{"path": "server.log"}"#],
    )?;
    show(
        "...which read_file pages through",
        &[
            "call",
            "read_file",
            "--input",
            r#"{"path": ".toolhost/sessions/cli/tool-results/toolu_cli_1.txt", "offset": 1500, "limit": 3}"#,
        ],
    )?;
    show(
        "the shell, denied by the demo policy",
        &["call", "shell", "--yes", "--input", r#"{"command": "ls"}"#],
    )?;
    show(
        "a path escaping the workspace, refused",
        &[
            "call",
            "read_file",
            "--input",
            r#"{"path": "../../etc/passwd"}"#,
        ],
    )?;
    show(
        "invalid input: every error with its JSON pointer",
        &[
            "call",
            "json_pointer",
            "--json",
            "--input",
            r#"{"document": 5}"#,
        ],
    )?;
    eprintln!(
        "\nDemo workspace: {}\nPlugin packages: {}\n\nTry it yourself (from the repository root):\n\
         \x20 export PATH=\"$PWD/target/demo/bin:$PATH\"   # the toolhost this demo built (for an optimized one: README, Install)\n\
         \x20 cd {shown_ws} && toolhost list            # the tools this workspace sees\n\
         \x20 toolhost call read_file --input '{{\"path\": \"README.md\"}}'   # then any call above",
        ws.display(),
        demo.join("plugins").display()
    );
    Ok(())
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
