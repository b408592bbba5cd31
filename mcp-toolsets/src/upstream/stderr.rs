//! A stdio server's error output: logged at DEBUG as it comes, its last lines kept to
//! explain a failure, shown at WARN when the server ends on its own, and hushed once
//! toolhost began to stop it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

/// The last lines a server wrote to its error output (also logged, at DEBUG, as they
/// come). Its lines are the user's to see only when the server fails to start (they are
/// in that error) or dies on its own (logged at WARN when its output ends); once toolhost
/// began to stop it ([`StderrTail::hush`]), what it writes is kept out of the log, so a
/// server's complaint about its closed pipes never reaches a terminal.
pub(crate) struct StderrTail {
    lines: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    done: Arc<tokio::sync::Notify>,
    finished: Arc<std::sync::atomic::AtomicBool>,
    hushed: Arc<std::sync::atomic::AtomicBool>,
    /// It answered `initialize`: an end before that is told by the start's own error.
    started: Arc<std::sync::atomic::AtomicBool>,
}

/// How many lines of a server's error output are kept to explain a failure.
const TAIL_LINES: usize = 20;

impl StderrTail {
    pub(crate) fn text(&self) -> String {
        tail_text(&self.lines)
    }

    /// The server started: from now on an end of its own is logged with its last lines.
    pub(crate) fn started(&self) {
        self.started.store(true, Ordering::Release);
    }

    /// toolhost is stopping the server: nothing it writes from now on is logged.
    pub(crate) fn hush(&self) {
        self.hushed.store(true, Ordering::Release);
    }

    /// Waits (briefly) until the output has been read to its end and, if the server ended
    /// on its own, its last lines logged.
    pub(crate) async fn drained(&self) {
        let done = self.done.notified();
        tokio::pin!(done);
        // Registered before the flag is read: an end between the two still wakes it.
        done.as_mut().enable();
        if self.finished.load(Ordering::Acquire) {
            return;
        }
        let _ = tokio::time::timeout(std::time::Duration::from_millis(500), done).await;
    }
}

fn tail_text(lines: &std::sync::Mutex<std::collections::VecDeque<String>>) -> String {
    let lines = lines.lock().unwrap_or_else(PoisonError::into_inner);
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Reads a server's error output line by line: each line is logged (target
/// `toolhost::mcp_server`, DEBUG) and the last [`TAIL_LINES`] are kept. When the output
/// ends after the server started and before toolhost stopped it (it exited on its own),
/// the kept lines are logged once at WARN.
pub(crate) fn log_stderr(id: &str, stderr: tokio::process::ChildStderr) -> StderrTail {
    use tokio::io::AsyncBufReadExt;
    let tail = StderrTail {
        lines: Arc::default(),
        done: Arc::default(),
        finished: Arc::default(),
        hushed: Arc::default(),
        started: Arc::default(),
    };
    let (lines, done, finished, hushed, started) = (
        tail.lines.clone(),
        tail.done.clone(),
        tail.finished.clone(),
        tail.hushed.clone(),
        tail.started.clone(),
    );
    let id = id.to_string();
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            if hushed.load(Ordering::Acquire) {
                continue;
            }
            tracing::debug!(target: "toolhost::mcp_server", server = %id, "{line}");
            let mut kept = lines.lock().unwrap_or_else(PoisonError::into_inner);
            if kept.len() == TAIL_LINES {
                kept.pop_front();
            }
            kept.push_back(line);
        }
        let text = tail_text(&lines);
        if started.load(Ordering::Acquire)
            && !hushed.load(Ordering::Acquire)
            && !text.trim().is_empty()
        {
            tracing::warn!(
                target: "toolhost::mcp_server",
                server = %id,
                "MCP server '{id}' ended (it was not stopped by toolhost); its error output ended with:\n{}",
                text.trim_end()
            );
        }
        // Told only now: whoever waits for the end (a call that saw the server die) finds
        // its last lines already in the log.
        finished.store(true, Ordering::Release);
        done.notify_waiters();
    });
    tail
}
