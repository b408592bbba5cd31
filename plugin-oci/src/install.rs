//! Installing sources: resolve, pull, check as a host checks, keep, pin.
//!
//! Installed packages live in a content-addressed store, one folder per artifact digest
//! (`STORE/sha256-HEX/NAME/`), so a version being replaced stays whole until the lock
//! moves past it, and two configs pinning different versions do not clash.

use std::fmt;
use std::path::{Path, PathBuf};

use plugin_host::{Manifest, PublicKey};
use tool_api::SideEffect;

use crate::lock::{Lock, Locked};
use crate::registry::{Fetched, Registry};
use crate::source::newest_within;
use crate::{OciError, Source};

/// Installs sources into a store, checking each package as a host checks it.
#[derive(Debug, Clone)]
pub struct Installer {
    /// The store's folder.
    pub store: PathBuf,
    /// This host's target triple.
    pub target: String,
    /// The keys whose signatures are trusted.
    pub trusted_keys: Vec<PublicKey>,
    /// Refuse a package not signed by one of them.
    pub require_signatures: bool,
}

/// What installing a source found to do.
#[derive(Debug)]
pub enum Step {
    /// The lock's pin is installed; nothing to do.
    UpToDate(Locked),
    /// A package pulled and checked, waiting for [`Installer::commit`].
    Pending(Box<Plan>),
}

/// A package pulled and checked, not yet installed.
#[derive(Debug)]
pub struct Plan {
    /// Its pin once installed.
    pub locked: Locked,
    /// Its manifest.
    pub manifest: Manifest,
    /// The version it replaces, if it replaces one.
    pub previous: Option<Manifest>,
    /// What changes from `previous` (all added for a first install).
    pub changes: Changes,
    staging: tempfile::TempDir,
}

/// How a package's tools differ from the version it replaces.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// New tools, with their classes.
    pub added: Vec<(String, SideEffect)>,
    /// Tools gone.
    pub removed: Vec<String>,
    /// Tools whose class widened: (tool, was, now).
    pub widened: Vec<(String, SideEffect, SideEffect)>,
    /// Tools whose class narrowed: (tool, was, now).
    pub narrowed: Vec<(String, SideEffect, SideEffect)>,
}

impl Changes {
    /// The changes from `old` to `new`.
    pub fn between(old: Option<&Manifest>, new: &Manifest) -> Changes {
        let mut changes = Changes::default();
        let old_tools = old.map(|m| m.tools.as_slice()).unwrap_or_default();
        for tool in &new.tools {
            match old_tools.iter().find(|t| t.name == tool.name) {
                None => changes.added.push((tool.name.clone(), tool.side_effects)),
                Some(was) if was.side_effects < tool.side_effects => {
                    changes
                        .widened
                        .push((tool.name.clone(), was.side_effects, tool.side_effects))
                }
                Some(was) if was.side_effects > tool.side_effects => {
                    changes
                        .narrowed
                        .push((tool.name.clone(), was.side_effects, tool.side_effects))
                }
                Some(_) => {}
            }
        }
        for tool in old_tools {
            if !new.tools.iter().any(|t| t.name == tool.name) {
                changes.removed.push(tool.name.clone());
            }
        }
        changes
    }

    /// Whether an update asks before it installs: a tool's class widened, or a new tool's
    /// class is wider than any the old version had.
    pub fn asks(&self, old: Option<&Manifest>) -> bool {
        let Some(old) = old else { return false };
        let widest_before = old.tools.iter().map(|t| t.side_effects).max();
        !self.widened.is_empty()
            || self
                .added
                .iter()
                .any(|(_, class)| widest_before.is_none_or(|w| *class > w))
    }
}

impl fmt::Display for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut any = false;
        for (tool, class) in &self.added {
            writeln!(f, "  + {tool} ({})", class.as_str())?;
            any = true;
        }
        for tool in &self.removed {
            writeln!(f, "  - {tool}")?;
            any = true;
        }
        for (tool, was, now) in &self.widened {
            writeln!(
                f,
                "  ! {tool}: {} -> {} (wider)",
                was.as_str(),
                now.as_str()
            )?;
            any = true;
        }
        for (tool, was, now) in &self.narrowed {
            writeln!(
                f,
                "  ~ {tool}: {} -> {} (narrower)",
                was.as_str(),
                now.as_str()
            )?;
            any = true;
        }
        if !any {
            writeln!(f, "  tools unchanged")?;
        }
        Ok(())
    }
}

/// What an install of a source does with the lock's pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Install what the lock pins (pulled by digest); a source without a pin resolves its
    /// tag and is pinned.
    Pinned,
    /// Resolve the tag again: content other than the pin's is refused (the tag moved).
    Recheck,
    /// Move to the newest within the source's range (or what its tag names now).
    Update,
}

impl Installer {
    /// The folder of an installed pin: what a host loads (a plugin directory holding the
    /// one package).
    pub fn plugin_dir(&self, locked: &Locked) -> PathBuf {
        self.store.join(locked.artifact.replace(':', "-"))
    }

    /// Whether `locked` is in the store (its package folder has its manifest).
    pub fn is_installed(&self, locked: &Locked) -> bool {
        self.plugin_dir(locked)
            .join(&locked.name)
            .join(plugin_host::MANIFEST_FILE)
            .is_file()
    }

    fn installed_manifest(&self, locked: &Locked) -> Option<Manifest> {
        let file = self
            .plugin_dir(locked)
            .join(&locked.name)
            .join(plugin_host::MANIFEST_FILE);
        let text = std::fs::read_to_string(&file).ok()?;
        Manifest::parse(&file, &text).ok()
    }

    /// Finds what installing `source` does under `mode`, pulling and checking the package
    /// when there is one to install.
    pub async fn prepare(
        &self,
        source: &Source,
        lock: &Lock,
        mode: Mode,
    ) -> Result<Step, OciError> {
        source.check()?;
        let reference = source.reference()?;
        let registry = Registry::for_reference(&reference)?;
        let pin = lock.get(&source.oci);
        if let (Mode::Pinned, Some(pin)) = (mode, pin) {
            if self.is_installed(pin) {
                return Ok(Step::UpToDate(pin.clone()));
            }
            // On a machine that has the lock and not the package: the pinned content.
            let by_digest = reference.clone_with_digest(pin.artifact.clone());
            let mut fetched = registry.pull(&by_digest, &self.target).await?;
            // The pin keeps what its tag named (the index), not the artifact pulled.
            fetched.digest = pin.digest.clone();
            return self.stage(source, &pin.tag, fetched, Some(pin), &by_digest.whole());
        }
        let tag = match (mode, pin) {
            // A digest names its content: no tag to choose.
            _ if reference.digest().is_some() => String::new(),
            (Mode::Update, _) => match source.range()? {
                Some(range) => newest_tag(&registry, &reference, &range).await?,
                None => pin
                    .map(|p| p.tag.clone())
                    .or_else(|| source.written_tag())
                    .unwrap_or_default(),
            },
            (_, Some(pin)) => pin.tag.clone(),
            (_, None) => match source.written_tag() {
                Some(tag) => tag,
                None => {
                    let range = source.range()?.unwrap_or(semver::VersionReq::STAR);
                    newest_tag(&registry, &reference, &range).await?
                }
            },
        };
        let target_ref = match reference.digest() {
            Some(_) => reference.clone(),
            None if tag.is_empty() => reference.clone(),
            None => oci_client::Reference::with_tag(
                reference.registry().to_string(),
                reference.repository().to_string(),
                tag.clone(),
            ),
        };
        let fetched = registry.pull(&target_ref, &self.target).await?;
        if let Some(pin) = pin {
            if fetched.digest == pin.digest && self.is_installed(pin) {
                return Ok(Step::UpToDate(pin.clone()));
            }
            if mode == Mode::Recheck && fetched.digest != pin.digest {
                return Err(OciError::LockMismatch {
                    oci: source.oci.clone(),
                    name: pin.name.clone(),
                    locked: pin.digest.clone(),
                    now: fetched.digest,
                });
            }
        }
        self.stage(source, &tag, fetched, pin, &target_ref.whole())
    }

    /// Writes a fetched package into a staging folder in the store and checks it there.
    fn stage(
        &self,
        source: &Source,
        tag: &str,
        fetched: Fetched,
        pin: Option<&Locked>,
        reference: &str,
    ) -> Result<Step, OciError> {
        std::fs::create_dir_all(&self.store).map_err(|e| OciError::Store {
            path: self.store.clone(),
            detail: e.to_string(),
        })?;
        let staging = tempfile::Builder::new()
            .prefix(".staging-")
            .tempdir_in(&self.store)
            .map_err(|e| OciError::Store {
                path: self.store.clone(),
                detail: e.to_string(),
            })?;
        let name = fetched.package.manifest.name.clone();
        let folder = staging.path().join(&name);
        fetched.package.write(&fetched.library, &folder)?;
        let (manifest, _) =
            plugin_host::verify_package(&folder, &self.trusted_keys, self.require_signatures)
                .map_err(|refusal| OciError::Refused {
                    reference: reference.to_string(),
                    refusal: Box::new(refusal),
                })?;
        let previous = pin.and_then(|p| self.installed_manifest(p));
        let changes = Changes::between(previous.as_ref(), &manifest);
        let locked = Locked {
            source: source.oci.clone(),
            tag: tag.to_string(),
            digest: fetched.digest,
            artifact: fetched.artifact,
            name,
            version: manifest.version.clone(),
            target: manifest.target.clone(),
        };
        Ok(Step::Pending(Box::new(Plan {
            locked,
            manifest,
            previous,
            changes,
            staging,
        })))
    }

    /// Moves a checked package into the store and pins it in `lock` (the caller writes the
    /// lock). Returns the plugin directory a host loads it from.
    pub fn commit(&self, plan: Plan, lock: &mut Lock) -> Result<PathBuf, OciError> {
        let dir = self.plugin_dir(&plan.locked);
        let dest = dir.join(&plan.locked.name);
        let io = |e: std::io::Error| OciError::Store {
            path: dest.clone(),
            detail: e.to_string(),
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        // The folder is named by the artifact's digest: one already there (another config's
        // install, or a host running from it) holds the same bytes and is left as it is.
        if !self.is_installed(&plan.locked) {
            let _ = std::fs::remove_dir_all(&dest);
            if let Err(e) = std::fs::rename(plan.staging.path().join(&plan.locked.name), &dest)
                && !self.is_installed(&plan.locked)
            {
                return Err(io(e));
            }
        }
        lock.set(plan.locked);
        Ok(dir)
    }
}

/// The newest version tag of `reference`'s repository that `range` allows, or an error
/// naming the version tags there are.
async fn newest_tag(
    registry: &Registry,
    reference: &oci_client::Reference,
    range: &semver::VersionReq,
) -> Result<String, OciError> {
    let tags = registry.tags(reference).await?;
    if let Some(tag) = newest_within(&tags, range) {
        return Ok(tag.clone());
    }
    Err(OciError::NoMatchingTag {
        repository: format!("{}/{}", reference.registry(), reference.repository()),
        range: range.to_string(),
        tags: tags
            .into_iter()
            .filter(|t| crate::source::tag_version(t).is_some())
            .collect(),
    })
}

/// The store of a user's installed packages: `$XDG_DATA_HOME/toolhost/oci` (or
/// `~/.local/share/toolhost/oci`).
pub fn default_store() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("toolhost/oci")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(tools: &[(&str, SideEffect)]) -> Manifest {
        let mut text = String::from(
            "name = \"grep\"\nversion = \"0.1.0\"\ntool_api = \"1.0.0\"\ntarget = \"x86_64-unknown-linux-gnu\"\nlibrary = \"libgrep.so\"\nsha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\nunwinds = true\n",
        );
        for (name, class) in tools {
            text.push_str(&format!(
                "[[tools]]\nname = \"{name}\"\nside_effects = \"{}\"\n",
                class.as_str()
            ));
        }
        Manifest::parse(Path::new("plugin.toml"), &text).unwrap()
    }

    #[test]
    fn changes_name_added_removed_widened_and_narrowed_tools() {
        use SideEffect::*;
        let old = manifest(&[("grep", Read), ("count", None), ("fetch", Network)]);
        let new = manifest(&[
            ("grep", Execute),
            ("count", None),
            ("fetch", Read),
            ("tail", Read),
        ]);
        let c = Changes::between(Some(&old), &new);
        assert_eq!(c.added, [("tail".to_string(), Read)]);
        assert_eq!(c.removed, Vec::<String>::new());
        assert_eq!(c.widened, [("grep".to_string(), Read, Execute)]);
        assert_eq!(c.narrowed, [("fetch".to_string(), Network, Read)]);
        assert!(c.asks(Some(&old)));
        let text = c.to_string();
        assert!(text.contains("grep: read -> execute (wider)"), "{text}");
    }

    #[test]
    fn an_update_asks_for_a_wider_class_not_for_the_same_ones() {
        use SideEffect::*;
        let old = manifest(&[("grep", Read)]);
        let same = manifest(&[("grep", Read), ("count", None)]);
        assert!(!Changes::between(Some(&old), &same).asks(Some(&old)));
        let new_writer = manifest(&[("grep", Read), ("sed", Write)]);
        assert!(Changes::between(Some(&old), &new_writer).asks(Some(&old)));
        let gone = manifest(&[("count", None)]);
        let c = Changes::between(Some(&old), &gone);
        assert_eq!(c.removed, ["grep"]);
        assert!(!c.asks(Some(&old)));
    }
}
