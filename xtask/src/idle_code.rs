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

/// The names of the functions of object `binary` in a callgrind profile (`ob=`, `fn=` and
/// `cfn=` lines, names given once and then referred to by number), and of the code in no
/// object valgrind knows (`???`), which is the binary's outside its `.text`.
fn functions_of(profile: &str, binary: &str) -> Vec<String> {
    costs_of(profile, binary).into_keys().collect()
}

/// The functions of object `binary` in a callgrind profile (as [`functions_of`] finds them),
/// each with the instructions it ran itself (its cost lines, not those of its calls).
pub(crate) fn costs_of(profile: &str, binary: &str) -> std::collections::BTreeMap<String, u64> {
    use std::collections::BTreeMap;
    let mut objects: BTreeMap<String, String> = BTreeMap::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut ours: BTreeMap<String, u64> = BTreeMap::new();
    let mut in_binary = false;
    let mut current: Option<String> = None;
    // The cost line after `calls=` is the call's, not the function's own.
    let mut of_a_call = false;
    // `(12) name` defines 12; `(12)` refers to it.
    let named = |value: &str, table: &mut BTreeMap<String, String>| -> Option<String> {
        let value = value.trim();
        let (id, rest) = match value.strip_prefix('(') {
            Some(v) => v.split_once(')')?,
            None => return Some(value.to_string()),
        };
        let rest = rest.trim();
        if rest.is_empty() {
            table.get(id).cloned()
        } else {
            table.insert(id.to_string(), rest.to_string());
            Some(rest.to_string())
        }
    };
    for line in profile.lines() {
        if let Some(v) = line.strip_prefix("ob=") {
            // Code in a section of the binary's own, outside `.text` (as the script's is),
            // is in no object valgrind knows: `???`.
            in_binary = named(v, &mut objects).is_some_and(|o| o == binary || o == "???");
        } else if let Some(v) = line.strip_prefix("cob=") {
            named(v, &mut objects);
        } else if let Some(v) = line.strip_prefix("fn=") {
            let name = named(v, &mut names);
            current = name.filter(|_| in_binary);
            if let Some(name) = &current {
                ours.entry(name.clone()).or_default();
            }
        } else if let Some(v) = line.strip_prefix("cfn=") {
            // Named here; counted where it is the function being described.
            named(v, &mut names);
        } else if line.starts_with("calls=") {
            of_a_call = true;
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            if std::mem::take(&mut of_a_call) {
                continue;
            }
            let ir = line
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse::<u64>().ok());
            if let (Some(name), Some(ir)) = (&current, ir) {
                *ours.entry(name.clone()).or_default() += ir;
            }
        }
    }
    ours
}

/// How many functions of `binary` each legacy name stands for once its hash is left out
/// (`…17h`): the instances of a generic function, from the binary's symbol table as `nm`
/// lists it.
fn legacy_instances(binary: &Path) -> Result<Instances> {
    let listed = io(
        "list the built toolhost's symbols (nm, from binutils)",
        Command::new("nm")
            .arg("--defined-only")
            .arg(binary)
            .stderr(Stdio::inherit())
            .output(),
    )?;
    if !listed.status.success() {
        return fail(
            "list the built toolhost's symbols",
            format!("nm {} failed ({})", binary.display(), listed.status),
        );
    }
    Ok(instances_of(&String::from_utf8_lossy(&listed.stdout)))
}

/// The legacy names of the functions in `nm`'s listing (`ADDRESS KIND NAME`, code being
/// kind `t`, `T` or `W`), each counted once per symbol, without its hash.
fn instances_of(listing: &str) -> Instances {
    let mut counts = Instances::new();
    for line in listing.lines() {
        let mut fields = line.split_whitespace();
        let (Some(_), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if matches!(kind, "t" | "T" | "W")
            && let Some((stem, _)) = legacy(name)
        {
            *counts.entry(stem.to_string()).or_default() += 1;
        }
    }
    counts
}

/// Functions of the binary by legacy name without its hash.
pub(crate) type Instances = std::collections::HashMap<String, usize>;

/// A legacy symbol (`_ZN…17h<16 hex>E`, then maybe `.llvm.N`) as its name without the
/// hash (`_ZN…17h`) and with it (`_ZN…17h<16 hex>E`).
fn legacy(name: &str) -> Option<(&str, &str)> {
    let at = name.rfind("17h").filter(|_| name.starts_with("_ZN"))?;
    let hash = name.get(at + 3..at + 20)?;
    (hash[..16].bytes().all(|b| b.is_ascii_hexdigit()) && hash.ends_with('E'))
        .then(|| (&name[..at + 3], &name[..at + 20]))
}

/// A symbol name as a section pattern that holds across builds: its hashes left out, but
/// for a legacy name the binary holds several functions of (a generic function's
/// instances: the hash tells them apart).
pub(crate) fn pattern(name: &str, instances: &Instances) -> Option<String> {
    // callgrind marks recursion levels (`name'2`).
    let name = name.split('\'').next()?;
    let symbol = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && !name.contains(|c: char| c.is_whitespace() || "(){};\"*?[]".contains(c));
    if !symbol {
        return None;
    }
    if let Some((stem, exact)) = legacy(name) {
        // A legacy name without its hash matches every instance of a generic function,
        // and the start runs the configuration's deserializers for a few types of the
        // hundreds they have instances for: kept, the hash matches only the instance that
        // ran, and only in a build by the same compiler from the same dependencies (where
        // it differs, that function stays in `.text`, as if never gathered).
        return Some(if instances.get(stem).is_some_and(|&n| n > 1) {
            format!("{exact}*")
        } else {
            format!("{stem}*")
        });
    }
    // A v0 or C name holds no `.`: what follows one is a suffix the compiler added to
    // tell apart copies of a function (`.1838` for an internal one under LTO, `.llvm.N`,
    // `.cold`), numbered anew by every build, so a pattern that kept it matched only the
    // build it was written from.
    let name = match name.split_once('.') {
        Some((bare, _)) if !name.starts_with("_ZN") => bare,
        _ => name,
    };
    if name.starts_with("_R") {
        // v0: every crate root `C` carries its disambiguator, `s<base62>_`.
        let mut out = String::new();
        let mut rest = name;
        while let Some(at) = rest.find("Cs") {
            out.push_str(&rest[..at + 2]);
            let after = &rest[at + 2..];
            match after.find('_') {
                Some(end) if after[..end].bytes().all(|b| b.is_ascii_alphanumeric()) => {
                    out.push_str("*_");
                    rest = &after[end + 1..];
                }
                _ => rest = after,
            }
        }
        out.push_str(rest);
        return Some(format!("{out}*"));
    }
    Some(format!("{name}*"))
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
    fn a_symbols_hashes_are_left_out_of_its_pattern() {
        let one_instance = Instances::from([(
            "_ZN10serde_core3ser12SerializeMap15serialize_entry17h".into(),
            1,
        )]);
        let cases = [
            (
                "_ZN10serde_core3ser12SerializeMap15serialize_entry17h1535b59fba97960dE'2",
                Some("_ZN10serde_core3ser12SerializeMap15serialize_entry17h*"),
            ),
            (
                "_ZN8tool_api6schema7Checker10check_node17hbe993b85718c8392E.llvm.123",
                Some("_ZN8tool_api6schema7Checker10check_node17h*"),
            ),
            (
                "_RNvMs16_NtCsjrHSEGnQ3l9_3std4pathNtB6_4Path13__strip_prefix",
                Some("_RNvMs16_NtCs*_3std4pathNtB6_4Path13__strip_prefix*"),
            ),
            (
                "_RNvMs0_NtNtNtCsjrHSEGnQ3l9_3std4sync4mpmc5wakerNtB5_9SyncWaker6notify.1848",
                Some("_RNvMs0_NtNtNtCs*_3std4sync4mpmc5wakerNtB5_9SyncWaker6notify*"),
            ),
            ("mi_free", Some("mi_free*")),
            ("mi_page_free.cold.2", Some("mi_page_free*")),
            ("(below main)", None),
            ("0x000000000058f230", None),
        ];
        for (name, expected) in cases {
            assert_eq!(pattern(name, &one_instance).as_deref(), expected, "{name}");
        }
    }

    #[test]
    fn the_instances_are_counted_from_the_code_symbols_of_nms_listing() {
        let listing = "\
0000000000401000 t _ZN4toml2de11deserialize17h0123456789abcdefE.llvm.77
0000000000402000 t _ZN4toml2de11deserialize17hfedcba9876543210E
0000000000403000 T _ZN4main4main17h00000000000000aaE
0000000000404000 r _ZN4toml2de11deserialize17h1111111111111111E
0000000000405000 T mi_free
";
        let instances = instances_of(listing);
        assert_eq!(instances.get("_ZN4toml2de11deserialize17h"), Some(&2));
        assert_eq!(instances.get("_ZN4main4main17h"), Some(&1));
        assert_eq!(instances.len(), 2, "{instances:?}");
    }

    #[test]
    fn a_generic_functions_instance_keeps_its_hash() {
        let instances = Instances::from([("_ZN4toml2de11deserialize17h".into(), 212)]);
        assert_eq!(
            pattern(
                "_ZN4toml2de11deserialize17h0123456789abcdefE.llvm.77",
                &instances
            )
            .as_deref(),
            Some("_ZN4toml2de11deserialize17h0123456789abcdefE*")
        );
    }

    #[inline(never)]
    fn instantiated<T: std::fmt::Debug>(value: T) -> String {
        format!("{value:?}")
    }

    #[test]
    fn the_instances_of_a_generic_function_are_counted_from_the_binarys_symbols() {
        assert_eq!(
            std::hint::black_box(instantiated(1u8)) + &instantiated("a"),
            "1\"a\""
        );
        let binary = std::env::current_exe().expect("the test binary");
        let instances = legacy_instances(&binary).expect("its symbols");
        let ours: Vec<_> = instances
            .iter()
            .filter(|(stem, _)| stem.contains("9idle_code5tests12instantiated17h"))
            .collect();
        assert_eq!(ours.len(), 1, "{ours:?}");
        assert_eq!(*ours[0].1, 2, "{ours:?}");
    }

    #[test]
    fn a_functions_cost_is_what_it_ran_itself_not_what_it_called() {
        let profile = "ob=(1) /bin/toolhost\nfn=(1) outer\n3 10\n+1 5\ncfn=(2) inner\ncalls=4 0\n5 1000\n* 2\n\nfn=(2)\n7 250\n\nob=(2) /lib/libc.so.6\nfn=(3) memcpy\n1 99\n";
        let costs = costs_of(profile, "/bin/toolhost");
        assert_eq!(
            costs.into_iter().collect::<Vec<_>>(),
            [("inner".to_string(), 250), ("outer".to_string(), 17)]
        );
    }

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
