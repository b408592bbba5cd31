//! `plugin keygen` and `plugin sign`: an author's signing key, and a package signed with it.

use std::path::Path;

use plugin_host::{Manifest, package};

use crate::error::{Result, announce, fail, io};

/// `plugin keygen FILE`: a new signing key in FILE (mode 0600, never overwritten) and its
/// public key in FILE.pub; returns the public key.
pub fn keygen(file: &Path) -> Result<plugin_host::PublicKey> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let step = format!("generate a signing key in {}", file.display());
    announce(&step);
    let mut seed = [0u8; 32];
    if let Err(e) = getrandom::fill(&mut seed) {
        return fail(&step, format!("the OS random source failed: {e}"));
    }
    let key = plugin_host::trust::SecretKey::from_seed(seed);
    if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
        io(&step, std::fs::create_dir_all(parent))?;
    }
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file);
    let mut out = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return fail(
                &step,
                format!(
                    "{} already exists; a key is never overwritten (choose another file)",
                    file.display()
                ),
            );
        }
        Err(e) => return fail(&step, e),
    };
    io(&step, out.write_all(key.to_file_text().as_bytes()))?;
    let public = key.public();
    let mut pub_file = file.as_os_str().to_owned();
    pub_file.push(".pub");
    io(&step, std::fs::write(&pub_file, format!("{public}\n")))?;
    Ok(public)
}

/// `plugin sign PACKAGE --key FILE`: writes `plugin.sig` into a package folder, or into an
/// archive (re-packed in place). Returns the signing key's public half.
pub fn sign(package: &Path, key_file: &Path) -> Result<plugin_host::PublicKey> {
    let step = format!("sign {}", package.display());
    announce(&step);
    let key = plugin_host::trust::SecretKey::read(key_file).or_else(|e| fail(&step, e))?;
    if package.is_dir() {
        plugin_host::trust::sign(package, &key).or_else(|e| fail(&step, e))?;
        return Ok(key.public());
    }
    if !package.is_file() {
        return fail(&step, format!("'{}' does not exist", package.display()));
    }
    // A scratch folder of this run's own (two signings of one archive at once unpack to
    // the same digest, and one must not remove the other's files), beside the archive: the
    // signed archive replaces it by a rename, which stays on one file system.
    let parent = package
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let scratch_dir = io(
        &step,
        tempfile::Builder::new()
            .prefix(".toolhost-sign-")
            .tempdir_in(parent),
    )?;
    let scratch = scratch_dir.path();
    let folder = package::unpack_cached(package, scratch).or_else(|e| fail(&step, e))?;
    let text = io(
        &step,
        std::fs::read_to_string(folder.join(plugin_host::MANIFEST_FILE)),
    )?;
    let manifest = Manifest::parse(&folder.join(plugin_host::MANIFEST_FILE), &text)
        .or_else(|e| fail(&step, e))?;
    plugin_host::trust::sign(&folder, &key).or_else(|e| fail(&step, e))?;
    let out_dir = scratch.join("out");
    let packed = io(&step, package::pack(&folder, &manifest, &out_dir))?;
    io(&step, std::fs::rename(&packed, package))?;
    Ok(key.public())
}
