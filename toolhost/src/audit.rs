//! The audit log: every call that ends, as one JSON line appended to `[audit] path`
//! ([`dispatcher_core::audit`] says what a line holds), rotated by size.
//!
//! A line is complete or absent, also when the process is killed mid-burst: each is one
//! `write` on a file opened for appending, of the whole line at once, made before the
//! caller gets the call's result. A line cut short anyway (the machine lost power between
//! the write and the disk) is cut off when the log is next opened, with a warning; with
//! `sync = true` each line also reaches the disk before the result is returned.
//!
//! Rotation: a line that would take the file past `max_bytes` goes to a fresh file; the
//! full one becomes `PATH.1`, the older ones `PATH.2` … `PATH.KEEP`, and the oldest beyond
//! `keep` is deleted. Each process needs a path of its own.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use dispatcher_core::audit::{AuditEntry, AuditSink};
use serde::Serialize;

/// The audit log of one process.
pub struct AuditFile {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    sync: bool,
    open: Mutex<Open>,
}

struct Open {
    file: File,
    size: u64,
    /// Failures since the last logged one (each is logged at most once a minute).
    failures: u64,
    last_logged: Option<std::time::Instant>,
}

/// One line: the entry with its time in RFC 3339 first.
#[derive(Serialize)]
struct Line<'a> {
    time: String,
    #[serde(flatten)]
    entry: &'a AuditEntry,
}

impl AuditFile {
    /// Opens (creating it and its directory) the log at `path`, cutting off a partial last
    /// line left by a crash.
    pub fn open(path: &Path, max_bytes: u64, keep: usize, sync: bool) -> Result<AuditFile, String> {
        let failed = |what: &str, e: std::io::Error| {
            format!("cannot {what} the audit log {}: {e}", path.display())
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| failed("create the directory of", e))?;
        }
        repair(path).map_err(|e| failed("check", e))?;
        let file = open_append(path).map_err(|e| failed("open", e))?;
        let size = file.metadata().map_err(|e| failed("read", e))?.len();
        Ok(AuditFile {
            path: path.to_path_buf(),
            max_bytes: max_bytes.max(1),
            keep,
            sync,
            open: Mutex::new(Open {
                file,
                size,
                failures: 0,
                last_logged: None,
            }),
        })
    }

    fn write_line(&self, open: &mut Open, line: &[u8]) -> std::io::Result<()> {
        let len = line.len() as u64;
        if open.size > 0 && open.size + len > self.max_bytes {
            self.rotate()?;
            open.file = open_append(&self.path)?;
            open.size = 0;
        }
        // One write of the whole line: complete or absent.
        open.file.write_all(line)?;
        open.size += len;
        if self.sync {
            open.file.sync_data()?;
        }
        Ok(())
    }

    /// `PATH` → `PATH.1`, `PATH.1` → `PATH.2`, …; the oldest beyond `keep` is deleted.
    fn rotate(&self) -> std::io::Result<()> {
        let numbered = |n: usize| {
            let mut name = self.path.as_os_str().to_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        if self.keep == 0 {
            return std::fs::remove_file(&self.path);
        }
        match std::fs::remove_file(numbered(self.keep)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        for n in (1..self.keep).rev() {
            match std::fs::rename(numbered(n), numbered(n + 1)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        std::fs::rename(&self.path, numbered(1))
    }
}

impl AuditSink for AuditFile {
    fn record(&self, entry: &AuditEntry) {
        let time = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(
            i64::try_from(entry.time_ms).unwrap_or(i64::MAX),
        )
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default();
        let mut line = match serde_json::to_vec(&Line { time, entry }) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!("an audit entry could not be written as JSON: {e}");
                return;
            }
        };
        line.push(b'\n');
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = self.write_line(&mut open, &line) {
            open.failures += 1;
            let now = std::time::Instant::now();
            if open
                .last_logged
                .is_none_or(|t| now.duration_since(t).as_secs() >= 60)
            {
                tracing::error!(
                    failures = open.failures,
                    "the audit log {} cannot be written ({e}): calls are running without their audit entries; free the disk or fix the path",
                    self.path.display()
                );
                open.last_logged = Some(now);
                open.failures = 0;
            }
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Cuts a partial last line off the log at `path` (a crash between a write and the disk).
fn repair(path: &Path) -> std::io::Result<()> {
    let mut file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let size = file.metadata()?.len();
    if size == 0 {
        return Ok(());
    }
    // Back from the end, a block at a time, to the last newline.
    let mut end = size;
    let mut block = vec![0u8; 64 * 1024];
    loop {
        let start = end.saturating_sub(block.len() as u64);
        let len = usize::try_from(end - start).unwrap_or(block.len());
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block[..len])?;
        if let Some(at) = block[..len].iter().rposition(|b| *b == b'\n') {
            let keep = start + at as u64 + 1;
            if keep < size {
                tracing::warn!(
                    cut = size - keep,
                    "the audit log {} ended in a partial line (a crash before it reached the disk); it was cut off",
                    path.display()
                );
                file.set_len(keep)?;
            }
            return Ok(());
        }
        if start == 0 {
            tracing::warn!(
                cut = size,
                "the audit log {} held one partial line only; it was cut off",
                path.display()
            );
            return file.set_len(0);
        }
        end = start;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn entry(n: u64) -> AuditEntry {
        AuditEntry {
            time_ms: 1_764_000_000_000 + n,
            instance: Arc::from("i1"),
            principal: Arc::from("local"),
            session: Arc::from("s1"),
            tool: Arc::from("shell"),
            tool_use_id: Arc::from(format!("t{n}").as_str()),
            class: Some(tool_api::SideEffect::Execute),
            arguments_sha256: "00".repeat(32),
            decision: Some("allow".into()),
            decided_by: None,
            outcome: "ok",
            files_modified: Vec::new(),
            command_executed: Some("echo hi".into()),
            secrets: None,
            duration_ms: 1.5,
            started_ms: 1_764_000_000_000,
            trace_parent: None,
        }
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn a_line_holds_the_time_first_and_every_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/audit.jsonl");
        let log = AuditFile::open(&path, 1 << 20, 3, false).unwrap();
        log.record(&entry(0));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("{\"time\":\"2025-11-24T"), "{text}");
        let line = &lines(&path)[0];
        assert_eq!(line["tool"], "shell");
        assert_eq!(line["command_executed"], "echo hi");
        assert_eq!(line["outcome"], "ok");
    }

    #[test]
    fn a_full_file_rotates_and_the_oldest_beyond_keep_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let one = serde_json::to_vec(&entry(0)).unwrap().len() as u64 + 40;
        let log = AuditFile::open(&path, one * 2, 2, false).unwrap();
        for n in 0..9 {
            log.record(&entry(n));
        }
        let rotated = |n: usize| dir.path().join(format!("audit.jsonl.{n}"));
        assert!(rotated(1).exists() && rotated(2).exists());
        assert!(!rotated(3).exists());
        let kept: usize = [path.clone(), rotated(1), rotated(2)]
            .iter()
            .map(|p| lines(p).len())
            .sum();
        assert!(kept < 9, "nothing was dropped beyond keep");
        // The newest is in the live file.
        let last = lines(&path).pop().unwrap();
        assert_eq!(last["tool_use_id"], "t8");
    }

    #[test]
    fn a_partial_last_line_is_cut_off_when_the_log_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, "{\"a\":1}\n{\"b\":2}\n{\"torn\":").unwrap();
        let log = AuditFile::open(&path, 1 << 20, 1, false).unwrap();
        log.record(&entry(1));
        let all = lines(&path);
        assert_eq!(all.len(), 3, "{all:?}");
        assert_eq!(all[1]["b"], 2);
        std::fs::write(&path, "{\"only\":").unwrap();
        drop(AuditFile::open(&path, 1 << 20, 1, false).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }

    #[test]
    fn a_log_that_cannot_be_opened_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), "").unwrap();
        let e = AuditFile::open(&dir.path().join("file/audit.jsonl"), 1, 1, false)
            .err()
            .unwrap();
        assert!(
            e.contains("audit log") && e.contains("file/audit.jsonl"),
            "{e}"
        );
    }
}
