//! An issuer's public keys (a JWK Set, RFC 7517) and the algorithms each allows.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;

/// A JWS algorithm this server verifies: asymmetric only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alg {
    Rs256,
    Rs384,
    Rs512,
    Ps256,
    Ps384,
    Ps512,
    Es256,
    Es384,
    EdDsa,
}

impl Alg {
    /// The algorithm named in a JWS header, or why it is refused.
    pub(crate) fn named(name: &str) -> Result<Alg, String> {
        Ok(match name {
            "RS256" => Alg::Rs256,
            "RS384" => Alg::Rs384,
            "RS512" => Alg::Rs512,
            "PS256" => Alg::Ps256,
            "PS384" => Alg::Ps384,
            "PS512" => Alg::Ps512,
            "ES256" => Alg::Es256,
            "ES384" => Alg::Es384,
            "EdDSA" | "Ed25519" => Alg::EdDsa,
            "none" => return Err("it is unsigned (alg \"none\")".into()),
            hmac if hmac.starts_with("HS") => {
                return Err(format!(
                    "it is signed with {hmac}, a shared secret; only an issuer's public keys are trusted"
                ));
            }
            other => return Err(format!("its algorithm {other:?} is not supported")),
        })
    }
}

/// The key material of one JWK.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Material {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point: `04 || x || y`.
    P256(Vec<u8>),
    P384(Vec<u8>),
    Ed25519(Vec<u8>),
}

/// One verification key of an issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) kid: Option<String>,
    /// The one algorithm the key is for, when its JWK says (`alg`).
    alg: Option<Alg>,
    material: Material,
}

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default, rename = "use")]
    usage: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

/// The signing keys of a JWK Set document. Keys for encryption, of an unknown type or
/// malformed are left out (logged); a document that is not a JWK Set is an error.
pub(crate) fn parse_set(bytes: &[u8]) -> Result<Vec<Key>, String> {
    let set: JwkSet = serde_json::from_slice(bytes)
        .map_err(|e| format!("not a JWK Set ({{\"keys\": [...]}}): {e}"))?;
    let mut keys = Vec::with_capacity(set.keys.len());
    for (i, value) in set.keys.into_iter().enumerate() {
        match serde_json::from_value::<Jwk>(value)
            .map_err(|e| e.to_string())
            .and_then(Key::of)
        {
            Ok(Some(key)) => keys.push(key),
            Ok(None) => {}
            Err(why) => tracing::warn!(target: "toolhost::auth", "JWKS key {i} left out: {why}"),
        }
    }
    Ok(keys)
}

fn b64(field: &str, value: Option<&str>) -> Result<Vec<u8>, String> {
    let value = value.ok_or_else(|| format!("no {field:?}"))?;
    URL_SAFE_NO_PAD
        .decode(value.trim_end_matches('='))
        .map_err(|e| format!("{field:?} is not base64url: {e}"))
}

impl Key {
    /// A signing key, `None` for one that is not (`use: "enc"`).
    fn of(jwk: Jwk) -> Result<Option<Key>, String> {
        if jwk.usage.as_deref().is_some_and(|u| u != "sig") {
            return Ok(None);
        }
        let alg = match jwk.alg.as_deref() {
            Some(name) => Some(Alg::named(name)?),
            None => None,
        };
        let material = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
            ("RSA", _) => {
                let n = b64("n", jwk.n.as_deref())?;
                if n.len() < 256 {
                    return Err(format!(
                        "an RSA key of {} bits is too short (2048 at least)",
                        n.len() * 8
                    ));
                }
                Material::Rsa {
                    n,
                    e: b64("e", jwk.e.as_deref())?,
                }
            }
            ("EC", Some(crv @ ("P-256" | "P-384"))) => {
                let (x, y) = (b64("x", jwk.x.as_deref())?, b64("y", jwk.y.as_deref())?);
                let size = if crv == "P-256" { 32 } else { 48 };
                if x.len() != size || y.len() != size {
                    return Err(format!("{crv} coordinates must be {size} bytes each"));
                }
                let point = [&[4u8][..], &x, &y].concat();
                if crv == "P-256" {
                    Material::P256(point)
                } else {
                    Material::P384(point)
                }
            }
            ("OKP", Some("Ed25519")) => Material::Ed25519(b64("x", jwk.x.as_deref())?),
            (kty, crv) => {
                return Err(format!(
                    "a key of type {kty}{} is not supported",
                    crv.map(|c| format!(" ({c})")).unwrap_or_default()
                ));
            }
        };
        let key = Key {
            kid: jwk.kid,
            alg,
            material,
        };
        if let Some(alg) = alg
            && !key.fits(alg)
        {
            return Err(format!("its alg {alg:?} does not fit its key type"));
        }
        Ok(Some(key))
    }

    /// Whether the key's type is one `alg` signs with.
    fn fits(&self, alg: Alg) -> bool {
        matches!(
            (&self.material, alg),
            (
                Material::Rsa { .. },
                Alg::Rs256 | Alg::Rs384 | Alg::Rs512 | Alg::Ps256 | Alg::Ps384 | Alg::Ps512
            ) | (Material::P256(_), Alg::Es256)
                | (Material::P384(_), Alg::Es384)
                | (Material::Ed25519(_), Alg::EdDsa)
        )
    }

    /// Whether a token signed with `alg` may be checked with this key: its type fits, and
    /// the key's own `alg`, when it names one, is that one.
    pub(crate) fn allows(&self, alg: Alg) -> bool {
        self.fits(alg) && self.alg.is_none_or(|own| own == alg)
    }

    /// Whether `signature` over `message` is this key's, with `alg`.
    pub(crate) fn verify(&self, alg: Alg, message: &[u8], signature: &[u8]) -> bool {
        if !self.allows(alg) {
            return false;
        }
        let rsa = |params: &'static signature::RsaParameters| match &self.material {
            Material::Rsa { n, e } => RsaPublicKeyComponents { n, e }
                .verify(params, message, signature)
                .is_ok(),
            _ => false,
        };
        let point = |algorithm: &'static dyn signature::VerificationAlgorithm, bytes: &[u8]| {
            UnparsedPublicKey::new(algorithm, bytes)
                .verify(message, signature)
                .is_ok()
        };
        match (alg, &self.material) {
            (Alg::Rs256, _) => rsa(&signature::RSA_PKCS1_2048_8192_SHA256),
            (Alg::Rs384, _) => rsa(&signature::RSA_PKCS1_2048_8192_SHA384),
            (Alg::Rs512, _) => rsa(&signature::RSA_PKCS1_2048_8192_SHA512),
            (Alg::Ps256, _) => rsa(&signature::RSA_PSS_2048_8192_SHA256),
            (Alg::Ps384, _) => rsa(&signature::RSA_PSS_2048_8192_SHA384),
            (Alg::Ps512, _) => rsa(&signature::RSA_PSS_2048_8192_SHA512),
            (Alg::Es256, Material::P256(p)) => point(&signature::ECDSA_P256_SHA256_FIXED, p),
            (Alg::Es384, Material::P384(p)) => point(&signature::ECDSA_P384_SHA384_FIXED, p),
            (Alg::EdDsa, Material::Ed25519(x)) => point(&signature::ED25519, x),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encryption_keys_are_left_out_and_bad_ones_logged_not_fatal() {
        let set = br#"{"keys":[
            {"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"a"},
            {"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","use":"enc"},
            {"kty":"oct","k":"c2VjcmV0"},
            {"kty":"RSA","n":"AQAB","e":"AQAB"}
        ]}"#;
        let keys = parse_set(set).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("a"));
        assert!(parse_set(b"[1,2]").unwrap_err().contains("not a JWK Set"));
    }

    #[test]
    fn a_key_allows_only_the_algorithms_of_its_type_and_its_own_alg() {
        let ed = |alg: Option<&str>| {
            let mut jwk = serde_json::json!({"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
            if let Some(alg) = alg {
                jwk["alg"] = alg.into();
            }
            Key::of(serde_json::from_value(jwk).unwrap())
        };
        let key = ed(None).unwrap().unwrap();
        assert!(key.allows(Alg::EdDsa));
        assert!(!key.allows(Alg::Es256) && !key.allows(Alg::Rs256));
        assert!(ed(Some("RS256")).unwrap_err().contains("does not fit"));
        assert!(ed(Some("HS256")).unwrap_err().contains("shared secret"));
    }

    #[test]
    fn none_and_hmac_are_refused_by_name() {
        assert!(Alg::named("none").unwrap_err().contains("unsigned"));
        assert!(Alg::named("HS256").unwrap_err().contains("HS256"));
        assert!(Alg::named("XYZ").is_err());
        assert_eq!(Alg::named("ES256"), Ok(Alg::Es256));
    }
}
