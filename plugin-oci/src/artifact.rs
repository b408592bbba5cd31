//! How a plugin package is laid out as an OCI artifact, both ways: a package folder into
//! the manifest, config and layer that are pushed, and a pulled manifest and layer back
//! into a package folder.
//!
//! One artifact per package (per target): its only layer is the package's library, and the
//! package's `plugin.toml` and `plugin.sig` travel as annotations of the manifest beside the
//! manifest's fields, so a registry's UI and `oras manifest fetch` show what a package is
//! without pulling it.
//!
//! - A native library: artifact type [`NATIVE_ARTIFACT_TYPE`], the empty config of OCI 1.1
//!   artifacts, a layer of [`NATIVE_LAYER_MEDIA_TYPE`]. A tag names an image index with one
//!   such manifest per target triple ([`TARGET_ANNOTATION`], and the OCI platform).
//! - A WebAssembly component: the CNCF WebAssembly OCI artifact layout (config
//!   [`WASM_CONFIG_MEDIA_TYPE`], one layer `application/wasm`), one artifact for every
//!   target, so that other component tools pull it as they pull any component.

use std::collections::BTreeMap;
use std::path::Path;

use plugin_host::{MANIFEST_FILE, Manifest, PackageKind, trust::SIGNATURE_FILE};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::OciError;

/// The artifact type of a native plugin package's manifest.
pub const NATIVE_ARTIFACT_TYPE: &str = "application/vnd.toolhost.plugin.v1";
/// The media type of a native package's layer: its shared library.
pub const NATIVE_LAYER_MEDIA_TYPE: &str = "application/vnd.toolhost.plugin.library.v1";
/// The media type of the empty config an artifact without a config of its own carries.
pub const EMPTY_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The config media type of the WebAssembly OCI artifact format.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The layer media type of the WebAssembly OCI artifact format.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// An OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index.
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";

/// The annotation holding the package's `plugin.toml`, as written.
pub const MANIFEST_ANNOTATION: &str = "dev.toolhost.plugin.manifest";
/// The annotation holding the package's `plugin.sig`, when it is signed.
pub const SIGNATURE_ANNOTATION: &str = "dev.toolhost.plugin.signature";
/// The annotation naming a manifest's target triple (on the manifest and in the index).
pub const TARGET_ANNOTATION: &str = "dev.toolhost.plugin.target";
/// The annotation listing the tools and their classes: `name=class,…`.
pub const TOOLS_ANNOTATION: &str = "dev.toolhost.plugin.tools";
const TITLE: &str = "org.opencontainers.image.title";
const VERSION: &str = "org.opencontainers.image.version";
const CREATED: &str = "org.opencontainers.image.created";

/// The most bytes a pulled manifest or index may have (registries cap theirs at 4 MiB).
pub const MAX_MANIFEST_BYTES: usize = 4 * 1024 * 1024;

/// The empty JSON object, the content of [`EMPTY_CONFIG_MEDIA_TYPE`].
pub const EMPTY_CONFIG: &[u8] = b"{}";

/// A content descriptor: what a manifest says about a blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Its media type.
    pub media_type: String,
    /// `sha256:HEX`.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// Where an index entry's manifest runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// Its artifact type (an index entry for an artifact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// Its annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An OCI platform (GOOS and GOARCH names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    /// `amd64`, `arm64`, `wasm`, …
    pub architecture: String,
    /// `linux`, `darwin`, `windows`, `wasip2`, …
    pub os: String,
}

/// An OCI image manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageManifest {
    /// Always 2.
    pub schema_version: u32,
    /// [`MANIFEST_MEDIA_TYPE`].
    #[serde(default)]
    pub media_type: Option<String>,
    /// Its artifact type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    /// Its annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An OCI image index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageIndex {
    /// Always 2.
    pub schema_version: u32,
    /// [`INDEX_MEDIA_TYPE`].
    #[serde(default)]
    pub media_type: Option<String>,
    /// Its artifact type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// One manifest per target.
    #[serde(default)]
    pub manifests: Vec<Descriptor>,
    /// Its annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// What a reference names, as pulled.
#[derive(Debug, Clone)]
pub enum Pulled {
    /// One artifact.
    Manifest(ImageManifest),
    /// An index of them.
    Index(ImageIndex),
}

impl Pulled {
    /// Parses a pulled manifest or index; `what` names it in the error.
    pub fn parse(bytes: &[u8], what: &str) -> Result<Pulled, OciError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Probe {
            media_type: Option<String>,
            manifests: Option<serde_json::Value>,
        }
        let bad = |e: serde_json::Error| OciError::NotAPlugin {
            reference: what.to_string(),
            detail: format!("its manifest is not OCI JSON ({e})"),
        };
        let probe: Probe = serde_json::from_slice(bytes).map_err(bad)?;
        let index = probe.media_type.as_deref() == Some(INDEX_MEDIA_TYPE)
            || (probe.media_type.is_none() && probe.manifests.is_some());
        if index {
            serde_json::from_slice(bytes)
                .map(Pulled::Index)
                .map_err(bad)
        } else {
            serde_json::from_slice(bytes)
                .map(Pulled::Manifest)
                .map_err(bad)
        }
    }
}

/// `sha256:HEX` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for b in hash {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// A package folder's files, read for publishing.
#[derive(Debug, Clone)]
pub struct PackageFiles {
    /// The parsed `plugin.toml`.
    pub manifest: Manifest,
    /// `plugin.toml` as written (the signature covers its digest).
    pub manifest_text: String,
    /// The library's bytes.
    pub library: Vec<u8>,
    /// `plugin.sig`, when the package is signed.
    pub signature: Option<String>,
}

impl PackageFiles {
    /// Reads a package folder (as `cargo xtask plugin package` makes it, unpacked).
    pub fn read(folder: &Path) -> Result<PackageFiles, OciError> {
        let manifest_path = folder.join(MANIFEST_FILE);
        let manifest_text = read_text(&manifest_path)?;
        let manifest =
            Manifest::parse(&manifest_path, &manifest_text).map_err(|e| OciError::Package {
                detail: e.to_string(),
            })?;
        let library_path = folder.join(&manifest.library);
        let library = std::fs::read(&library_path).map_err(|e| OciError::Package {
            detail: format!("cannot read {}: {e}", library_path.display()),
        })?;
        let signature = match std::fs::read_to_string(folder.join(SIGNATURE_FILE)) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(OciError::Package {
                    detail: format!("cannot read {}: {e}", folder.join(SIGNATURE_FILE).display()),
                });
            }
        };
        Ok(PackageFiles {
            manifest,
            manifest_text,
            library,
            signature,
        })
    }

    /// The config blob and the manifest that push this package (the layer is the library).
    pub fn artifact(&self) -> (Vec<u8>, ImageManifest) {
        let m = &self.manifest;
        let layer_digest = digest_of(&self.library);
        let (config, config_type, layer_type, artifact_type) = match m.kind {
            PackageKind::Native => (
                EMPTY_CONFIG.to_vec(),
                EMPTY_CONFIG_MEDIA_TYPE,
                NATIVE_LAYER_MEDIA_TYPE,
                Some(NATIVE_ARTIFACT_TYPE.to_string()),
            ),
            PackageKind::Component => (
                wasm_config(&layer_digest),
                WASM_CONFIG_MEDIA_TYPE,
                WASM_LAYER_MEDIA_TYPE,
                None,
            ),
        };
        let mut annotations = BTreeMap::from([
            (TITLE.to_string(), m.name.clone()),
            (VERSION.to_string(), m.version.to_string()),
            (MANIFEST_ANNOTATION.to_string(), self.manifest_text.clone()),
            (TARGET_ANNOTATION.to_string(), m.target.clone()),
            (TOOLS_ANNOTATION.to_string(), tools_annotation(m)),
            ("dev.toolhost.plugin.name".to_string(), m.name.clone()),
            ("dev.toolhost.plugin.kind".to_string(), m.kind.to_string()),
            (
                "dev.toolhost.plugin.tool-api".to_string(),
                m.tool_api.to_string(),
            ),
            ("dev.toolhost.plugin.sha256".to_string(), m.sha256.clone()),
        ]);
        if let Some(sig) = &self.signature {
            annotations.insert(SIGNATURE_ANNOTATION.to_string(), sig.clone());
        }
        let manifest = ImageManifest {
            schema_version: 2,
            media_type: Some(MANIFEST_MEDIA_TYPE.to_string()),
            artifact_type,
            config: Descriptor {
                media_type: config_type.to_string(),
                digest: digest_of(&config),
                size: config.len() as u64,
                platform: None,
                artifact_type: None,
                annotations: BTreeMap::new(),
            },
            layers: vec![Descriptor {
                media_type: layer_type.to_string(),
                digest: layer_digest,
                size: self.library.len() as u64,
                platform: None,
                artifact_type: None,
                annotations: BTreeMap::from([(TITLE.to_string(), m.library.clone())]),
            }],
            annotations,
        };
        (config, manifest)
    }
}

fn read_text(path: &Path) -> Result<String, OciError> {
    std::fs::read_to_string(path).map_err(|e| OciError::Package {
        detail: format!("cannot read {}: {e}", path.display()),
    })
}

/// `name=class,…`, in the manifest's order.
fn tools_annotation(m: &Manifest) -> String {
    m.tools
        .iter()
        .map(|t| format!("{}={}", t.name, t.side_effects.as_str()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The config of the WebAssembly OCI artifact format for a component whose layer is
/// `layer_digest`.
fn wasm_config(layer_digest: &str) -> Vec<u8> {
    let config = serde_json::json!({
        "created": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    });
    config.to_string().into_bytes()
}

/// The OCI platform of a Rust target triple (GOOS/GOARCH names), for an index entry.
pub fn platform_of(target: &str) -> Platform {
    let arch = target.split('-').next().unwrap_or(target);
    let architecture = match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "i686" | "i586" => "386",
        "riscv64gc" => "riscv64",
        "powerpc64le" => "ppc64le",
        "wasm32" => "wasm",
        other => other,
    };
    let os = if target.contains("-linux") {
        "linux"
    } else if target.contains("-apple-darwin") {
        "darwin"
    } else if target.contains("-windows") {
        "windows"
    } else if target.contains("-freebsd") {
        "freebsd"
    } else if target == plugin_host::manifest::COMPONENT_TARGET {
        "wasip2"
    } else {
        "unknown"
    };
    Platform {
        architecture: architecture.to_string(),
        os: os.to_string(),
    }
}

/// The index a tag names after `entry` (a manifest for `target`) is published there:
/// `existing` with its entry for the same target replaced, or a new index.
pub fn index_with(existing: Option<ImageIndex>, entry: Descriptor, target: &str) -> ImageIndex {
    let mut index = existing.unwrap_or(ImageIndex {
        schema_version: 2,
        media_type: Some(INDEX_MEDIA_TYPE.to_string()),
        artifact_type: Some(NATIVE_ARTIFACT_TYPE.to_string()),
        manifests: Vec::new(),
        annotations: BTreeMap::new(),
    });
    index
        .manifests
        .retain(|m| m.annotations.get(TARGET_ANNOTATION).map(String::as_str) != Some(target));
    index.manifests.push(entry);
    index.manifests.sort_by(|a, b| {
        a.annotations
            .get(TARGET_ANNOTATION)
            .cmp(&b.annotations.get(TARGET_ANNOTATION))
    });
    index.annotations.insert(
        CREATED.to_string(),
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    index
}

/// The targets an index offers, for an error that names them.
pub fn targets_of(index: &ImageIndex) -> Vec<String> {
    index
        .manifests
        .iter()
        .filter_map(|m| m.annotations.get(TARGET_ANNOTATION).cloned())
        .collect()
}

/// A pulled artifact's package files: its manifest's annotations and its one layer, checked
/// against each other (the layer's size and media type, the manifest's library digest).
/// The library's bytes are given once the layer is pulled: [`Unpacked::write`].
#[derive(Debug, Clone)]
pub struct Unpacked {
    /// The package's `plugin.toml`.
    pub manifest: Manifest,
    /// As written.
    pub manifest_text: String,
    /// `plugin.sig`, if the artifact carries one.
    pub signature: Option<String>,
    /// The layer holding the library.
    pub layer: Descriptor,
}

impl Unpacked {
    /// Reads what an artifact says it holds; `reference` names it in errors.
    pub fn from_manifest(image: &ImageManifest, reference: &str) -> Result<Unpacked, OciError> {
        let not = |detail: String| OciError::NotAPlugin {
            reference: reference.to_string(),
            detail,
        };
        let Some(text) = image.annotations.get(MANIFEST_ANNOTATION) else {
            return Err(not(format!(
                "its manifest has no {MANIFEST_ANNOTATION} annotation (artifact type {}, config {}): publish plugins with `cargo xtask plugin publish`",
                image.artifact_type.as_deref().unwrap_or("none"),
                image.config.media_type
            )));
        };
        let manifest = Manifest::parse(Path::new(MANIFEST_FILE), text)
            .map_err(|e| not(format!("its {MANIFEST_ANNOTATION} annotation: {e}")))?;
        let [layer] = image.layers.as_slice() else {
            return Err(not(format!(
                "a plugin artifact has one layer, this one has {}",
                image.layers.len()
            )));
        };
        let expected_type = match manifest.kind {
            PackageKind::Native => NATIVE_LAYER_MEDIA_TYPE,
            PackageKind::Component => WASM_LAYER_MEDIA_TYPE,
        };
        if layer.media_type != expected_type {
            return Err(not(format!(
                "its layer is {}, a {} package's is {expected_type}",
                layer.media_type, manifest.kind
            )));
        }
        if layer.size > plugin_host::package::MAX_UNPACKED_BYTES {
            return Err(not(format!(
                "its layer is {} bytes, more than a package may hold ({} MiB)",
                layer.size,
                plugin_host::package::MAX_UNPACKED_BYTES >> 20
            )));
        }
        let declared = format!("sha256:{}", manifest.sha256.to_ascii_lowercase());
        if layer.digest != declared {
            return Err(not(format!(
                "its layer is {} and its plugin.toml says the library is {declared}",
                layer.digest
            )));
        }
        Ok(Unpacked {
            manifest,
            manifest_text: text.clone(),
            signature: image.annotations.get(SIGNATURE_ANNOTATION).cloned(),
            layer: layer.clone(),
        })
    }

    /// Writes the package folder `dest` (its `plugin.toml`, library and `plugin.sig`):
    /// into a temporary folder beside it, renamed into place.
    pub fn write(&self, library: &[u8], dest: &Path) -> Result<(), OciError> {
        let parent = dest.parent().unwrap_or(Path::new("."));
        let io = |e: std::io::Error| OciError::Store {
            path: dest.to_path_buf(),
            detail: e.to_string(),
        };
        std::fs::create_dir_all(parent).map_err(io)?;
        let tmp = tempfile::Builder::new()
            .prefix(".partial-")
            .tempdir_in(parent)
            .map_err(io)?;
        let library_name = Path::new(&self.manifest.library);
        if library_name.components().count() != 1 || library_name.file_name().is_none() {
            return Err(OciError::NotAPlugin {
                reference: dest.display().to_string(),
                detail: format!(
                    "its plugin.toml names the library '{}', which is not a file name",
                    self.manifest.library
                ),
            });
        }
        std::fs::write(tmp.path().join(MANIFEST_FILE), &self.manifest_text).map_err(io)?;
        std::fs::write(tmp.path().join(library_name), library).map_err(io)?;
        if let Some(sig) = &self.signature {
            std::fs::write(tmp.path().join(SIGNATURE_FILE), sig).map_err(io)?;
        }
        match std::fs::remove_dir_all(dest) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
            _ => {}
        }
        std::fs::rename(tmp.keep(), dest).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_map_to_oci_platforms() {
        let table = [
            ("x86_64-unknown-linux-gnu", "amd64", "linux"),
            ("aarch64-unknown-linux-musl", "arm64", "linux"),
            ("aarch64-apple-darwin", "arm64", "darwin"),
            ("x86_64-pc-windows-msvc", "amd64", "windows"),
            ("wasm32-wasip2", "wasm", "wasip2"),
        ];
        for (target, arch, os) in table {
            let p = platform_of(target);
            assert_eq!(
                (p.architecture.as_str(), p.os.as_str()),
                (arch, os),
                "{target}"
            );
        }
    }

    fn entry(target: &str, digest: &str) -> Descriptor {
        Descriptor {
            media_type: MANIFEST_MEDIA_TYPE.into(),
            digest: digest.into(),
            size: 1,
            platform: Some(platform_of(target)),
            artifact_type: None,
            annotations: BTreeMap::from([(TARGET_ANNOTATION.into(), target.into())]),
        }
    }

    #[test]
    fn publishing_a_target_again_replaces_only_its_entry() {
        let index = index_with(
            None,
            entry("x86_64-unknown-linux-gnu", "sha256:a"),
            "x86_64-unknown-linux-gnu",
        );
        let index = index_with(
            Some(index),
            entry("aarch64-apple-darwin", "sha256:b"),
            "aarch64-apple-darwin",
        );
        let index = index_with(
            Some(index),
            entry("x86_64-unknown-linux-gnu", "sha256:c"),
            "x86_64-unknown-linux-gnu",
        );
        let digests: Vec<&str> = index.manifests.iter().map(|m| m.digest.as_str()).collect();
        assert_eq!(digests, ["sha256:b", "sha256:c"]);
        assert_eq!(
            targets_of(&index),
            ["aarch64-apple-darwin", "x86_64-unknown-linux-gnu"]
        );
    }

    #[test]
    fn an_index_and_a_manifest_are_told_apart() {
        let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        assert!(matches!(
            Pulled::parse(index, "r").unwrap(),
            Pulled::Index(_)
        ));
        let manifest = br#"{"schemaVersion":2,"config":{"mediaType":"x","digest":"sha256:1","size":2},"layers":[]}"#;
        assert!(matches!(
            Pulled::parse(manifest, "r").unwrap(),
            Pulled::Manifest(_)
        ));
        let e = Pulled::parse(b"<html>", "reg/x:1").unwrap_err().to_string();
        assert!(e.contains("reg/x:1") && e.contains("not OCI JSON"), "{e}");
    }

    /// A plugin manifest pulled from a registry that lies in `edit`'s way.
    fn hostile(edit: impl FnOnce(&mut ImageManifest)) -> String {
        let sha = "ab".repeat(32);
        let text = format!(
            "name = \"grep\"\nversion = \"0.1.0\"\ntool_api = \"1.0.0\"\ntarget = \"x86_64-unknown-linux-gnu\"\nlibrary = \"libgrep.so\"\nsha256 = \"{sha}\"\nunwinds = true\n[[tools]]\nname = \"grep\"\nside_effects = \"read\"\n"
        );
        let mut image = ImageManifest {
            schema_version: 2,
            media_type: Some(MANIFEST_MEDIA_TYPE.into()),
            artifact_type: Some(NATIVE_ARTIFACT_TYPE.into()),
            config: Descriptor {
                media_type: EMPTY_CONFIG_MEDIA_TYPE.into(),
                digest: digest_of(EMPTY_CONFIG),
                size: 2,
                platform: None,
                artifact_type: None,
                annotations: BTreeMap::new(),
            },
            layers: vec![Descriptor {
                media_type: NATIVE_LAYER_MEDIA_TYPE.into(),
                digest: format!("sha256:{sha}"),
                size: 10,
                platform: None,
                artifact_type: None,
                annotations: BTreeMap::new(),
            }],
            annotations: BTreeMap::from([(MANIFEST_ANNOTATION.to_string(), text)]),
        };
        Unpacked::from_manifest(&image, "r/grep:1").unwrap();
        edit(&mut image);
        Unpacked::from_manifest(&image, "r/grep:1")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_hostile_registrys_artifacts_are_refused_naming_the_lie() {
        let manifest = |image: &mut ImageManifest| {
            image
                .annotations
                .get_mut(MANIFEST_ANNOTATION)
                .unwrap()
                .clone()
        };
        type Lie<'a> = Box<dyn FnOnce(&mut ImageManifest) + 'a>;
        let table: Vec<(Lie, &str)> = vec![
            (
                Box::new(|i| {
                    let text = manifest(i).replace("name = \"grep\"", "name = \"../../.bashrc\"");
                    i.annotations.insert(MANIFEST_ANNOTATION.into(), text);
                }),
                "not a plugin name",
            ),
            (
                Box::new(|i| {
                    let text = manifest(i).replace("libgrep.so", "../libgrep.so");
                    i.annotations.insert(MANIFEST_ANNOTATION.into(), text);
                }),
                "plain file name",
            ),
            (
                Box::new(|i| i.layers.push(i.layers[0].clone())),
                "one layer, this one has 2",
            ),
            (
                Box::new(|i| i.layers[0].digest = digest_of(b"other")),
                "plugin.toml says the library is",
            ),
            (
                Box::new(|i| i.layers[0].size = u64::MAX),
                "more than a package may hold",
            ),
            (
                Box::new(|i| i.layers[0].media_type = WASM_LAYER_MEDIA_TYPE.into()),
                "a native package's is",
            ),
        ];
        for (edit, needle) in table {
            let e = hostile(edit);
            assert!(
                e.contains(needle) && e.contains("r/grep:1"),
                "{needle}: {e}"
            );
        }
    }

    #[test]
    fn an_artifact_that_is_not_a_plugin_is_refused_with_what_it_is() {
        let image = ImageManifest {
            schema_version: 2,
            media_type: Some(MANIFEST_MEDIA_TYPE.into()),
            artifact_type: None,
            config: Descriptor {
                media_type: "application/vnd.oci.image.config.v1+json".into(),
                digest: "sha256:1".into(),
                size: 2,
                platform: None,
                artifact_type: None,
                annotations: BTreeMap::new(),
            },
            layers: Vec::new(),
            annotations: BTreeMap::new(),
        };
        let e = Unpacked::from_manifest(&image, "reg/nginx:1")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("reg/nginx:1") && e.contains("application/vnd.oci.image.config.v1+json"),
            "{e}"
        );
    }
}
