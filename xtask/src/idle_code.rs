//! `cargo xtask idle-code`: writes `toolhost/link/idle-code.ld`, the linker script that
//! puts the code an idle `serve --mcp` runs together at the front of the binary's code,
//! then `toolhost/link/call-code.ld` ([`crate::call_code`]).
//!
//! The kernel maps a binary's code in 64 KiB runs around each page first touched. The
//! 1.5 MB an idle server runs (start, `initialize`, `tools/list`, one call; bare, and with
//! the example plugin the benches load) lay in 158 such
//! runs across 21 MB of code, so 10 MB of it was resident; gathered in one place, it is
//! resident in a few. The functions are found by running the shipped build (profile
//! `dist`) under callgrind; each becomes a pattern with its hashes left out (`17h*` for a
//! legacy symbol's, `Cs*_` for a v0 symbol's crates, and the numbered suffix LTO gives an
//! internal copy), so that the script still matches after a change of compiler,
//! dependency or profile. A generic function's instances keep their hash (the start runs
//! a deserializer for a few of the hundreds of types it has instances for): such a
//! pattern matches only in a build by the same compiler from the same dependencies, and
//! where it does not, that one function stays in `.text`. Each function's cold copy
//! (`.text.unlikely.NAME`) is gathered beside it. Run it again when what a server does at
//! start changes: the bench's idle RSS rows fail, naming this command, when the script no
//! longer holds what an idle server runs.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::steps::{Result, announce, cargo, fail, io, root, run};
use crate::symbols::{Instances, costs_of, legacy_instances, pattern};

/// The script, from the repository's root.
pub const SCRIPT: &str = "toolhost/link/idle-code.ld";

/// What the profiled server is sent: start, handshake, the tool list and one call of
/// `call` (a `params` object), as the `mcp_servers` bench's client does before it measures
/// idle memory.
fn session(call: &str) -> String {
    [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"idle-code","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        &format!(r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{call}}}"#),
    ]
    .map(|line| format!("{line}\n"))
    .concat()
}

/// Builds the shipped toolhost, profiles an idle session of it and writes [`SCRIPT`].
pub fn idle_code() -> Result {
    run(
        "build the toolhost that ships (profile dist)",
        cargo().args(["build", "--profile", "dist", "-p", "toolhost"]),
    )?;
    announce("run an idle session under callgrind");
    let work = root().join("target/idle-code");
    let ws = work.join("ws");
    io(
        "prepare the session's workspace",
        std::fs::create_dir_all(&ws).and_then(|()| std::fs::write(ws.join("a.txt"), "abc")),
    )?;
    let profile = work.join("callgrind.out");
    let binary = io(
        "find the built toolhost",
        std::fs::canonicalize(root().join("target/dist/toolhost")),
    )?;
    // Bare, and with the example plugin the bench measures too: loading a plugin runs
    // code of its own, which would otherwise be spread over the rest of the binary.
    let bare = session(r#"{"name":"read_file","arguments":{"path":"a.txt"}}"#);
    let mut functions = profiled_functions(&binary, &ws, &profile, &[], &bare)?;
    let config = crate::bench::text_tools_config()?;
    let with_plugin = session(r#"{"name":"word_count","arguments":{"text":"a b"}}"#);
    let config_args = ["--config".as_ref(), config.as_os_str()];
    functions.extend(profiled_functions(
        &binary,
        &ws,
        &profile,
        &config_args,
        &with_plugin,
    )?);
    functions.sort();
    functions.dedup();
    let instances = legacy_instances(&binary)?;
    let script = linker_script(&functions, &instances);
    io(
        SCRIPT,
        std::fs::write(root().join(SCRIPT), script.as_bytes()),
    )?;
    println!(
        "{SCRIPT}: {} patterns from {} functions",
        script.matches("*(.text.").count(),
        functions.len()
    );
    crate::call_code::write(&binary, &ws, &work, &instances)
}

/// The mangled names of the functions `binary` ran in the session, as callgrind saw them.
/// The session runs once first, unprofiled: a start as most are, after a first one has
/// remembered what it may (the plugin's layout check, `plugin-host/src/layouts.rs`).
fn profiled_functions(
    binary: &Path,
    ws: &Path,
    profile: &Path,
    args: &[&std::ffi::OsStr],
    session: &str,
) -> Result<Vec<String>> {
    let serve = |command: &mut Command| {
        command
            .args(["serve", "--mcp", "--workspace"])
            .arg(ws)
            .args(args);
    };
    let mut plain = Command::new(binary);
    serve(&mut plain);
    run_session(
        "start the built toolhost",
        "run the session once unprofiled",
        &mut plain,
        session,
    )?;
    let mut profiled = Command::new("valgrind");
    profiled
        .args(["--tool=callgrind", "--demangle=no"])
        .arg(format!("--callgrind-out-file={}", profile.display()))
        .arg(binary);
    serve(&mut profiled);
    run_session(
        "start valgrind (apt-get install valgrind)",
        "profile an idle session",
        &mut profiled,
        session,
    )?;
    let text = io("read callgrind's profile", std::fs::read_to_string(profile))?;
    Ok(functions_of(&text, &binary.display().to_string()))
}

/// Runs `command` (a server on stdio) through `session`: sends it, waits for the call's
/// answer, then closes the input and waits for the server to end.
fn run_session(start: &str, step: &str, command: &mut Command, session: &str) -> Result {
    let mut child = io(
        start,
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn(),
    )?;
    let mut input = child.stdin.take();
    if let Some(stdin) = input.as_mut() {
        use std::io::Write as _;
        io("send the session", stdin.write_all(session.as_bytes()))?;
    }
    // Every answer read before the input closes: the end of input cancels what runs.
    let stdout = child.stdout.take();
    let mut answered = 0;
    if let Some(stdout) = stdout {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout).lines() {
            let line = io("read the server's answers", line)?;
            if line.contains(r#""id":2"#) {
                answered += 1;
                break;
            }
        }
    }
    drop(input);
    let status = io("wait for the server", child.wait())?;
    if answered == 0 || !status.success() {
        return fail(
            step,
            format!("the server did not answer its call ({status})"),
        );
    }
    Ok(())
}

/// The names of the functions of object `binary` in a callgrind profile, as [`costs_of`]
/// finds them.
fn functions_of(profile: &str, binary: &str) -> Vec<String> {
    costs_of(profile, binary).into_keys().collect()
}

/// The linker script: one output section, `.text.hot_at_idle`, before `.text`, gathering
/// the functions' sections.
fn linker_script(functions: &[String], instances: &Instances) -> String {
    let patterns: std::collections::BTreeSet<String> = functions
        .iter()
        .filter_map(|f| pattern(f, instances))
        .collect();
    let mut script = String::from(
        "/* Generated by `cargo xtask idle-code` (xtask/src/idle_code.rs): the code an idle\n   `serve --mcp` runs, gathered before the rest of .text so that its pages are few.\n   Used by toolhost/build.rs; regenerate when what a server does at start changes. */\nSECTIONS\n{\n  .text.hot_at_idle :\n  {\n",
    );
    for p in patterns {
        // LLVM puts a function it holds cold (a `#[cold]` one, or a slow path it outlined:
        // `OnceLock::initialize`, `reserve_rehash`) in `.text.unlikely.NAME`: a start runs
        // dozens of them once, and each left in `.text` made 64 KiB or more of it resident.
        script.push_str("    *(.text.");
        script.push_str(&p);
        script.push_str(" .text.unlikely.");
        script.push_str(&p);
        script.push_str(")\n");
    }
    script.push_str("  }\n}\nINSERT BEFORE .text;\n");
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_functions_of_the_binary_are_read_from_a_profile() {
        let profile = "ob=(1) /bin/toolhost\nfn=(1) _ZN1a1f17h0123456789abcdefE\ncob=(2) /lib/libc.so.6\ncfn=(3) memcpy\ncalls=1 0\ncfn=(2) mi_free\ncalls=1 0\n\nob=(2)\nfn=(3)\n\nob=(1)\nfn=(2)\n\nob=(4) ???\nfn=(5) hot_at_idle_fn\n";
        assert_eq!(
            functions_of(profile, "/bin/toolhost"),
            ["_ZN1a1f17h0123456789abcdefE", "hot_at_idle_fn", "mi_free"]
        );
        let script = linker_script(&functions_of(profile, "/bin/toolhost"), &Instances::new());
        assert!(
            script.contains(
                "    *(.text._ZN1a1f17h* .text.unlikely._ZN1a1f17h*)\n    *(.text.hot_at_idle_fn* .text.unlikely.hot_at_idle_fn*)\n    *(.text.mi_free* .text.unlikely.mi_free*)\n"
            ),
            "{script}"
        );
        assert!(script.ends_with("INSERT BEFORE .text;\n"), "{script}");
    }
}
