//! `toolhost.lock`: what each `[[plugins.sources]]` entry resolved to, written beside the
//! config file, so that the same digests are installed on every machine that has it and a
//! tag moved under the user is noticed, not followed.
//!
//! ```toml
//! # Written by toolhost (`toolhost plugin install`, `toolhost plugin update`).
//! version = 1
//!
//! [[plugin]]
//! source = "registry.example/tools/grep:0.3.1"
//! tag = "0.3.1"
//! digest = "sha256:…"     # what the tag named (the index of targets)
//! artifact = "sha256:…"   # this target's artifact in it
//! name = "grep"
//! version = "0.3.1"
//! target = "x86_64-unknown-linux-gnu"
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::OciError;

/// The lock file's name, beside the config file.
pub const LOCK_FILE: &str = "toolhost.lock";

/// One source, pinned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Locked {
    /// The source's `oci` as the config writes it.
    pub source: String,
    /// The tag installed (for a range, the version chosen).
    pub tag: String,
    /// What the tag named when it was installed.
    pub digest: String,
    /// This host's artifact.
    pub artifact: String,
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: semver::Version,
    /// Its target.
    pub target: String,
}

/// The lock file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// The format's version (1).
    #[serde(default = "one")]
    pub version: u32,
    /// The pinned sources, in the order installed.
    #[serde(default, rename = "plugin")]
    pub plugins: Vec<Locked>,
}

fn one() -> u32 {
    1
}

impl Default for Lock {
    fn default() -> Self {
        Lock {
            version: 1,
            plugins: Vec::new(),
        }
    }
}

impl Lock {
    /// The lock file beside `config_file`.
    pub fn path_beside(config_file: &Path) -> PathBuf {
        config_file
            .parent()
            .unwrap_or(Path::new("."))
            .join(LOCK_FILE)
    }

    /// Reads `path` (none there: an empty lock).
    pub fn read(path: &Path) -> Result<Lock, OciError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Lock::default()),
            Err(e) => {
                return Err(OciError::Lock {
                    path: path.to_path_buf(),
                    detail: e.to_string(),
                });
            }
        };
        let lock: Lock = toml::from_str(&text).map_err(|e| OciError::Lock {
            path: path.to_path_buf(),
            detail: format!(
                "{}; it is written by `toolhost plugin install`: remove it and install again",
                e.to_string().trim_end()
            ),
        })?;
        // A pin's name and artifact name folders of the store: never a path.
        for pin in &lock.plugins {
            let plain = !pin.name.is_empty()
                && !pin.name.starts_with('.')
                && pin
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            let digest = pin
                .artifact
                .strip_prefix("sha256:")
                .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
            if !plain || !digest {
                return Err(OciError::Lock {
                    path: path.to_path_buf(),
                    detail: format!(
                        "the pin of {} names the plugin {:?} and the artifact {:?}, which are not a plugin name and a sha256 digest: remove the pin and install again",
                        pin.source, pin.name, pin.artifact
                    ),
                });
            }
        }
        if lock.version != 1 {
            return Err(OciError::Lock {
                path: path.to_path_buf(),
                detail: format!(
                    "version {} is not one this toolhost reads (1): it was written by a newer toolhost",
                    lock.version
                ),
            });
        }
        Ok(lock)
    }

    /// The pin of `source`.
    pub fn get(&self, source: &str) -> Option<&Locked> {
        self.plugins.iter().find(|p| p.source == source)
    }

    /// Pins `locked.source` (replacing its pin).
    pub fn set(&mut self, locked: Locked) {
        match self.plugins.iter_mut().find(|p| p.source == locked.source) {
            Some(slot) => *slot = locked,
            None => self.plugins.push(locked),
        }
    }

    /// Writes it to `path`, through a temporary file renamed into place.
    pub fn write(&self, path: &Path) -> Result<(), OciError> {
        let err = |detail: String| OciError::Lock {
            path: path.to_path_buf(),
            detail,
        };
        let body = toml::to_string(self).map_err(|e| err(e.to_string()))?;
        let text = format!(
            "# Written by toolhost (`toolhost plugin install`, `toolhost plugin update`): the\n# artifact each [[plugins.sources]] entry resolved to. Keep it beside toolhost.toml.\n{body}"
        );
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| err(e.to_string()))?;
        std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(|e| err(e.to_string()))?;
        tmp.persist(path).map_err(|e| err(e.to_string()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(source: &str, digest: &str) -> Locked {
        Locked {
            source: source.into(),
            tag: "0.1.0".into(),
            digest: digest.into(),
            artifact: format!("sha256:{}", "a".repeat(64)),
            name: "grep".into(),
            version: semver::Version::new(0, 1, 0),
            target: "x86_64-unknown-linux-gnu".into(),
        }
    }

    #[test]
    fn a_lock_round_trips_and_a_source_is_pinned_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = Lock::path_beside(&dir.path().join("toolhost.toml"));
        assert_eq!(Lock::read(&path).unwrap(), Lock::default());
        let mut lock = Lock::default();
        lock.set(pin("r/grep:0.1.0", "sha256:1"));
        lock.set(pin("r/other:1", "sha256:2"));
        lock.set(pin("r/grep:0.1.0", "sha256:3"));
        lock.write(&path).unwrap();
        let back = Lock::read(&path).unwrap();
        assert_eq!(back, lock);
        assert_eq!(back.plugins.len(), 2);
        assert_eq!(back.get("r/grep:0.1.0").unwrap().digest, "sha256:3");
    }

    #[test]
    fn a_broken_lock_names_the_file_and_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        std::fs::write(&path, "version = 1\n[[plugin]]\nsource = 3\n").unwrap();
        let e = Lock::read(&path).unwrap_err().to_string();
        assert!(e.contains(LOCK_FILE) && e.contains("install again"), "{e}");
        let mut lock = Lock::default();
        let mut bad = pin("r/grep:1", "sha256:1");
        bad.name = "../../x".into();
        lock.set(bad);
        lock.write(&path).unwrap();
        let e = Lock::read(&path).unwrap_err().to_string();
        assert!(e.contains("not a plugin name"), "{e}");
        std::fs::write(&path, "version = 9\n").unwrap();
        let e = Lock::read(&path).unwrap_err().to_string();
        assert!(e.contains("newer toolhost"), "{e}");
    }
}
