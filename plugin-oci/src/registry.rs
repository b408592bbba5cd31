//! Speaking to one registry: publishing a package, resolving a reference to its digest,
//! pulling this host's artifact, listing tags. The HTTP, the token dance and the digest
//! checks are `oci-client`'s; what is pushed and accepted is [`crate::artifact`]'s.

use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use crate::OciError;
use crate::artifact::{
    Descriptor, INDEX_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, MAX_MANIFEST_BYTES, PackageFiles, Pulled,
    TARGET_ANNOTATION, Unpacked, digest_of, index_with, platform_of, targets_of,
};

/// Parses `OCI reference` text (`registry/repository[:tag][@digest]`), naming it when it
/// is not one.
pub fn parse_reference(text: &str) -> Result<Reference, OciError> {
    text.parse::<Reference>().map_err(|e| OciError::Reference {
        reference: text.to_string(),
        detail: e.to_string(),
    })
}

/// Whether `registry` (`host[:port]`) is on this machine: spoken to over plain HTTP, as
/// Docker does; every other registry over HTTPS.
pub fn is_loopback(registry: &str) -> bool {
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        registry.rsplit_once(':').map_or(registry, |(h, _)| h)
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A client for the registry of one reference, with the credentials Docker keeps for it.
pub struct Registry {
    client: Client,
    auth: RegistryAuth,
}

/// What [`Registry::publish`] pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The reference pushed to, as given.
    pub reference: String,
    /// What its tag names now: the index (native) or the component's manifest.
    pub digest: String,
    /// The package's own manifest.
    pub artifact: String,
    /// The targets the tag offers now.
    pub targets: Vec<String>,
}

/// What [`Registry::pull`] fetched.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// What the reference resolved to (index or manifest).
    pub digest: String,
    /// This host's artifact: the manifest pulled.
    pub artifact: String,
    /// The package it holds.
    pub package: Unpacked,
    /// The library's bytes, checked against the layer's digest.
    pub library: Vec<u8>,
}

impl Registry {
    /// A client for `reference`'s registry: HTTP on loopback, else HTTPS; credentials
    /// from Docker's config.
    pub fn for_reference(reference: &Reference) -> Result<Registry, OciError> {
        let registry = reference.resolve_registry().to_string();
        let auth = crate::credentials::for_registry(&registry)?;
        Ok(Registry::with_auth(reference, auth))
    }

    /// [`Registry::for_reference`] with the credentials given.
    pub fn with_auth(reference: &Reference, auth: RegistryAuth) -> Registry {
        // The TLS provider of the process, if none is chosen yet (installing twice is a no-op).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let registry = reference.resolve_registry().to_string();
        let protocol = if is_loopback(&registry) {
            ClientProtocol::HttpsExcept(vec![registry])
        } else {
            ClientProtocol::Https
        };
        let config = ClientConfig {
            protocol,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            user_agent: concat!("toolhost/", env!("CARGO_PKG_VERSION")),
            ..ClientConfig::default()
        };
        Registry {
            client: Client::new(config),
            auth,
        }
    }

    fn error(reference: &Reference, e: oci_client::errors::OciDistributionError) -> OciError {
        use oci_client::errors::OciDistributionError as E;
        let registry = reference.resolve_registry().to_string();
        let detail = match &e {
            E::AuthenticationFailure(_) | E::UnauthorizedError { .. } => format!(
                "{e}: the registry refused the credentials (or asked for some): log in with `docker login {registry}`, or give a credential helper in Docker's config.json"
            ),
            // The transport's own words are in its sources ("connection refused", a TLS
            // verdict): a user needs them more than "error sending request".
            _ => {
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(cause) = source {
                    let said = cause.to_string();
                    if !text.contains(&said) {
                        text = format!("{text}: {said}");
                    }
                    source = cause.source();
                }
                text
            }
        };
        OciError::Registry {
            reference: reference.whole(),
            detail,
        }
    }

    /// Pushes a package to `reference` (which must have a tag). A native package's manifest
    /// joins the index its tag names (replacing one for the same target); a component's
    /// manifest is the tag itself.
    pub async fn publish(
        &self,
        package: &PackageFiles,
        reference: &Reference,
    ) -> Result<Published, OciError> {
        if reference.digest().is_some() || reference.tag().is_none() {
            return Err(OciError::Reference {
                reference: reference.whole(),
                detail: "publish to a tag (registry/repository:TAG), not a digest".into(),
            });
        }
        let err = |e| Self::error(reference, e);
        let (config, manifest) = package.artifact();
        let manifest_bytes = serde_json::to_vec(&manifest).map_err(|e| OciError::Package {
            detail: e.to_string(),
        })?;
        let artifact = digest_of(&manifest_bytes);
        self.client
            .store_auth_if_needed(reference.resolve_registry(), &self.auth)
            .await;
        for (bytes, descriptor) in [
            (package.library.clone(), &manifest.layers[0]),
            (config, &manifest.config),
        ] {
            let there = self
                .client
                .blob_exists(reference, &descriptor.digest)
                .await
                .map_err(err)?;
            if !there {
                self.client
                    .push_blob(reference, bytes, &descriptor.digest)
                    .await
                    .map_err(err)?;
            }
        }
        let target = package.manifest.target.clone();
        if package.manifest.kind == plugin_host::PackageKind::Component {
            self.push_raw(reference, manifest_bytes, MANIFEST_MEDIA_TYPE)
                .await?;
            return Ok(Published {
                reference: reference.whole(),
                digest: artifact.clone(),
                artifact,
                targets: vec![target],
            });
        }
        let by_digest = reference.clone_with_digest(artifact.clone());
        let size = manifest_bytes.len() as u64;
        self.push_raw(&by_digest, manifest_bytes, MANIFEST_MEDIA_TYPE)
            .await?;
        let existing = match self.resolve(reference).await {
            Ok((Pulled::Index(index), _)) => Some(index),
            Ok((Pulled::Manifest(_), digest)) => {
                return Err(OciError::Registry {
                    reference: reference.whole(),
                    detail: format!(
                        "the tag names a single manifest ({digest}), not an index of plugin targets; publish to a new tag"
                    ),
                });
            }
            Err(OciError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        let entry = Descriptor {
            media_type: MANIFEST_MEDIA_TYPE.to_string(),
            digest: artifact.clone(),
            size,
            platform: Some(platform_of(&target)),
            artifact_type: manifest.artifact_type.clone(),
            annotations: [(TARGET_ANNOTATION.to_string(), target)].into(),
        };
        let index = index_with(existing, entry, package.manifest.target.as_str());
        let targets = targets_of(&index);
        let index_bytes = serde_json::to_vec(&index).map_err(|e| OciError::Package {
            detail: e.to_string(),
        })?;
        let digest = digest_of(&index_bytes);
        self.push_raw(reference, index_bytes, INDEX_MEDIA_TYPE)
            .await?;
        Ok(Published {
            reference: reference.whole(),
            digest,
            artifact,
            targets,
        })
    }

    async fn push_raw(
        &self,
        reference: &Reference,
        bytes: Vec<u8>,
        media_type: &'static str,
    ) -> Result<(), OciError> {
        self.client
            .push_manifest_raw(reference, bytes, http::HeaderValue::from_static(media_type))
            .await
            .map(drop)
            .map_err(|e| Self::error(reference, e))
    }

    /// What `reference` names now, and its digest (checked against the reference's own
    /// digest when it has one).
    pub async fn resolve(&self, reference: &Reference) -> Result<(Pulled, String), OciError> {
        use oci_client::errors::OciDistributionError as E;
        let pulled = self
            .client
            .pull_manifest_raw(
                reference,
                &self.auth,
                &[MANIFEST_MEDIA_TYPE, INDEX_MEDIA_TYPE],
            )
            .await;
        let (bytes, digest) = match pulled {
            Ok(p) => p,
            Err(E::ImageManifestNotFoundError(_)) => {
                return Err(OciError::NotFound {
                    reference: reference.whole(),
                });
            }
            Err(E::RegistryError { envelope, .. })
                if envelope.errors.iter().any(|e| {
                    e.code == oci_client::errors::OciErrorCode::ManifestUnknown
                        || e.code == oci_client::errors::OciErrorCode::NameUnknown
                }) =>
            {
                return Err(OciError::NotFound {
                    reference: reference.whole(),
                });
            }
            Err(e) => return Err(Self::error(reference, e)),
        };
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(OciError::NotAPlugin {
                reference: reference.whole(),
                detail: format!(
                    "its manifest is {} bytes, more than {} MiB",
                    bytes.len(),
                    MAX_MANIFEST_BYTES >> 20
                ),
            });
        }
        Ok((Pulled::parse(&bytes, &reference.whole())?, digest))
    }

    /// Pulls the artifact `reference` names for `target`: the index's entry for it, or the
    /// one manifest of a component (any target).
    pub async fn pull(&self, reference: &Reference, target: &str) -> Result<Fetched, OciError> {
        let (pulled, digest) = self.resolve(reference).await?;
        let (image, artifact) = match pulled {
            Pulled::Manifest(image) => (image, digest.clone()),
            Pulled::Index(index) => {
                let Some(entry) = index.manifests.iter().find(|m| {
                    m.annotations.get(TARGET_ANNOTATION).map(String::as_str) == Some(target)
                }) else {
                    return Err(OciError::NoTarget {
                        reference: reference.whole(),
                        target: target.to_string(),
                        offered: targets_of(&index),
                    });
                };
                let by_digest = reference.clone_with_digest(entry.digest.clone());
                match self.resolve(&by_digest).await? {
                    (Pulled::Manifest(image), d) => (image, d),
                    (Pulled::Index(_), _) => {
                        return Err(OciError::NotAPlugin {
                            reference: by_digest.whole(),
                            detail: "an index inside the index".into(),
                        });
                    }
                }
            }
        };
        let package = Unpacked::from_manifest(&image, &reference.whole())?;
        let kind = package.manifest.kind;
        if kind == plugin_host::PackageKind::Native && package.manifest.target != target {
            return Err(OciError::NoTarget {
                reference: reference.whole(),
                target: target.to_string(),
                offered: vec![package.manifest.target.clone()],
            });
        }
        let mut library = Capped {
            bytes: Vec::new(),
            cap: package.layer.size,
        };
        let layer = oci_client::manifest::OciDescriptor {
            media_type: package.layer.media_type.clone(),
            digest: package.layer.digest.clone(),
            size: i64::try_from(package.layer.size).unwrap_or(i64::MAX),
            ..Default::default()
        };
        self.client
            .pull_blob(reference, &layer, &mut library)
            .await
            .map_err(|e| Self::error(reference, e))?;
        Ok(Fetched {
            digest,
            artifact,
            package,
            library: library.bytes,
        })
    }

    /// Every tag of `reference`'s repository.
    pub async fn tags(&self, reference: &Reference) -> Result<Vec<String>, OciError> {
        let mut tags: Vec<String> = Vec::new();
        loop {
            let page = self
                .client
                .list_tags(
                    reference,
                    &self.auth,
                    Some(1000),
                    tags.last().map(String::as_str),
                )
                .await
                .map_err(|e| Self::error(reference, e))?;
            let n = page.tags.len();
            tags.extend(page.tags);
            if n < 1000 {
                return Ok(tags);
            }
        }
    }
}

/// A buffer that refuses more bytes than the layer said it has (a registry streaming
/// without end is stopped there, not when memory runs out).
struct Capped {
    bytes: Vec<u8>,
    cap: u64,
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if (self.bytes.len() + buf.len()) as u64 > self.cap {
            return Poll::Ready(Err(std::io::Error::other(format!(
                "the registry sent more than the layer's {} bytes",
                self.cap
            ))));
        }
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_are_told_from_others() {
        for (registry, loopback) in [
            ("127.0.0.1:5000", true),
            ("localhost:5000", true),
            ("localhost", true),
            ("[::1]:5000", true),
            ("127.1.2.3", true),
            ("registry.example:5000", false),
            ("ghcr.io", false),
            ("10.0.0.1:5000", false),
        ] {
            assert_eq!(is_loopback(registry), loopback, "{registry}");
        }
    }

    #[tokio::test]
    async fn a_layer_longer_than_it_said_is_cut_off_there() {
        use tokio::io::AsyncWriteExt as _;
        let mut layer = Capped {
            bytes: Vec::new(),
            cap: 4,
        };
        layer.write_all(b"abcd").await.unwrap();
        let e = layer.write_all(b"e").await.unwrap_err().to_string();
        assert!(e.contains("more than the layer's 4 bytes"), "{e}");
        assert_eq!(layer.bytes, b"abcd");
    }

    #[test]
    fn a_reference_that_is_not_one_is_named() {
        let e = parse_reference("r.example/grep:not a tag")
            .unwrap_err()
            .to_string();
        assert!(e.contains("r.example/grep:not a tag"), "{e}");
    }
}
