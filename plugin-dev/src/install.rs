//! `plugin install PACKAGE --dir DIR`: a package verified, then copied into a plugin
//! directory, replacing other versions of the same plugin there.

use std::path::{Path, PathBuf};

use plugin_host::{Manifest, package};

use crate::error::{Result, fail, io};
use crate::inspect::Inspector;
use crate::verify::{PackageFolder, verify};

/// The default install directory: `$XDG_DATA_HOME/toolhost/plugins` or
/// `~/.local/share/toolhost/plugins`.
pub fn default_install_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("toolhost/plugins")
}

/// What `plugin install` did.
#[derive(Debug)]
pub struct Installed {
    /// Where the package is now.
    pub path: PathBuf,
    /// The verification report.
    pub report: String,
    /// Other versions of the same plugin it replaced.
    pub replaced: Vec<(String, PathBuf)>,
}

impl std::fmt::Display for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.report)?;
        for (version, path) in &self.replaced {
            writeln!(f, "replaced {version} ({})", path.display())?;
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        writeln!(f, "installed {}", self.path.display())?;
        writeln!(
            f,
            "load it with: toolhost --plugins {} list   (or plugin_dirs = [\"{}\"] in toolhost.toml)",
            dir.display(),
            dir.display()
        )
    }
}

/// The plugin name and version of each package in `dir` (folders and archives), by path.
fn installed_packages(dir: &Path) -> Vec<(PathBuf, Manifest)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .filter_map(|p| {
            let folder = PackageFolder::of(&p).ok()?;
            let file = folder.path.join(plugin_host::MANIFEST_FILE);
            let manifest = Manifest::parse(&file, &std::fs::read_to_string(&file).ok()?).ok()?;
            Some((p, manifest))
        })
        .collect()
}

/// `plugin install PACKAGE [--dir DIR]`: verifies, then copies the package into DIR (a temp
/// name, then a rename), and removes other versions of the same plugin there, which would
/// otherwise clash with it; a newer version already installed is not replaced.
pub fn install(package: &Path, dir: Option<&Path>, inspector: &Inspector) -> Result<Installed> {
    let report = verify(package, inspector)?;
    let step = "install the package";
    let dir = dir.map_or_else(default_install_dir, Path::to_path_buf);
    io(step, std::fs::create_dir_all(&dir))?;
    let Some(name) = package.file_name() else {
        return fail(step, "the package path has no file name");
    };
    let unpacked = PackageFolder::of(package).or_else(|e| fail(step, e))?;
    let folder = unpacked.path.as_path();
    let manifest_file = folder.join(plugin_host::MANIFEST_FILE);
    let text = io(step, std::fs::read_to_string(&manifest_file))?;
    let manifest = Manifest::parse(&manifest_file, &text).or_else(|e| fail(step, e))?;
    let dest = dir.join(name);
    let others: Vec<(PathBuf, Manifest)> = installed_packages(&dir)
        .into_iter()
        .filter(|(p, m)| m.name == manifest.name && *p != dest)
        .collect();
    if let Some((path, newer)) = others.iter().find(|(_, m)| m.version > manifest.version) {
        return fail(
            step,
            format!(
                "plugin '{}' {} is already installed at {}, newer than {}: remove it first to go back",
                manifest.name,
                newer.version,
                path.display(),
                manifest.version
            ),
        );
    }
    let partial = dir.join(format!(".{}.partial", name.to_string_lossy()));
    let _ = std::fs::remove_dir_all(&partial);
    let _ = std::fs::remove_file(&partial);
    if package.is_dir() {
        io(
            step,
            package::write_folder(&folder.join(&manifest.library), &manifest, &partial),
        )?;
        let _ = std::fs::remove_dir_all(&dest);
    } else {
        io(step, std::fs::copy(package, &partial))?;
    }
    io(step, std::fs::rename(&partial, &dest))?;
    let mut replaced = Vec::new();
    for (path, old) in others {
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        io(step, removed)?;
        replaced.push((old.version.to_string(), path));
    }
    Ok(Installed {
        path: dest,
        report,
        replaced,
    })
}
