//! `cargo xtask plugin publish PACKAGE REF`: a package to an OCI registry (see the
//! `plugin-oci` crate for the layout), after the checks a host makes before it loads one.

use std::path::Path;

use crate::steps::{Result, fail};

/// Publishes a package folder or archive to `reference`; returns the report to print.
pub fn publish(package: &Path, reference: &str) -> Result {
    let step = "publish the package";
    let scratch = tempfile::tempdir().or_else(|e| fail(step, e))?;
    let folder = if package.is_dir() {
        package.to_path_buf()
    } else if package.is_file() {
        plugin_host::package::unpack_cached(package, scratch.path())
            .or_else(|e| fail(step, format!("{}: {e}", package.display())))?
    } else {
        return fail(step, format!("'{}' does not exist", package.display()));
    };
    let manifest =
        checked(&folder).or_else(|e| fail(step, format!("{}: {e}", package.display())))?;
    let files = plugin_oci::artifact::PackageFiles::read(&folder).or_else(|e| fail(step, e))?;
    let reference = plugin_oci::parse_reference(reference).or_else(|e| fail(step, e))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .or_else(|e| fail(step, e))?;
    let published = runtime
        .block_on(async {
            let registry = plugin_oci::Registry::for_reference(&reference)?;
            registry.publish(&files, &reference).await
        })
        .or_else(|e| fail(step, e))?;
    println!(
        "published {} {} ({}) to {}",
        manifest.name, manifest.version, manifest.target, published.reference
    );
    println!("  tag digest: {}", published.digest);
    println!("  artifact:   {}", published.artifact);
    println!("  targets:    {}", published.targets.join(", "));
    match plugin_host::trust::read_signature(&folder) {
        Ok(Some(sig)) => println!("  signed by:  {} ({})", sig.key.id(), sig.key),
        _ => println!(
            "  unsigned: hosts with require_signatures = true refuse it; sign it with `cargo xtask plugin sign PACKAGE --key FILE` and publish again"
        ),
    }
    println!(
        "install it with: toolhost plugin install {}",
        published.reference
    );
    Ok(())
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
