//! Remembered layout checks, so that a host starting over unchanged libraries does not
//! compare every library's type layouts with its own again.
//!
//! Opening a library in process, abi_stable checks that the layout of every type its root
//! module reaches is the one this host was built with. On this kind of machine that is
//! about a quarter of a millisecond a library, more than the `dlopen` itself. The check is
//! a function of two things only: the library's bytes and the host's. So a host remembers,
//! in `layouts.json` in the plugin cache directory, the SHA-256 of each library that passed
//! against it, and opens such a library again without the check (abi_stable's
//! `init_root_module_with_unchecked_layout`, which its documentation offers for "a cache
//! of which dynamic libraries have been checked for layout compatibility").
//!
//! - **The library** is named by the digest the host verified this start, against its
//!   manifest (and the signature, if any): remembered digests are themselves trusted only
//!   while the file's device, inode, size, modification and change time are unchanged
//!   ([`crate::digest`]). A library with other bytes has another digest and is checked.
//! - **The host** is the object file that holds this code (the executable, or the shared
//!   library a host embeds it in, found through `/proc/self/maps`), named by its device,
//!   inode, size, modification and change time, plus the tool-api and abi_stable versions.
//!   A rebuilt or reinstalled host is another file: every verdict is dropped and each
//!   library is checked once more. Where that identity cannot be read (no `/proc`, or the
//!   file on disk is no longer the one mapped), nothing is remembered and every library is
//!   checked, as before.
//! - **The file** lives with the digests, in the user's own cache directory: whoever can
//!   write there could already replace what the host loads (the unpacked archives), so it
//!   adds no new trust. A missing or unreadable file costs only the checks.
//!
//! Only passes are remembered: a library that failed its check is checked (and refused)
//! again on every start, with the full report in the log. And a pass is remembered, and
//! used, only on the process's first open of a path and file: the dynamic loader hands
//! back the library it already holds for a path or file opened before (abi_stable never
//! unloads one, not even one that failed its check), so a later open is of that library,
//! not necessarily of the bytes now at the path, and is always checked.
//!
//! What this does not cover is what the digests do not cover either: a file replaced
//! between its hashing and its `dlopen` by someone who can write the plugin directory
//! (who could as well have replaced it before the hashing).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

/// The file in the cache directory that remembers layout checks.
pub const LAYOUTS_FILE: &str = "layouts.json";

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    /// The host the verdicts hold for ([`host_identity`]).
    host: String,
    /// Lowercase hex SHA-256 digests of libraries that passed against that host, each with
    /// where such a library was last opened (a pass whose file is gone is dropped).
    passed: BTreeMap<String, PathBuf>,
}

/// Layout verdicts, remembered across starts when given a file and a host identity.
#[derive(Debug, Default)]
pub struct Layouts {
    /// Where the verdicts are kept, and the host they hold for; `None`: nothing is kept.
    kept: Option<(PathBuf, String)>,
    /// Passes read from the file (for this host) and recorded this start.
    passed: Mutex<BTreeMap<String, PathBuf>>,
    changed: AtomicBool,
}

impl Layouts {
    /// Nothing remembered and nothing kept: every library is checked.
    pub fn uncached() -> Layouts {
        Layouts::default()
    }

    /// The verdicts kept in `file` for this host (read now, written by [`Layouts::save`]).
    /// Verdicts recorded for another host, or an unreadable file, are dropped.
    pub fn load(file: PathBuf) -> Layouts {
        Layouts::load_for(file, host_identity())
    }

    fn load_for(file: PathBuf, host: Option<String>) -> Layouts {
        let Some(host) = host else {
            tracing::debug!(
                "this host's file cannot be identified: layout checks are not remembered"
            );
            return Layouts::uncached();
        };
        let stored: Option<Stored> = std::fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let passed = match stored {
            Some(s) if s.host == host => s.passed,
            _ => BTreeMap::new(),
        };
        Layouts {
            kept: Some((file, host)),
            passed: Mutex::new(passed),
            changed: AtomicBool::new(false),
        }
    }

    /// Whether the library with this SHA-256 passed its layout check against this host.
    pub fn passed(&self, sha256: &str) -> bool {
        lock(&self.passed).contains_key(&sha256.to_ascii_lowercase())
    }

    /// Records that the library at `path`, with this SHA-256, passed its layout check.
    pub fn remember(&self, sha256: &str, path: &Path) {
        if self.kept.is_none() {
            return;
        }
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let before = lock(&self.passed).insert(sha256.to_ascii_lowercase(), path.clone());
        if before.as_ref() != Some(&path) {
            self.changed.store(true, Ordering::Relaxed);
        }
    }

    /// Writes the verdicts back if one was added, without those whose library file no
    /// longer exists (so the file stays about as large as the plugin directories that share
    /// this cache). Failing to write only costs the checks next time; it is logged.
    pub fn save(&self) {
        let Some((file, host)) = &self.kept else {
            return;
        };
        if !self.changed.load(Ordering::Relaxed) {
            return;
        }
        let mut passed = lock(&self.passed).clone();
        passed.retain(|_, path| path.exists());
        let stored = Stored {
            host: host.clone(),
            passed,
        };
        if let Err(e) = crate::digest::write_json(file, &stored) {
            tracing::debug!(file = %file.display(), "cannot save plugin layout checks: {e}");
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What names this host's code: the object file mapped where this function is, by device,
/// inode, size, modification and change time, with the tool-api and abi_stable versions.
/// `None` where `/proc/self/maps` cannot be read or the file at the mapped path is no longer
/// the one mapped (replaced since the process started).
pub fn host_identity() -> Option<String> {
    let here = host_identity as fn() -> Option<String> as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let (inode, path) = mapping_of(&maps, here)?;
    let meta = std::fs::metadata(&path).ok()?;
    if meta.ino() != inode {
        return None;
    }
    Some(format!(
        "{}:{}:{}:{}.{}:{}.{} tool-api {} abi_stable {}",
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
        tool_api::TOOL_API_VERSION,
        // Its checks may change between releases.
        abi_stable::ABI_STABLE_VERSION.version,
    ))
}

/// The inode and path of the file mapped at `address`, from `/proc/self/maps` text.
fn mapping_of(maps: &str, address: usize) -> Option<(u64, PathBuf)> {
    maps.lines().find_map(|line| {
        // start-end perms offset dev inode path
        let mut fields = line.split_ascii_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let start = usize::from_str_radix(start, 16).ok()?;
        let end = usize::from_str_radix(end, 16).ok()?;
        if !(start..end).contains(&address) {
            return None;
        }
        let inode: u64 = fields.nth(3)?.parse().ok()?;
        let path = fields.collect::<Vec<_>>().join(" ");
        (inode != 0 && path.starts_with('/') && !path.ends_with(" (deleted)"))
            .then(|| (inode, PathBuf::from(path)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

    /// The verdicts in `file` for the host named `host`.
    fn for_host(file: &Path, host: &str) -> Layouts {
        Layouts::load_for(file.to_path_buf(), Some(host.into()))
    }

    /// A library file that exists, for `remember`.
    fn library(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, b"library").unwrap();
        path
    }

    #[test]
    fn a_pass_is_remembered_for_the_same_host() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(LAYOUTS_FILE);
        let first = for_host(&file, "host-1");
        assert!(!first.passed(A));
        first.remember(A, &library(dir.path(), "a.so"));
        first.save();
        let second = for_host(&file, "host-1");
        assert!(
            second.passed(&A.to_ascii_uppercase()),
            "digests compare in any case"
        );
        assert!(!second.passed(B), "another library is checked");
    }

    #[test]
    fn a_pass_is_not_trusted_by_another_host() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(LAYOUTS_FILE);
        let first = for_host(&file, "host-1");
        first.remember(A, &library(dir.path(), "a.so"));
        first.save();
        let rebuilt = for_host(&file, "host-2");
        assert!(!rebuilt.passed(A));
    }

    #[test]
    fn a_host_that_cannot_be_identified_remembers_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(LAYOUTS_FILE);
        let unknown = Layouts::load_for(file.clone(), None);
        unknown.remember(A, &library(dir.path(), "a.so"));
        unknown.save();
        assert!(!unknown.passed(A));
        assert!(!file.exists());
    }

    #[test]
    fn a_corrupt_file_only_costs_the_checks() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(LAYOUTS_FILE);
        std::fs::write(&file, b"{not json").unwrap();
        let layouts = for_host(&file, "host-1");
        assert!(!layouts.passed(A));
        layouts.remember(A, &library(dir.path(), "a.so"));
        layouts.save();
        assert!(for_host(&file, "host-1").passed(A));
    }

    #[test]
    fn passes_of_libraries_no_longer_on_disk_are_dropped_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(LAYOUTS_FILE);
        let first = for_host(&file, "host-1");
        first.remember(A, &library(dir.path(), "a.so"));
        let b = library(dir.path(), "b.so");
        first.remember(B, &b);
        first.save();
        // Another plugin directory sharing the cache: its start keeps A and B.
        let other = for_host(&file, "host-1");
        other.remember(C, &library(dir.path(), "c.so"));
        other.save();
        std::fs::remove_file(&b).unwrap();
        let later = for_host(&file, "host-1");
        assert!(later.passed(A) && later.passed(B) && later.passed(C));
        later.remember(C, &dir.path().join("c.so"));
        later.save();
        assert!(
            for_host(&file, "host-1").passed(B),
            "nothing new: not rewritten"
        );
        later.remember(A, &dir.path().join("moved-a.so"));
        std::fs::write(dir.path().join("moved-a.so"), b"library").unwrap();
        later.save();
        let last = for_host(&file, "host-1");
        assert!(last.passed(A) && last.passed(C));
        assert!(!last.passed(B), "its file is gone");
    }

    #[test]
    fn this_host_is_identified_by_the_file_that_holds_its_code() {
        let identity = host_identity().expect("/proc/self/maps names this test binary");
        let exe = std::fs::metadata(std::env::current_exe().unwrap()).unwrap();
        assert!(
            identity.starts_with(&format!("{}:{}:{}:", exe.dev(), exe.ino(), exe.size())),
            "{identity}"
        );
    }

    #[test]
    fn maps_lines_are_read_by_address() {
        let maps = "\
55d000000000-55d000001000 r--p 00000000 fd:01 42 /usr/bin/host
55d000001000-55d000009000 r-xp 00001000 fd:01 42 /usr/bin/host
7f0000000000-7f0000001000 rw-p 00000000 00:00 0 
7f0000002000-7f0000003000 r-xp 00000000 fd:01 43 /tmp/my lib.so (deleted)
7f0000004000-7f0000005000 r-xp 00000000 fd:01 44 /opt/with space/lib.so
";
        assert_eq!(
            mapping_of(maps, 0x55d000002000),
            Some((42, PathBuf::from("/usr/bin/host")))
        );
        assert_eq!(mapping_of(maps, 0x7f0000000010), None, "anonymous");
        assert_eq!(mapping_of(maps, 0x7f0000002010), None, "deleted");
        assert_eq!(
            mapping_of(maps, 0x7f0000004010),
            Some((44, PathBuf::from("/opt/with space/lib.so")))
        );
        assert_eq!(mapping_of(maps, 0x1), None);
    }
}
