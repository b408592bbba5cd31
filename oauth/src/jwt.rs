//! A JWT access token (RFC 9068) in compact form: its header, its claims, and whether one
//! of the issuer's keys signed it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::jwk::{Alg, Key};

/// A token split and decoded, not yet trusted.
pub(crate) struct Jwt<'a> {
    pub(crate) alg: Alg,
    pub(crate) kid: Option<String>,
    /// The claims, unverified until [`Jwt::verify`] says so.
    pub(crate) claims: Map<String, Value>,
    signed: &'a [u8],
    signature: Vec<u8>,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crit: Option<Value>,
}

/// Whether `token` has a JWT's shape (three base64url parts), so that it is checked as one
/// rather than introspected.
pub(crate) fn looks_like_jwt(token: &str) -> bool {
    token.bytes().filter(|b| *b == b'.').count() == 2 && token.starts_with("eyJ")
}

fn part(name: &str, text: &str) -> Result<Vec<u8>, String> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| format!("its {name} is not base64url"))
}

impl<'a> Jwt<'a> {
    /// Splits and decodes `token`; refuses an algorithm no key may sign with and headers
    /// this server cannot honour (`crit`).
    pub(crate) fn parse(token: &'a str) -> Result<Jwt<'a>, String> {
        let mut parts = token.splitn(3, '.');
        let (Some(header), Some(payload), Some(signature)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err("it is not a JWT (header.payload.signature)".into());
        };
        let header: Header = serde_json::from_slice(&part("header", header)?)
            .map_err(|e| format!("its header is not a JWS header: {e}"))?;
        if header.crit.is_some() {
            return Err(
                "its header marks extensions critical (crit), which this server does not know"
                    .into(),
            );
        }
        let alg = Alg::named(&header.alg)?;
        let claims: Map<String, Value> = serde_json::from_slice(&part("payload", payload)?)
            .map_err(|_| "its payload is not a JSON object of claims".to_string())?;
        let signed_len = token.len() - signature.len() - 1;
        Ok(Jwt {
            alg,
            kid: header.kid,
            claims,
            signed: &token.as_bytes()[..signed_len],
            signature: part("signature", signature)?,
        })
    }

    /// The `iss` claim (unverified).
    pub(crate) fn issuer(&self) -> Option<&str> {
        self.claims.get("iss").and_then(Value::as_str)
    }

    /// The keys that could have signed it: the one with its `kid`, else (no `kid`) every
    /// key that allows its algorithm.
    pub(crate) fn candidates<'k>(&self, keys: &'k [Key]) -> Vec<&'k Key> {
        keys.iter()
            .filter(|k| match &self.kid {
                Some(kid) => k.kid.as_deref() == Some(kid),
                None => true,
            })
            .filter(|k| k.allows(self.alg))
            .collect()
    }

    /// Whether one of `keys` signed it.
    pub(crate) fn verify(&self, keys: &[&Key]) -> bool {
        keys.iter()
            .any(|k| k.verify(self.alg, self.signed, &self.signature))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{Ed25519KeyPair, KeyPair};

    /// A signer for tests: an Ed25519 key and its JWK.
    pub(crate) struct Signer {
        pair: Ed25519KeyPair,
        pub(crate) kid: String,
    }

    impl Signer {
        pub(crate) fn new(kid: &str) -> Signer {
            let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
            Signer {
                pair: Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap(),
                kid: kid.into(),
            }
        }

        pub(crate) fn jwk(&self) -> Value {
            serde_json::json!({"kty": "OKP", "crv": "Ed25519", "kid": self.kid, "use": "sig",
                "x": URL_SAFE_NO_PAD.encode(self.pair.public_key().as_ref())})
        }

        pub(crate) fn jwks(&self) -> Vec<Key> {
            crate::jwk::parse_set(
                serde_json::json!({"keys": [self.jwk()]})
                    .to_string()
                    .as_bytes(),
            )
            .unwrap()
        }

        /// A token with `header` fields over the defaults and `claims`.
        pub(crate) fn sign_with(&self, header: Value, claims: &Value) -> String {
            let mut h = serde_json::json!({"alg": "EdDSA", "typ": "at+jwt", "kid": self.kid});
            for (k, v) in header.as_object().unwrap() {
                h[k] = v.clone();
            }
            let input = format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(h.to_string()),
                URL_SAFE_NO_PAD.encode(claims.to_string())
            );
            let sig = self.pair.sign(input.as_bytes());
            format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
        }

        pub(crate) fn sign(&self, claims: &Value) -> String {
            self.sign_with(serde_json::json!({}), claims)
        }
    }

    #[test]
    fn a_signature_by_the_key_verifies_and_a_tampered_payload_does_not() {
        let signer = Signer::new("k1");
        let keys = signer.jwks();
        let token = signer.sign(&serde_json::json!({"sub": "alice"}));
        let jwt = Jwt::parse(&token).unwrap();
        assert!(jwt.verify(&jwt.candidates(&keys)));
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = URL_SAFE_NO_PAD.encode(r#"{"sub":"mallory"}"#);
        parts[1] = &forged;
        let tampered = parts.join(".");
        let jwt = Jwt::parse(&tampered).unwrap();
        assert!(!jwt.verify(&jwt.candidates(&keys)));
    }

    #[test]
    fn another_key_with_the_same_kid_does_not_verify() {
        let (real, impostor) = (Signer::new("k1"), Signer::new("k1"));
        let token = impostor.sign(&serde_json::json!({"sub": "alice"}));
        let jwt = Jwt::parse(&token).unwrap();
        assert!(!jwt.verify(&jwt.candidates(&real.jwks())));
    }

    #[test]
    fn unsigned_hmac_and_critical_headers_are_refused_before_any_key() {
        let signer = Signer::new("k1");
        let claims = serde_json::json!({"sub": "alice"});
        for (header, says) in [
            (serde_json::json!({"alg": "none"}), "unsigned"),
            (serde_json::json!({"alg": "HS256"}), "shared secret"),
            (serde_json::json!({"crit": ["exp"]}), "crit"),
        ] {
            let token = signer.sign_with(header, &claims);
            let err = Jwt::parse(&token).err().unwrap();
            assert!(err.contains(says), "{err}");
        }
        for garbage in ["", "a.b", "eyJ.eyJ.", "!!.!!.!!"] {
            assert!(Jwt::parse(garbage).is_err(), "{garbage}");
        }
    }

    #[test]
    fn a_jwt_is_told_from_an_opaque_token() {
        let token = Signer::new("k").sign(&serde_json::json!({}));
        assert!(looks_like_jwt(&token));
        assert!(!looks_like_jwt("2YotnFZFEjr1zCsicMWpAA"));
    }
}
