//! The `[audit]` table: the audit log of every call (see [`crate::audit`]).
//!
//! ```toml
//! [audit]
//! path = "audit/toolhost.jsonl"   # relative to this file; default: no audit log
//! max_bytes = 104857600            # a file past this size is rotated
//! keep = 5                         # rotated files kept (PATH.1 … PATH.5)
//! sync = false                     # true: each line reaches the disk before the result returns
//! ```

use std::path::PathBuf;

use serde::Deserialize;

/// The `[audit]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Audit {
    /// The log's file; `None` (the default): no audit log.
    pub path: Option<PathBuf>,
    /// The size past which the file is rotated (default 100 MiB).
    pub max_bytes: Bytes,
    /// Rotated files kept (default 5).
    pub keep: usize,
    /// Whether each line is flushed to the disk before the call's result is returned.
    pub sync: bool,
}

impl Default for Audit {
    fn default() -> Self {
        Audit {
            path: None,
            max_bytes: Bytes(100 << 20),
            keep: 5,
            sync: false,
        }
    }
}

/// A file size of at least 4 KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u64::deserialize(d)?;
        if n < 4096 {
            return Err(serde::de::Error::custom(format!(
                "expected a size in bytes of at least 4096, found {n}"
            )));
        }
        Ok(Bytes(n))
    }
}
