//! Plugin packages on disk: folders and `.tar.gz` archives, checksums, unpacking, packing.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use crate::manifest::MANIFEST_FILE;

/// One thing found in a plugin directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A folder (whether or not it holds a `plugin.toml`).
    Folder(PathBuf),
    /// A `.tar.gz` / `.tgz` archive.
    Archive(PathBuf),
    /// A bare library (`.so`, `.dylib`, `.dll`) outside a package: a common mistake,
    /// reported rather than ignored.
    Library(PathBuf),
}

impl Found {
    /// Where it is.
    pub fn path(&self) -> &Path {
        match self {
            Found::Folder(p) | Found::Archive(p) | Found::Library(p) => p,
        }
    }
}

fn is_archive(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    name.ends_with(".tar.gz") || name.ends_with(".tgz")
}

/// The packages of a plugin directory, sorted by path. Hidden entries are skipped; other
/// loose files are skipped with a debug log. An entry's kind comes from the directory
/// listing; only a symlink is looked up (and followed).
pub fn discover(dir: &Path) -> io::Result<Vec<Found>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if hidden {
            continue;
        }
        let kind = entry.file_type()?;
        let is_dir = if kind.is_symlink() {
            path.is_dir()
        } else {
            kind.is_dir()
        };
        if is_dir {
            found.push(Found::Folder(path));
        } else if is_archive(&path) {
            found.push(Found::Archive(path));
        } else if path
            .extension()
            .is_some_and(|e| e == "so" || e == "dylib" || e == "dll")
        {
            found.push(Found::Library(path));
        } else {
            tracing::debug!(path = %path.display(), "not a plugin package; skipped");
        }
    }
    found.sort_by(|a, b| a.path().cmp(b.path()));
    Ok(found)
}

/// Why an archive could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Reading, decompressing or writing failed.
    #[error("cannot unpack: {0}")]
    Io(#[from] io::Error),
    /// An entry is not a plain file or directory inside the package.
    #[error(
        "refused entry '{0}': archives may hold only plain files and folders, without absolute paths or '..'"
    )]
    UnsafeEntry(String),
    /// The archive unpacks to more than the limits allow (a decompression bomb, or not a
    /// plugin package).
    #[error(
        "archive too large: more than {limit} when unpacked; a plugin package holds a manifest and one library"
    )]
    TooLarge {
        /// Which limit.
        limit: String,
    },
    /// The archive holds no `plugin.toml`.
    #[error("no plugin.toml in the archive (make archives with `cargo xtask plugin package`)")]
    NoManifest,
}

/// Unpacks `archive` into `cache/<sha256 of the archive>/` (once; later calls reuse it) and
/// returns the folder that holds `plugin.toml`. Only plain files and folders with relative,
/// `..`-free paths are accepted; the archive is unpacked into a temporary folder and renamed
/// into place, so an interrupted unpack never leaves a half package in the cache.
pub fn unpack_cached(archive: &Path, cache: &Path) -> Result<PathBuf, ArchiveError> {
    unpack_cached_with(archive, cache, &crate::digest::Digests::uncached())
}

/// [`unpack_cached`], taking the archive's digest from `digests`.
pub fn unpack_cached_with(
    archive: &Path,
    cache: &Path,
    digests: &crate::digest::Digests,
) -> Result<PathBuf, ArchiveError> {
    let digest = digests.sha256(archive)?;
    let target = cache.join(&digest);
    if !target.is_dir() {
        std::fs::create_dir_all(cache)?;
        let tmp = cache.join(format!(".{digest}.{}.partial", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        if let Err(e) = unpack_into(archive, &tmp) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        if let Err(e) = std::fs::rename(&tmp, &target) {
            let _ = std::fs::remove_dir_all(&tmp);
            if !target.is_dir() {
                return Err(e.into());
            }
        }
    }
    package_root(&target).ok_or(ArchiveError::NoManifest)
}

/// [`unpack_cached_with`] after removing what the cache holds for `archive` (a copy that
/// was changed after it was unpacked).
pub fn unpack_again(
    archive: &Path,
    cache: &Path,
    digests: &crate::digest::Digests,
) -> Result<PathBuf, ArchiveError> {
    let target = cache.join(digests.sha256(archive)?);
    match std::fs::remove_dir_all(&target) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    unpack_cached_with(archive, cache, digests)
}

/// Most bytes an archive may unpack to.
pub const MAX_UNPACKED_BYTES: u64 = 1024 * 1024 * 1024;
/// Most entries an archive may hold.
pub const MAX_ENTRIES: usize = 256;

fn unpack_into(archive: &Path, dest: &Path) -> Result<(), ArchiveError> {
    let decoder = flate2::read::GzDecoder::new(File::open(archive)?);
    let mut tar = tar::Archive::new(decoder);
    let mut total: u64 = 0;
    for (n, entry) in tar.entries()?.enumerate() {
        if n >= MAX_ENTRIES {
            return Err(ArchiveError::TooLarge {
                limit: format!("{MAX_ENTRIES} entries"),
            });
        }
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let kind = entry.header().entry_type();
        let safe_path = path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !safe_path || !(kind.is_file() || kind.is_dir()) {
            return Err(ArchiveError::UnsafeEntry(path.display().to_string()));
        }
        let out = dest.join(&path);
        if kind.is_dir() {
            std::fs::create_dir_all(&out)?;
        } else {
            if let Some(parent) = out.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mut file = File::create(&out)?;
            let budget = MAX_UNPACKED_BYTES.saturating_sub(total);
            let copied = io::copy(&mut (&mut entry).take(budget + 1), &mut file)?;
            total += copied;
            if copied > budget {
                return Err(ArchiveError::TooLarge {
                    limit: format!("{} MiB", MAX_UNPACKED_BYTES / (1024 * 1024)),
                });
            }
        }
    }
    Ok(())
}

/// The folder holding `plugin.toml`: `dir` itself or its only subfolder.
fn package_root(dir: &Path) -> Option<PathBuf> {
    if dir.join(MANIFEST_FILE).is_file() {
        return Some(dir.to_path_buf());
    }
    let subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    match subdirs.as_slice() {
        [only] if only.join(MANIFEST_FILE).is_file() => Some(only.clone()),
        _ => None,
    }
}

/// Makes a package folder `dest`: copies the library in and writes `plugin.toml` (each via
/// a temporary file renamed into place).
pub fn write_folder(library: &Path, manifest: &crate::Manifest, dest: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dest)?;
    let lib_tmp = dest.join(format!(".{}.partial", manifest.library));
    std::fs::copy(library, &lib_tmp)?;
    std::fs::rename(&lib_tmp, dest.join(&manifest.library))?;
    let toml_tmp = dest.join(format!(".{MANIFEST_FILE}.partial"));
    std::fs::write(&toml_tmp, manifest.to_toml())?;
    std::fs::rename(&toml_tmp, dest.join(MANIFEST_FILE))
}

/// Writes `NAME-VERSION-TARGET.tar.gz` into `out_dir` from a package folder (its
/// `plugin.toml` and library, under a top folder named after the plugin). Returns its path.
pub fn pack(package_dir: &Path, manifest: &crate::Manifest, out_dir: &Path) -> io::Result<PathBuf> {
    std::fs::create_dir_all(out_dir)?;
    let file_name = format!(
        "{}-{}-{}.tar.gz",
        manifest.name, manifest.version, manifest.target
    );
    let out = out_dir.join(&file_name);
    let tmp = out_dir.join(format!(".{file_name}.partial"));
    let result = (|| {
        let gz = flate2::write::GzEncoder::new(File::create(&tmp)?, flate2::Compression::default());
        let mut tar = tar::Builder::new(gz);
        tar.mode(tar::HeaderMode::Deterministic);
        let signed = package_dir.join(crate::trust::SIGNATURE_FILE).is_file();
        let signature = signed.then_some(crate::trust::SIGNATURE_FILE);
        for name in [MANIFEST_FILE, manifest.library.as_str()]
            .into_iter()
            .chain(signature)
        {
            tar.append_path_with_name(
                package_dir.join(name),
                Path::new(&manifest.name).join(name),
            )?;
        }
        tar.into_inner()?.finish()?.sync_all()
    })();
    match result {
        Ok(()) => {
            std::fs::rename(&tmp, &out)?;
            Ok(out)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
