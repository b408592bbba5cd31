//! A `[[plugins.sources]]` entry: where a plugin is installed from.
//!
//! ```toml
//! [[plugins.sources]]
//! oci = "ghcr.io/acme/grep:0.3.1"   # a tag that is a version: updates stay within ^0.3.1
//!
//! [[plugins.sources]]
//! oci = "ghcr.io/acme/fetch"        # no tag: the newest tag within `version`
//! version = "~1.2"
//! ```
//!
//! A tag that is not a version (`latest`) is followed as it moves, when the user updates; a
//! digest (`…@sha256:…`) never moves.

use oci_client::Reference;
use serde::Deserialize;

use crate::{OciError, parse_reference};

/// Where a plugin is installed from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// The OCI reference: `registry/repository[:tag][@digest]`.
    pub oci: String,
    /// The versions an update may move to (semver range), for a reference without a tag.
    #[serde(default)]
    pub version: Option<semver::VersionReq>,
}

impl Source {
    /// A source for `reference` as the user typed it.
    pub fn new(reference: &str) -> Source {
        Source {
            oci: reference.to_string(),
            version: None,
        }
    }

    /// What is wrong with it, for the config's error.
    pub fn check(&self) -> Result<(), OciError> {
        let reference = self.reference()?;
        if self.version.is_some() && (self.has_tag() || reference.digest().is_some()) {
            return Err(OciError::Reference {
                reference: self.oci.clone(),
                detail: "it has a tag or digest and a `version` range: give one of them".into(),
            });
        }
        Ok(())
    }

    /// The parsed reference.
    pub fn reference(&self) -> Result<Reference, OciError> {
        parse_reference(&self.oci)
    }

    /// Whether `oci` names a tag (not only a repository or a digest).
    fn has_tag(&self) -> bool {
        self.oci
            .rsplit('/')
            .next()
            .is_some_and(|last| last.split('@').next().is_some_and(|n| n.contains(':')))
            && !self.oci.contains('@')
    }

    /// The versions an update may move to: `version`, else `^TAG` for a tag that is a
    /// version; none for a tag that is not one (it is followed) or a digest (pinned).
    pub fn range(&self) -> Result<Option<semver::VersionReq>, OciError> {
        if let Some(range) = &self.version {
            return Ok(Some(range.clone()));
        }
        let reference = self.reference()?;
        if reference.digest().is_some() || !self.has_tag() {
            return Ok(None);
        }
        Ok(reference
            .tag()
            .and_then(tag_version)
            .and_then(|v| semver::VersionReq::parse(&format!("^{v}")).ok()))
    }

    /// The tag a first install takes: the one written, else (a range without a tag) none,
    /// chosen from the repository's tags.
    pub fn written_tag(&self) -> Option<String> {
        if self.has_tag() {
            self.reference().ok()?.tag().map(str::to_string)
        } else if self.version.is_none() && !self.oci.contains('@') {
            Some("latest".to_string())
        } else {
            None
        }
    }
}

/// A tag read as a version: `1.2.3` or `v1.2.3`.
pub fn tag_version(tag: &str) -> Option<semver::Version> {
    semver::Version::parse(tag.strip_prefix('v').unwrap_or(tag)).ok()
}

/// The newest of `tags` that `range` allows.
pub fn newest_within<'t>(tags: &'t [String], range: &semver::VersionReq) -> Option<&'t String> {
    tags.iter()
        .filter_map(|t| tag_version(t).map(|v| (v, t)))
        .filter(|(v, _)| range.matches(v))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(oci: &str, version: Option<&str>) -> Source {
        Source {
            oci: oci.into(),
            version: version.map(|v| semver::VersionReq::parse(v).unwrap()),
        }
    }

    #[test]
    fn the_range_an_update_stays_in_comes_from_the_tag_or_the_version() {
        let table = [
            ("r.example/grep:0.3.1", None, Some("^0.3.1")),
            ("r.example/grep:v1.2.0", None, Some("^1.2.0")),
            ("r.example/grep:latest", None, None),
            ("r.example/grep", Some("~1.2"), Some("~1.2")),
            ("r.example:5000/grep", None, None),
            (
                "r.example/grep@sha256:0123456789012345678901234567890123456789012345678901234567890123",
                None,
                None,
            ),
        ];
        for (oci, version, range) in table {
            let got = source(oci, version).range().unwrap().map(|r| r.to_string());
            assert_eq!(got.as_deref(), range, "{oci}");
        }
    }

    #[test]
    fn a_first_install_takes_the_written_tag_else_latest() {
        assert_eq!(
            source("r.example/grep:0.3.1", None)
                .written_tag()
                .as_deref(),
            Some("0.3.1")
        );
        assert_eq!(
            source("r.example:5000/grep", None).written_tag().as_deref(),
            Some("latest")
        );
        assert_eq!(source("r.example/grep", Some("^1")).written_tag(), None);
    }

    #[test]
    fn a_tag_and_a_range_together_are_refused() {
        let e = source("r.example/grep:0.3.1", Some("^0.3"))
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("give one of them"), "{e}");
        source("r.example:5000/grep", Some("^0.3")).check().unwrap();
    }

    #[test]
    fn the_newest_tag_within_the_range_is_chosen() {
        let tags: Vec<String> = ["0.3.1", "0.3.4", "0.4.0", "latest", "v0.3.9-rc.1", "0.3.2"]
            .map(String::from)
            .to_vec();
        let range = semver::VersionReq::parse("^0.3.1").unwrap();
        assert_eq!(
            newest_within(&tags, &range).map(String::as_str),
            Some("0.3.4")
        );
        let none = semver::VersionReq::parse("^2").unwrap();
        assert_eq!(newest_within(&tags, &none), None);
    }
}
