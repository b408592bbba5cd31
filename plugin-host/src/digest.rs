//! A cache of file digests, so that a host starting over unchanged packages does not hash
//! every archive and library again.
//!
//! An entry is keyed by the file's path and trusted only while the file's device, inode,
//! size, modification time and change time are all what they were when it was hashed. The
//! change time cannot be set by a user (any write, rename or `chmod` moves it), so a file
//! that changed in any way is hashed again. The cache is a JSON file in the plugin cache
//! directory (`digests.json`), written through a temporary file and a rename; a missing or
//! unreadable cache only costs the hashing. It lives with the unpacked archives, in the
//! user's own cache directory: whoever can write there could already replace what the host
//! loads, so it adds no new trust.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// What identifies one version of a file, and its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    sha256: String,
}

impl Entry {
    fn same_file(&self, m: &std::fs::Metadata) -> bool {
        self.dev == m.dev()
            && self.ino == m.ino()
            && self.size == m.size()
            && self.mtime_ns == nanos(m.mtime(), m.mtime_nsec())
            && self.ctime_ns == nanos(m.ctime(), m.ctime_nsec())
    }
}

fn nanos(secs: i64, nsecs: i64) -> i128 {
    i128::from(secs) * 1_000_000_000 + i128::from(nsecs)
}

/// SHA-256 digests of files, remembered across runs when given a file to keep them in.
#[derive(Debug, Default)]
pub struct Digests {
    file: Option<PathBuf>,
    entries: Mutex<HashMap<PathBuf, Entry>>,
    changed: AtomicBool,
    hashed: AtomicUsize,
}

impl Digests {
    /// Digests that are computed every time and never kept.
    pub fn uncached() -> Digests {
        Digests::default()
    }

    /// Digests kept in `file` (read now, written by [`Digests::save`]).
    pub fn load(file: PathBuf) -> Digests {
        let entries = std::fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        Digests {
            file: Some(file),
            entries: Mutex::new(entries),
            changed: AtomicBool::new(false),
            hashed: AtomicUsize::new(0),
        }
    }

    /// The hex SHA-256 of `path`: remembered if the file is unchanged, else computed.
    /// A path that is not there is an error of kind `NotFound`; one that is not a regular
    /// file (a directory, say) is refused with `InvalidInput`.
    pub fn sha256(&self, path: &Path) -> io::Result<String> {
        let before = std::fs::metadata(path)?;
        if !before.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        if self.file.is_none() {
            self.hashed.fetch_add(1, Ordering::Relaxed);
            return sha256_file(path);
        }
        let key = std::path::absolute(path)?;
        let known = self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .filter(|e| e.same_file(&before))
            .map(|e| e.sha256.clone());
        if let Some(sha256) = known {
            return Ok(sha256);
        }
        self.hashed.fetch_add(1, Ordering::Relaxed);
        let sha256 = sha256_file(path)?;
        // Remembered only if the file did not change while it was read.
        let after = std::fs::metadata(path)?;
        let entry = Entry {
            dev: after.dev(),
            ino: after.ino(),
            size: after.size(),
            mtime_ns: nanos(after.mtime(), after.mtime_nsec()),
            ctime_ns: nanos(after.ctime(), after.ctime_nsec()),
            sha256: sha256.clone(),
        };
        if entry.same_file(&before) {
            self.entries
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key, entry);
            self.changed.store(true, Ordering::Relaxed);
        }
        Ok(sha256)
    }

    /// How many files these digests had to read and hash (not remembered, or changed).
    pub fn hashed(&self) -> usize {
        self.hashed.load(Ordering::Relaxed)
    }

    /// Writes the digests back if any was added (entries for files that no longer exist
    /// are dropped). Failing to write only costs hashing next time; it is logged.
    pub fn save(&self) {
        let Some(file) = &self.file else { return };
        if !self.changed.load(Ordering::Relaxed) {
            return;
        }
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        entries.retain(|path, _| path.exists());
        if let Err(e) = write_json(file, &entries) {
            tracing::debug!(file = %file.display(), "cannot save plugin digests: {e}");
        }
    }
}

/// Writes `value` as JSON to `file` (and its directory) through a temporary file renamed
/// over it, so a reader, or a host starting meanwhile, sees the old file or the new one.
pub(crate) fn write_json(file: &Path, value: &impl Serialize) -> io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(io::Error::other)?;
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_digest_is_used_only_while_the_file_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib.so");
        std::fs::write(&lib, b"one").unwrap();
        let cache = dir.path().join("digests.json");
        let first = Digests::load(cache.clone());
        let one = first.sha256(&lib).unwrap();
        first.save();
        let second = Digests::load(cache.clone());
        assert_eq!(second.sha256(&lib).unwrap(), one);
        assert!(
            !second.changed.load(Ordering::Relaxed),
            "served from the cache"
        );
        assert_eq!((first.hashed(), second.hashed()), (1, 0));
        // Same size, rewritten: the change time moves, so it is hashed again.
        std::fs::write(&lib, b"two").unwrap();
        let third = Digests::load(cache);
        assert_ne!(third.sha256(&lib).unwrap(), one);
        assert_eq!(third.hashed(), 1);
        assert_eq!(third.sha256(&lib).unwrap(), sha256_file(&lib).unwrap());
    }

    #[test]
    fn a_missing_file_is_not_found_and_a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for digests in [
            Digests::uncached(),
            Digests::load(dir.path().join("d.json")),
        ] {
            let missing = digests.sha256(&dir.path().join("gone.so")).unwrap_err();
            assert_eq!(missing.kind(), io::ErrorKind::NotFound);
            let folder = digests.sha256(dir.path()).unwrap_err();
            assert_eq!(folder.kind(), io::ErrorKind::InvalidInput);
            assert_eq!(digests.hashed(), 0);
        }
    }

    #[test]
    fn a_poisoned_entry_for_another_inode_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib.so");
        std::fs::write(&lib, b"real").unwrap();
        let cache = dir.path().join("digests.json");
        let key = std::path::absolute(&lib).unwrap();
        let forged: HashMap<PathBuf, Entry> = [(
            key,
            Entry {
                dev: 0,
                ino: 0,
                size: 4,
                mtime_ns: 0,
                ctime_ns: 0,
                sha256: "0".repeat(64),
            },
        )]
        .into();
        std::fs::write(&cache, serde_json::to_vec(&forged).unwrap()).unwrap();
        let digests = Digests::load(cache);
        assert_eq!(digests.sha256(&lib).unwrap(), sha256_file(&lib).unwrap());
    }
}
