//! The checks a package passes: before its library is opened (manifest, target, tool-api
//! versions, checksum) and after (what the library exports against its manifest).

use std::io;
use std::path::{Path, PathBuf};

use crate::digest::Digests;
use crate::manifest::PackageKind;
use crate::trust::{self, PublicKey, Verdict};
use crate::{Library, MANIFEST_FILE, Manifest, Refusal, library};

/// Checks everything that can be checked without running the library's code, for a
/// package that will load in process (a native `panic = "abort"` build is refused).
pub fn preflight(folder: &Path) -> Result<(Manifest, PathBuf), Refusal> {
    let (manifest, library) = preflight_files(folder, &Digests::uncached())?;
    if manifest.kind == PackageKind::Native && !manifest.unwinds {
        return Err(Refusal::PanicAbort);
    }
    Ok((manifest, library))
}

/// The checks of [`preflight`] that hold whatever the isolation.
pub(crate) fn preflight_files(
    folder: &Path,
    digests: &Digests,
) -> Result<(Manifest, PathBuf), Refusal> {
    let manifest_path = folder.join(MANIFEST_FILE);
    // Read without asking first whether it is there: one path lookup, not two.
    let text = std::fs::read_to_string(&manifest_path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => Refusal::NotAPackage {
            detail: format!("no {MANIFEST_FILE} in '{}'", folder.display()),
        },
        _ => Refusal::Manifest {
            detail: format!("{}: {e}", manifest_path.display()),
        },
    })?;
    let manifest = Manifest::parse(&manifest_path, &text).map_err(|e| Refusal::Manifest {
        detail: e.to_string(),
    })?;
    let expected = manifest.kind.expected_target();
    if manifest.target != expected {
        return Err(Refusal::WrongTarget {
            found: manifest.target.clone(),
            expected: expected.into(),
        });
    }
    match manifest.kind {
        PackageKind::Native => check_versions(&manifest.tool_api, &manifest.requires_tool_api)?,
        PackageKind::Component => check_interface(&manifest.tool_api)?,
    }
    let library = folder.join(&manifest.library);
    // The digest's own look at the file says whether it is there (and a regular file).
    let actual = digests.sha256(&library).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::InvalidInput => Refusal::MissingLibrary {
            library: manifest.library.clone(),
        },
        _ => Refusal::LoadFailed {
            path: library.display().to_string(),
            detail: e.to_string(),
        },
    })?;
    if !actual.eq_ignore_ascii_case(&manifest.sha256) {
        return Err(Refusal::ChecksumMismatch {
            library: manifest.library.clone(),
            expected: manifest.sha256.clone(),
            actual,
        });
    }
    Ok((manifest, library))
}

/// Everything a host checks of a package before it opens the library, the signature
/// included (against `trusted` keys; with `require_signatures`, an unsigned package is
/// refused): what an installer checks of a package it downloaded, exactly as a host will
/// check it when it loads it. Returns the manifest and the key it is signed by, if trusted.
pub fn verify_package(
    folder: &Path,
    trusted: &[PublicKey],
    require_signatures: bool,
) -> Result<(Manifest, Option<PublicKey>), Refusal> {
    verified_files(folder, trusted, require_signatures, &Digests::uncached())
        .map(|(manifest, _, key)| (manifest, key))
}

/// [`verify_package`], with the library's path, taking digests from `digests`.
pub(crate) fn verified_files(
    folder: &Path,
    trusted: &[PublicKey],
    require_signatures: bool,
    digests: &Digests,
) -> Result<(Manifest, PathBuf, Option<PublicKey>), Refusal> {
    let (manifest, library) = preflight_files(folder, digests)?;
    let name = manifest.name.clone();
    let signed_by = match trust::verify_with(folder, &manifest.library, trusted, digests) {
        Verdict::Trusted(key) => Some(key),
        Verdict::Unsigned if require_signatures => return Err(Refusal::Unsigned { name }),
        Verdict::Unsigned => None,
        Verdict::Untrusted(_) if !require_signatures => None,
        Verdict::Untrusted(detail) | Verdict::Bad(detail) => {
            return Err(Refusal::BadSignature { name, detail });
        }
    };
    Ok((manifest, library, signed_by))
}

/// The semver verdict: same major as the host, and nothing required that the host lacks.
pub fn check_versions(built: &semver::Version, requires: &semver::Version) -> Result<(), Refusal> {
    let host = semver::Version::parse(tool_api::TOOL_API_VERSION)
        .unwrap_or_else(|_| semver::Version::new(1, 0, 0));
    if built.major != host.major || requires.major != host.major {
        return Err(Refusal::IncompatibleAbi {
            built: built.to_string(),
            host: host.to_string(),
            rebuild: format!("{}.{}", host.major, host.minor),
            detail: String::new(),
        });
    }
    if requires > &host {
        return Err(Refusal::NeedsNewerHost {
            requires: requires.to_string(),
            host: host.to_string(),
        });
    }
    Ok(())
}

/// The component's `toolhost:plugin` version against the host's: the native ABI's rule,
/// same major and a minor not newer than the host's.
pub fn check_interface(built: &semver::Version) -> Result<(), Refusal> {
    let host = semver::Version::parse(tool_api::WIT_VERSION)
        .unwrap_or_else(|_| semver::Version::new(1, 0, 0));
    let refuse = |advice: String| {
        Err(Refusal::IncompatibleInterface {
            built: built.to_string(),
            host: host.to_string(),
            advice,
        })
    };
    if built.major != host.major {
        return refuse(format!(
            "major versions differ; rebuild the component against toolhost:plugin@{}.{}",
            host.major, host.minor
        ));
    }
    if built.minor > host.minor {
        return refuse(format!(
            "it needs a newer host; upgrade toolhost, or rebuild the component against toolhost:plugin@{}.{}",
            host.major, host.minor
        ));
    }
    Ok(())
}

/// Compares what the library says with its manifest (for a library opened in process: a
/// `panic = "abort"` build is refused).
pub fn compare(manifest: &Manifest, lib: &Library) -> Result<(), Refusal> {
    compare_inspection(manifest, lib.exported(), true)
}

/// Compares what a library exports with its manifest; `in_process` refuses a library that
/// cannot contain its panics.
pub(crate) fn compare_inspection(
    manifest: &Manifest,
    lib: library::Exported<'_>,
    in_process: bool,
) -> Result<(), Refusal> {
    let mismatch = |key: &'static str, m: String, l: String| {
        Err(Refusal::ManifestMismatch {
            key: key.to_string(),
            manifest: m,
            library: l,
        })
    };
    if lib.name != manifest.name {
        return mismatch("name", manifest.name.clone(), lib.name.to_string());
    }
    if lib.version != manifest.version.to_string() {
        return mismatch(
            "version",
            manifest.version.to_string(),
            lib.version.to_string(),
        );
    }
    if lib.tool_api != manifest.tool_api.to_string() {
        return mismatch(
            "tool_api",
            manifest.tool_api.to_string(),
            lib.tool_api.to_string(),
        );
    }
    if lib.requires_tool_api != manifest.requires_tool_api.to_string() {
        return mismatch(
            "requires_tool_api",
            manifest.requires_tool_api.to_string(),
            lib.requires_tool_api.to_string(),
        );
    }
    if in_process && !lib.unwinds {
        return Err(Refusal::PanicAbort);
    }
    let problems = tool_api::testing::definition_problems(lib.tools);
    if !problems.is_empty() {
        return Err(Refusal::Definitions { problems });
    }
    let missing: Vec<&str> = manifest
        .tools
        .iter()
        .filter(|t| !lib.tools.iter().any(|d| d.name == t.name))
        .map(|t| t.name.as_str())
        .collect();
    let extra: Vec<&str> = lib
        .tools
        .iter()
        .filter(|d| !manifest.tools.iter().any(|t| t.name == d.name))
        .map(|d| d.name.as_str())
        .collect();
    if !missing.is_empty() || !extra.is_empty() {
        let mut parts = Vec::new();
        if !missing.is_empty() {
            parts.push(format!(
                "listed but not in the library: {}",
                missing.join(", ")
            ));
        }
        if !extra.is_empty() {
            parts.push(format!(
                "in the library but not listed: {}",
                extra.join(", ")
            ));
        }
        return Err(Refusal::ToolListMismatch {
            detail: parts.join("; "),
        });
    }
    for t in &manifest.tools {
        if let Some(d) = lib.tools.iter().find(|d| d.name == t.name)
            && d.side_effects != t.side_effects
        {
            return Err(Refusal::SideEffectMismatch {
                tool: t.name.clone(),
                manifest: t.side_effects,
                library: d.side_effects,
            });
        }
    }
    Ok(())
}
