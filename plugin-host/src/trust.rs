//! Signed packages: a detached ed25519 signature (`plugin.sig`) over a package's manifest
//! and library digests, made by `cargo xtask plugin sign` and checked before a library is
//! opened.
//!
//! Keys are text, so they fit in `toolhost.toml`:
//!
//! - a public key is `toolhost-ed25519:` and the 32 key bytes in base64;
//! - a secret key file holds `toolhost-ed25519-secret:` and the 32 seed bytes in base64
//!   (written with mode 0600 by `cargo xtask plugin keygen`).
//!
//! The signed message is the line `toolhost plugin signature v1`, then
//! `manifest sha256 HEX` and `library sha256 HEX`, each ending in a newline. Signing both
//! digests means that neither file can change without the signature failing. The crypto
//! is ed25519-dalek's (`verify_strict`); nothing here is home-made but the framing.
//!
//! ```
//! use plugin_host::trust::{SecretKey, PublicKey};
//! let secret = SecretKey::from_seed([7; 32]);
//! let public: PublicKey = secret.public().to_string().parse().unwrap();
//! assert_eq!(public, secret.public());
//! assert!(public.to_string().starts_with("toolhost-ed25519:"));
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::digest::Digests;

/// The file a package's signature is in.
pub const SIGNATURE_FILE: &str = "plugin.sig";

const PUBLIC_PREFIX: &str = "toolhost-ed25519:";
const SECRET_PREFIX: &str = "toolhost-ed25519-secret:";

/// A public key that may sign packages.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// A short id for messages: the first 8 bytes of the key, in hex.
    pub fn id(&self) -> String {
        self.0.as_bytes()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PUBLIC_PREFIX}{}", STANDARD.encode(self.0.as_bytes()))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.id())
    }
}

fn decode32(text: &str, what: &str) -> Result<[u8; 32], String> {
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|e| format!("{what} is not valid base64: {e}"))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| format!("{what} must be 32 bytes, this one is {}", bytes.len()))
}

impl FromStr for PublicKey {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let body = s.trim().strip_prefix(PUBLIC_PREFIX).ok_or_else(|| {
            format!("a public key starts with '{PUBLIC_PREFIX}' (as `cargo xtask plugin keygen` prints it)")
        })?;
        let bytes = decode32(body, "the public key")?;
        VerifyingKey::from_bytes(&bytes)
            .map(PublicKey)
            .map_err(|e| format!("not an ed25519 public key: {e}"))
    }
}

impl Serialize for PublicKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PublicKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A signing key (keep its file private).
pub struct SecretKey(SigningKey);

impl SecretKey {
    /// The key for a 32-byte seed (take the seed from the OS's random source).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        SecretKey(SigningKey::from_bytes(&seed))
    }

    /// Its public half.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// The key file's text.
    pub fn to_file_text(&self) -> String {
        format!("{SECRET_PREFIX}{}\n", STANDARD.encode(self.0.to_bytes()))
    }

    /// Reads a key file.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read key file {}: {e}", path.display()))?;
        let body = text.trim().strip_prefix(SECRET_PREFIX).ok_or_else(|| {
            format!(
                "{} is not a toolhost secret key (made by `cargo xtask plugin keygen`; a public key cannot sign)",
                path.display()
            )
        })?;
        decode32(body, "the secret key").map(Self::from_seed)
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey(public {})", self.public().id())
    }
}

/// What `plugin.sig` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureFile {
    /// The key that signed.
    pub key: PublicKey,
    /// The ed25519 signature, base64.
    pub signature: String,
}

/// The message a package's signature covers.
pub fn signed_message(manifest_sha256: &str, library_sha256: &str) -> String {
    format!(
        "toolhost plugin signature v1\nmanifest sha256 {}\nlibrary sha256 {}\n",
        manifest_sha256.to_ascii_lowercase(),
        library_sha256.to_ascii_lowercase()
    )
}

/// The digests of a package folder's manifest and library.
fn digests(folder: &Path, library: &str, cache: &Digests) -> Result<(String, String), String> {
    let manifest = folder.join(crate::manifest::MANIFEST_FILE);
    let m = cache
        .sha256(&manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    let lib = folder.join(library);
    let l = cache
        .sha256(&lib)
        .map_err(|e| format!("cannot read {}: {e}", lib.display()))?;
    Ok((m, l))
}

/// Signs a package folder: writes `plugin.sig` beside its manifest (through a temp file).
pub fn sign(folder: &Path, key: &SecretKey) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(folder.join(crate::manifest::MANIFEST_FILE))
        .map_err(|e| format!("{} is not a package: {e}", folder.display()))?;
    let manifest =
        crate::manifest::Manifest::parse(&folder.join(crate::manifest::MANIFEST_FILE), &text)
            .map_err(|e| e.to_string())?;
    let (m, l) = digests(folder, &manifest.library, &Digests::uncached())?;
    let signature = key.0.sign(signed_message(&m, &l).as_bytes());
    let file = SignatureFile {
        key: key.public(),
        signature: STANDARD.encode(signature.to_bytes()),
    };
    let text = toml::to_string(&file).map_err(|e| e.to_string())?;
    let dest = folder.join(SIGNATURE_FILE);
    let tmp = folder.join(format!(".{SIGNATURE_FILE}.tmp"));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &dest))
        .map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
    Ok(dest)
}

/// What a package's signature says, checked against the trusted keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No `plugin.sig`.
    Unsigned,
    /// Signed by this trusted key, and the signature holds.
    Trusted(PublicKey),
    /// Signed by a key that is not trusted (not checked further); the message names it.
    Untrusted(String),
    /// Something is wrong; the message names the key or the mismatch.
    Bad(String),
}

/// A package folder's `plugin.sig`, if it has one.
pub fn read_signature(folder: &Path) -> Result<Option<SignatureFile>, String> {
    let path = folder.join(SIGNATURE_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    toml::from_str(&text).map(Some).map_err(|e| {
        format!(
            "{} is not a signature file ({}); sign the package again",
            path.display(),
            e.message()
        )
    })
}

/// Checks a package folder's signature (reads only the manifest, the library's bytes and
/// `plugin.sig`; opens nothing).
pub fn verify(folder: &Path, library: &str, trusted: &[PublicKey]) -> Verdict {
    verify_with(folder, library, trusted, &Digests::uncached())
}

/// [`verify`], taking digests from `cache`.
pub fn verify_with(
    folder: &Path,
    library: &str,
    trusted: &[PublicKey],
    cache: &Digests,
) -> Verdict {
    let path = folder.join(SIGNATURE_FILE);
    let file = match read_signature(folder) {
        Ok(Some(file)) => file,
        Ok(None) => return Verdict::Unsigned,
        Err(e) => return Verdict::Bad(e),
    };
    if !trusted.contains(&file.key) {
        return Verdict::Untrusted(format!(
            "it is signed by key {} ({}), which is not in trusted_keys; add that key to trust its signer",
            file.key.id(),
            file.key
        ));
    }
    let signature = match decode_signature(&file.signature) {
        Ok(s) => s,
        Err(e) => return Verdict::Bad(format!("{}: {e}", path.display())),
    };
    let (m, l) = match digests(folder, library, cache) {
        Ok(d) => d,
        Err(e) => return Verdict::Bad(e),
    };
    match file
        .key
        .0
        .verify_strict(signed_message(&m, &l).as_bytes(), &signature)
    {
        Ok(()) => Verdict::Trusted(file.key),
        Err(_) => Verdict::Bad(format!(
            "the signature by key {} does not match this manifest (sha256 {m}) and library (sha256 {l}): the package was modified after it was signed",
            file.key.id()
        )),
    }
}

fn decode_signature(text: &str) -> Result<Signature, String> {
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|e| format!("the signature is not valid base64: {e}"))?;
    let bytes = <[u8; 64]>::try_from(bytes.as_slice()).map_err(|_| {
        format!(
            "an ed25519 signature is 64 bytes, this one is {}",
            bytes.len()
        )
    })?;
    Ok(Signature::from_bytes(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_text_and_bad_keys_say_why() {
        let secret = SecretKey::from_seed([1; 32]);
        let text = secret.public().to_string();
        assert_eq!(text.parse::<PublicKey>().unwrap(), secret.public());
        let err = "ed25519:abc".parse::<PublicKey>().unwrap_err();
        assert!(err.contains("toolhost-ed25519:"), "{err}");
        let err = "toolhost-ed25519:AAAA".parse::<PublicKey>().unwrap_err();
        assert!(err.contains("32 bytes"), "{err}");
    }
}
