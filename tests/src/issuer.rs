//! A stand-in OAuth issuer for benches and tests: its metadata and JWK Set over loopback
//! HTTP, and EdDSA access tokens it signs for any subject ([`Issuer::token`]), so that
//! `serve --http` taking validated JWTs can be measured and driven by many callers without
//! an identity provider. toolhost fetches its keys once; each call's token is then checked.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::Signer as _;

/// A running issuer (it serves for as long as the process runs).
pub struct Issuer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    key: ed25519_dalek::SigningKey,
}

impl Issuer {
    /// Starts serving its metadata (`/.well-known/openid-configuration`) and keys (`/jwks`)
    /// on a free loopback port.
    pub fn start() -> std::io::Result<Issuer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(std::io::Error::other)?;
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let jwks = serde_json::json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "bench",
            "use": "sig", "alg": "EdDSA", "x": URL_SAFE_NO_PAD.encode(key.verifying_key().to_bytes())}]})
        .to_string();
        let metadata =
            serde_json::json!({"issuer": url, "jwks_uri": format!("{url}/jwks")}).to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut reader = BufReader::new(&stream);
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                // The rest of the request head.
                let mut rest = String::new();
                while reader.read_line(&mut rest).is_ok_and(|n| n > 2) {
                    rest.clear();
                }
                let path = line.split_whitespace().nth(1).unwrap_or("");
                let (status, body) = match path {
                    "/.well-known/openid-configuration" => ("200 OK", metadata.as_str()),
                    "/jwks" => ("200 OK", jwks.as_str()),
                    _ => ("404 Not Found", "{}"),
                };
                let _ = write!(
                    &stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Ok(Issuer { url, key })
    }

    /// An access token for `subject` to `resource`, valid for a day (scope `mcp`, group
    /// `bench`).
    pub fn token(&self, subject: &str, resource: &str) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let header = serde_json::json!({"alg": "EdDSA", "typ": "at+jwt", "kid": "bench"});
        let claims = serde_json::json!({"iss": self.url, "sub": subject, "aud": resource,
            "iat": now, "exp": now + 86_400, "scope": "mcp", "groups": ["bench"]});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self.key.sign(input.as_bytes());
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
    }
}
