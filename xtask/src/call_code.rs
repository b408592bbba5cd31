//! `toolhost/link/call-code.ld`, written by `cargo xtask idle-code` beside the idle
//! script: the code `serve --http` runs for each call, alone and as a gateway in front of
//! another `serve --http`, gathered before the rest of the binary's code, hottest first.
//!
//! The idle script gathers what a stdio server runs at start and for one call; an HTTP
//! server's call also runs hyper, axum, the HTTP front and, in a gateway, the posted call
//! and its answer's reader, which lay in `.text` among 21 MB of code the call never runs.
//! Gathered (about 1 MB), in the same rounds against the build without it: `serve --http`
//! alone 3 to 4% less CPU a call, the gateway pair 3 to 5% less and 5 to 12% more calls a
//! second (docs/performance.md). The functions are found as the idle script's are, by
//! running the shipped build under callgrind (only the calls counted, not the start), and
//! written as the same patterns, in the order of the instructions each ran.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::steps::{Result, StepError, announce, fail, io, root};
use crate::symbols::{Instances, costs_of, pattern};

/// The script, from the repository's root.
pub const SCRIPT: &str = "toolhost/link/call-code.ld";

/// Calls made before counting (connections opened, caches filled), then counted.
const WARM: usize = 100;
const COUNTED: usize = 300;

/// Profiles `binary`'s calls over HTTP (a server alone, and a gateway in front of one) and
/// writes [`SCRIPT`]; `work` holds the profiles, `ws` the workspace with `a.txt`.
pub fn write(binary: &Path, ws: &Path, work: &Path, instances: &Instances) -> Result {
    announce("profile serve --http's calls under callgrind (alone, and as a gateway)");
    let state = work.join("state");
    let bare = work.join("bare.toml");
    io(
        "write the servers' configuration",
        std::fs::write(&bare, "# nothing: defaults only\n"),
    )?;
    let up_port = free_port()?;
    let mut upstream = Server::start(
        Command::new(binary),
        up_port,
        ws,
        &bare,
        &state,
        "start the server the gateway mounts",
    )?;
    let gateway = work.join("gateway.toml");
    io(
        "write the gateway's configuration",
        std::fs::write(
            &gateway,
            format!(
                "[[mcp_servers]]\nid = \"up\"\nprefix = \"up\"\nurl = \"http://127.0.0.1:{up_port}/mcp\"\n"
            ),
        ),
    )?;
    let profiled = [
        ("gateway", "up__read_file", gateway.as_path()),
        ("alone", "read_file", bare.as_path()),
    ];
    let mut costs: BTreeMap<String, u64> = BTreeMap::new();
    for (name, tool, config) in profiled {
        let out = work.join(format!("calls-{name}.out"));
        let text = profile(binary, ws, config, &state, &out, tool)?;
        for (function, ir) in costs_of(&text, &binary.display().to_string()) {
            *costs.entry(function).or_default() += ir;
        }
    }
    upstream.stop();
    let script = linker_script(&costs, instances);
    io(
        SCRIPT,
        std::fs::write(root().join(SCRIPT), script.as_bytes()),
    )?;
    println!(
        "{SCRIPT}: {} patterns from {} functions",
        script.matches("*(.text.").count(),
        costs.len()
    );
    Ok(())
}

/// One server under callgrind: [`WARM`] calls of `tool`, then the counters zeroed,
/// [`COUNTED`] calls, and the profile dumped: its text.
fn profile(
    binary: &Path,
    ws: &Path,
    config: &Path,
    state: &Path,
    out: &Path,
    tool: &str,
) -> Result<String> {
    let port = free_port()?;
    let mut valgrind = Command::new("valgrind");
    valgrind
        .args(["--tool=callgrind", "--demangle=no"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(binary);
    let mut server = Server::start(
        valgrind,
        port,
        ws,
        config,
        state,
        "start valgrind (apt-get install valgrind)",
    )?;
    let step = format!("call {tool} over HTTP");
    let mut client = io(&step, TcpStream::connect(("127.0.0.1", port)))?;
    let failed = |why: String| StepError {
        step: step.clone(),
        why,
    };
    for _ in 0..WARM {
        call(&mut client, port, tool).map_err(failed)?;
    }
    let pid = server.child.id().to_string();
    callgrind_control("-z", &pid)?;
    for _ in 0..COUNTED {
        call(&mut client, port, tool).map_err(failed)?;
    }
    callgrind_control("-d", &pid)?;
    server.stop();
    // A dump on request is written beside the name given, numbered.
    let dumped = out.with_file_name(format!(
        "{}.1",
        out.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    ));
    io("read callgrind's profile", std::fs::read_to_string(dumped))
}

/// `callgrind_control FLAG PID` (zero the counters, or dump them).
fn callgrind_control(flag: &str, pid: &str) -> Result {
    let step = format!("callgrind_control {flag}");
    let out = io(
        &step,
        Command::new("callgrind_control").args([flag, pid]).output(),
    )?;
    if !out.status.success() {
        return fail(
            &step,
            format!(
                "it failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        );
    }
    Ok(())
}

/// A `serve --http` started for the profile, stopped when dropped.
struct Server {
    child: Child,
}

impl Server {
    /// `command` (the binary, or valgrind running it) serving on `port`, once it accepts.
    fn start(
        mut command: Command,
        port: u16,
        ws: &Path,
        config: &Path,
        state: &Path,
        step: &str,
    ) -> Result<Server> {
        command
            .args(["serve", "--http"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--workspace")
            .arg(ws)
            .arg("--config")
            .arg(config)
            // What a gateway pins stays out of the user's state.
            .env("XDG_STATE_HOME", state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = io(step, command.spawn())?;
        let mut server = Server { child };
        // Under valgrind a start takes seconds.
        let until = Instant::now() + Duration::from_secs(120);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > until {
                server.stop();
                return fail(step, format!("nothing listened on port {port} after 120 s"));
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return fail(step, format!("the server ended ({status})"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port nothing listens on now.
fn free_port() -> Result<u16> {
    io(
        "find a free port",
        TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()),
    )
    .map(|a| a.port())
}

/// One 2026-07-28 `tools/call` of `tool` (`{"path": "a.txt"}`) on the kept connection: `Err`
/// says what came instead of a result.
fn call(client: &mut TcpStream, port: u16, tool: &str) -> std::result::Result<(), String> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{"path":"a.txt"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{{"name":"call-code","version":"1"}},"io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Method: tools/call\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Name: {tool}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    client
        .write_all(head.as_bytes())
        .and_then(|()| client.write_all(body.as_bytes()))
        .map_err(|e| format!("the request could not be sent: {e}"))?;
    let answer = read_answer(client)?;
    if !answer.contains(r#""text":"abc""#) {
        return Err(format!("the answer was not a.txt's text: {answer}"));
    }
    Ok(())
}

/// The body of one answer with a `Content-Length`, read off `client`.
fn read_answer(client: &mut TcpStream) -> std::result::Result<String, String> {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte) {
            Ok(1) => raw.push(byte[0]),
            Ok(_) => return Err("the server closed the connection".into()),
            Err(e) => return Err(format!("the answer could not be read: {e}")),
        }
    }
    let head = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .ok_or_else(|| format!("an answer without a length: {head}"))?;
    let mut body = vec![0u8; length];
    client
        .read_exact(&mut body)
        .map_err(|e| format!("the answer could not be read: {e}"))?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The linker script: one output section, `.text.hot_per_call`, before `.text`, its
/// functions' sections in the order of the instructions each ran, most first.
fn linker_script(costs: &BTreeMap<String, u64>, instances: &Instances) -> String {
    let mut ranked: Vec<(&String, &u64)> = costs.iter().filter(|(_, ir)| **ir > 0).collect();
    ranked.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let mut seen = std::collections::BTreeSet::new();
    let mut script = String::from(
        "/* Generated by `cargo xtask idle-code` (xtask/src/call_code.rs): the code `serve --http`\n   runs for each call, alone and as a gateway, hottest first, before the rest of .text.\n   Used by toolhost/build.rs; regenerate when a call's path changes. */\nSECTIONS\n{\n  .text.hot_per_call :\n  {\n",
    );
    for (function, _) in ranked {
        let Some(p) = pattern(function, instances) else {
            continue;
        };
        if !seen.insert(p.clone()) {
            continue;
        }
        script.push_str(&format!("    *(.text.{p} .text.unlikely.{p})\n"));
    }
    script.push_str("  }\n}\nINSERT BEFORE .text;\n");
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hottest_functions_come_first_each_pattern_once() {
        let costs = BTreeMap::from([
            ("warm".to_string(), 10),
            ("hot".to_string(), 500),
            ("never".to_string(), 0),
            ("_RNvCs1a2b_5crate4call".to_string(), 40),
            ("_RNvCs9z8y_5crate4call".to_string(), 30),
        ]);
        let script = linker_script(&costs, &Instances::new());
        let order: Vec<&str> = script
            .lines()
            .filter_map(|l| l.trim().strip_prefix("*(.text."))
            .filter_map(|l| l.split('*').next())
            .collect();
        assert_eq!(order, ["hot", "_RNvCs", "warm"], "{script}");
        assert!(
            script.contains("*(.text._RNvCs*_5crate4call* .text.unlikely._RNvCs*_5crate4call*)")
        );
        assert!(!script.contains("never"));
        assert!(script.ends_with("INSERT BEFORE .text;\n"));
    }
}
