//! `cargo xtask dist`: the release archive, `toolhost-VERSION-TARGET.tar.gz`, for users
//! who take a binary rather than a wheel or a build: one folder with the `toolhost`
//! binary (the `dist` profile's: fat LTO, one codegen unit), the README and both licenses,
//! and beside the archive its SHA-256 in `sha256sum`'s format (`sha256sum -c` checks it).

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::steps::{Result, announce, cargo, fail, root};

/// The files of the repository that go into the archive beside the binary.
const BESIDE: [&str; 3] = ["README.md", "LICENSE-MIT", "LICENSE-APACHE"];

/// What `cargo xtask dist` made.
#[derive(Debug)]
pub struct Archive {
    /// `OUT/toolhost-VERSION-TARGET.tar.gz`.
    pub path: PathBuf,
    /// `OUT/toolhost-VERSION-TARGET.tar.gz.sha256`.
    pub sha256: PathBuf,
}

/// Builds the `dist` profile's `toolhost` (unless `binary` names one already built) and
/// archives it into `out` (default `target/dist`).
pub fn dist(binary: Option<&Path>, out: Option<&Path>) -> Result<Archive> {
    let binary = match binary {
        Some(binary) => binary.to_path_buf(),
        None => {
            crate::steps::run(
                "build toolhost with the dist profile (fat LTO: minutes)",
                cargo().args(["build", "--locked", "--profile", "dist", "-p", "toolhost"]),
            )?;
            root().join("target/dist/toolhost")
        }
    };
    let out = out.map_or_else(|| root().join("target/dist"), Path::to_path_buf);
    let archive = archive(&binary, &out)?;
    println!("{}", archive.path.display());
    println!("{}", archive.sha256.display());
    Ok(archive)
}

/// Archives `binary` (a `toolhost`) into `out`; its version comes from the binary itself
/// (`toolhost --version`), so the name cannot disagree with what it runs.
pub fn archive(binary: &Path, out: &Path) -> Result<Archive> {
    const STEP: &str = "make the release archive";
    announce(STEP);
    let version = version_of(binary).or_else(|e| fail(STEP, e))?;
    let folder = format!("toolhost-{version}-{}", plugin_host::HOST_TARGET);
    let name = format!("{folder}.tar.gz");
    let write = |out: &Path| -> std::io::Result<Archive> {
        std::fs::create_dir_all(out)?;
        let path = out.join(&name);
        let partial = out.join(format!(".{name}.partial"));
        let written = (|| {
            let gz = flate2::write::GzEncoder::new(
                File::create(&partial)?,
                flate2::Compression::default(),
            );
            let mut tar = tar::Builder::new(gz);
            tar.mode(tar::HeaderMode::Deterministic);
            // A binary named through a symlink is archived as the file it names.
            tar.follow_symlinks(true);
            tar.append_path_with_name(binary, Path::new(&folder).join("toolhost"))?;
            for file in BESIDE {
                tar.append_path_with_name(root().join(file), Path::new(&folder).join(file))?;
            }
            tar.into_inner()?.finish()?.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
        std::fs::rename(&partial, &path)?;
        let digest = plugin_host::digest::sha256_file(&path)?;
        let sha256 = out.join(format!("{name}.sha256"));
        let mut file = File::create(&sha256)?;
        writeln!(file, "{digest}  {name}")?;
        file.sync_all()?;
        Ok(Archive { path, sha256 })
    };
    write(out).or_else(|e| {
        fail(
            STEP,
            format!("writing {} failed: {e}", out.join(&name).display()),
        )
    })
}

/// The version a `toolhost` binary reports (`toolhost 0.1.0` → `0.1.0`).
fn version_of(binary: &Path) -> std::result::Result<String, String> {
    let output = Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {} ({e}): build it first", binary.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    match text.trim().strip_prefix("toolhost ") {
        Some(version) if output.status.success() && semver::Version::parse(version).is_ok() => {
            Ok(version.to_owned())
        }
        _ => Err(format!(
            "{} --version answered {:?}, not `toolhost VERSION`: is it a toolhost binary?",
            binary.display(),
            text.trim()
        )),
    }
}
