//! The least a server that does `read_file` could spend per call: the echo server's loop
//! (read a line, parse it, answer it) plus the tool's required work, and nothing else. It
//! opens the file the call names beneath its workspace as confinement requires (`openat2`
//! with `RESOLVE_BENEATH` and no symlinks; where the kernel interface lacks it, as under
//! valgrind, `openat` with `O_NOFOLLOW` after refusing `..` and absolute paths), reads it,
//! and answers its text. No schema check, policy, events or audit: those are what toolhost
//! adds, and what the instruction counts set against this floor.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use serde_json::Value;

/// Serves `read_file` over stdio for the files beneath `workspace`.
pub fn read_file_server(workspace: &str) {
    let root = open_workspace(workspace);
    let stdin = std::io::stdin();
    let mut input = BufReader::with_capacity(1 << 16, stdin.lock());
    let mut output = BufWriter::new(std::io::stdout().lock());
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = message.get("id") else {
            continue;
        };
        let result = match message["method"].as_str() {
            Some("tools/call") => {
                let path = message["params"]["arguments"]["path"]
                    .as_str()
                    .unwrap_or("");
                match read_beneath(&root, path) {
                    Ok(text) => serde_json::json!({
                        "content": [{"type": "text", "text": text}],
                        "isError": false
                    }),
                    Err(e) => serde_json::json!({
                        "content": [{"type": "text", "text": e}],
                        "isError": true
                    }),
                }
            }
            Some("tools/list") => serde_json::json!({"tools": [{
                "name": "read_file",
                "inputSchema": {"type": "object"}
            }]}),
            _ => crate::echo_result(&message),
        };
        let answer = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result});
        serde_json::to_writer(&mut output, &answer).unwrap();
        output.write_all(b"\n").unwrap();
        if input.buffer().is_empty() && output.flush().is_err() {
            return;
        }
    }
}

/// The workspace folder, for opening beneath it.
pub fn open_workspace(workspace: &str) -> OwnedFd {
    rustix::fs::open(
        workspace,
        OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::PATH,
        Mode::empty(),
    )
    .unwrap_or_else(|e| panic!("{workspace}: {e}"))
}

/// The file's text, opened beneath `root` without following symlinks.
pub fn read_beneath(root: &OwnedFd, path: &str) -> Result<String, String> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let file = match rustix::fs::openat2(
        root,
        path,
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
    ) {
        Err(rustix::io::Errno::NOSYS) => {
            if path.starts_with('/') || path.split('/').any(|p| p == "..") {
                return Err(format!("{path}: outside the workspace"));
            }
            rustix::fs::openat(root, path, flags, Mode::empty())
        }
        other => other,
    }
    .map_err(|e| format!("{path}: {e}"))?;
    let mut text = String::new();
    std::fs::File::from(file)
        .read_to_string(&mut text)
        .map_err(|e| format!("{path}: {e}"))?;
    Ok(text)
}
