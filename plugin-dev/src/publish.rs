//! `plugin publish PACKAGE REF`: a package to an OCI registry (see the `plugin-oci` crate
//! for the layout), after the checks a host makes before it loads one.

use std::path::Path;

use crate::error::{Result, fail};
use crate::verify::PackageFolder;

/// Publishes a package folder or archive to `reference`; returns the report to print (where
/// it went, its digests, its signer, how users install it).
pub async fn publish(package: &Path, reference: &str) -> Result<String> {
    use std::fmt::Write as _;
    let step = "publish the package";
    let unpacked = PackageFolder::of(package).or_else(|e| fail(step, e))?;
    let folder = unpacked.path;
    let manifest =
        checked(&folder).or_else(|e| fail(step, format!("{}: {e}", package.display())))?;
    let files = plugin_oci::artifact::PackageFiles::read(&folder).or_else(|e| fail(step, e))?;
    let reference = plugin_oci::parse_reference(reference).or_else(|e| fail(step, e))?;
    let registry = plugin_oci::Registry::for_reference(&reference).or_else(|e| fail(step, e))?;
    let published = registry
        .publish(&files, &reference)
        .await
        .or_else(|e| fail(step, e))?;
    let mut report = String::new();
    let _ = writeln!(
        report,
        "published {} {} ({}) to {}",
        manifest.name, manifest.version, manifest.target, published.reference
    );
    let _ = writeln!(report, "  tag digest: {}", published.digest);
    let _ = writeln!(report, "  artifact:   {}", published.artifact);
    let _ = writeln!(report, "  targets:    {}", published.targets.join(", "));
    match plugin_host::trust::read_signature(&folder) {
        Ok(Some(sig)) => writeln!(report, "  signed by:  {} ({})", sig.key.id(), sig.key),
        _ => writeln!(
            report,
            "  unsigned: hosts with require_signatures = true refuse it; sign it with `toolhost plugin sign PACKAGE --key FILE` and publish again"
        ),
    }
    .ok();
    let _ = writeln!(
        report,
        "install it with: toolhost plugin install {}",
        published.reference
    );
    Ok(report)
}

/// The checks of a package that hold on any machine (its target may be another one's): the
/// manifest parses, the library is the one it names, and a signature holds.
fn checked(folder: &Path) -> std::result::Result<plugin_host::Manifest, String> {
    let file = folder.join(plugin_host::MANIFEST_FILE);
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let manifest = plugin_host::Manifest::parse(&file, &text).map_err(|e| e.to_string())?;
    let library = folder.join(&manifest.library);
    let sha = plugin_host::digest::sha256_file(&library)
        .map_err(|e| format!("{}: {e}", library.display()))?;
    if !sha.eq_ignore_ascii_case(&manifest.sha256) {
        return Err(format!(
            "{} is not the library plugin.toml names (sha256 {sha}, plugin.toml says {}): package it again",
            manifest.library, manifest.sha256
        ));
    }
    if let Ok(Some(sig)) = plugin_host::trust::read_signature(folder)
        && let plugin_host::Verdict::Bad(why) =
            plugin_host::trust::verify(folder, &manifest.library, &[sig.key])
    {
        return Err(why);
    }
    Ok(manifest)
}
