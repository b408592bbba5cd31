//! The bounds of an inline attempt ([`InlineBudget`]) and the handle a scope check
//! opened for it ([`Opened`]).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use super::FsError;

/// The largest regular file an inline attempt reads (64 KiB).
pub const INLINE_BYTES: u64 = 64 * 1024;

/// The most directory entries an inline attempt lists (1,024).
pub const INLINE_ENTRIES: usize = 1024;

/// A path the call's scope check opened (read-only, non-blocking) beneath the root, kept
/// for the call's first read or listing of that same path: checking and using the path
/// are then one open, not two ([`super::Workspace::check_opening`]).
#[derive(Debug)]
pub struct Opened {
    pub(super) rel: PathBuf,
    pub(super) fd: OwnedFd,
}

/// Marks an inline attempt: operations over its limits fail with [`FsError::OverBudget`]
/// and record that they did, so the host reruns the call off-thread.
#[derive(Debug, Default)]
pub struct InlineBudget {
    exceeded: AtomicBool,
    /// What the scope check opened, until a read or a listing of that path takes it.
    opened: Mutex<Option<Opened>>,
}

impl InlineBudget {
    /// An inline attempt that starts with what the scope check opened, if anything.
    pub fn with_opened(opened: Option<Opened>) -> InlineBudget {
        InlineBudget {
            exceeded: AtomicBool::new(false),
            opened: Mutex::new(opened),
        }
    }

    /// The handle opened for `rel`, once.
    pub(super) fn take_opened(&self, rel: &Path) -> Option<OwnedFd> {
        let mut slot = self.opened.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|o| o.rel == rel) {
            slot.take().map(|o| o.fd)
        } else {
            None
        }
    }

    /// Whether an operation went over the budget.
    pub fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::Relaxed)
    }

    /// Refuses an operation an inline attempt must not do (a write).
    pub fn refuse(&self, path: &str, what: &'static str) -> FsError {
        self.over(path, what)
    }

    pub(super) fn over(&self, path: &str, what: &'static str) -> FsError {
        self.exceeded.store(true, Ordering::Relaxed);
        FsError::OverBudget {
            path: path.into(),
            what,
        }
    }
}
