//! An access token and an issuer's JWK Set as toolhost's resource server reads them
//! (oauth's `jwt.rs` and `jwk.rs`, compiled in from their sources): a JWK Set document
//! and a token, split at the first NUL byte. Any bytes are read without a panic; whatever
//! keys the document holds, a token is checked against them without a panic; and no token
//! is ever verified by the fixed keys below, whose private halves were thrown away when
//! they were made: a pass would be a forgery.
//!
//! Why toolhost keeps its own JWS code rather than `jsonwebtoken`: its crypto backends
//! are aws-lc-rs (a second crypto library, built from C, beside the ring rustls already
//! brings) or RustCrypto's, which brings ed25519-dalek 2 beside the tree's 3 (a duplicate
//! major) and rsa 0.9 (RUSTSEC-2023-0071). What is toolhost's is the decoding and the
//! algorithm allow-list (no `none`, no HMAC, no `crit`); the signatures are ring's.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

#[allow(dead_code, missing_docs, unreachable_pub)]
#[path = "../../oauth/src/jwk.rs"]
mod jwk;
#[allow(dead_code, missing_docs, unreachable_pub)]
#[path = "../../oauth/src/jwt.rs"]
mod jwt;

use std::sync::OnceLock;

/// An Ed25519, an RSA-2048 and a P-256 public key, without their private halves.
const FIXED: &str = r#"{"keys": [
  {"kty": "OKP", "crv": "Ed25519", "kid": "fixed-ed", "x": "iYlyK1vNHx7E3BWgm6C-utXiNrKvS7AIrrtLWo9gSWY"},
  {"kty": "RSA", "kid": "fixed-rsa", "e": "AQAB", "n": "v1uiz-F0wcn_3lzjNoj7mYUxuq0eGQ5Wd2ZtWvWAHo5raSYzHrBKDBPAn9HZBcm5nEOBI2FuVgyHcLkTetcgbW7obt4QKboaxTrXFblQwLzgUaN07PN7fuPQnVK3h1BYwgsjW2ezYxj5JVLCSnMce5CVrl1tvMOG4MsgRHcI2xTNDzFdA-YJBi5fUMaRmAueePWrZFbitDzDqFJgi0h_gNVVMLDLp21DVccd925xShGjWqKWYLE6VLlP7hgL9FzetI9E71Nh3HGVmuPw242aKi-FRBxeQ2vawgJl6BAlps6EvlsPEaqXUueZN_wx_uXtsYW4rZ1yTz0rBTZU_6aUIw"},
  {"kty": "EC", "crv": "P-256", "kid": "fixed-ec", "x": "maSfnx5rzMz1X95eqzpBn-6EQ2StbLaJTv4he4VfbSw", "y": "4BDrLqS7--w7MZGZ1vx51F79npzLWrqb5cw6XUWbi5M"}
]}"#;

fn fixed() -> &'static [jwk::Key] {
    static KEYS: OnceLock<Vec<jwk::Key>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let keys = jwk::parse_set(FIXED.as_bytes()).expect("the fixed keys are a JWK Set");
        assert_eq!(keys.len(), 3, "every fixed key is read");
        keys
    })
}

fuzz_target!(|data: &[u8]| {
    let (set, token) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let theirs = jwk::parse_set(set).unwrap_or_default();
    let Ok(token) = std::str::from_utf8(token) else {
        return;
    };
    let _ = jwt::looks_like_jwt(token);
    let Ok(parsed) = jwt::Jwt::parse(token) else {
        return;
    };
    let _ = parsed.issuer();
    // Keys the input chose may sign what it likes (an issuer's keys are trusted); only
    // that checking against them never panics is asked.
    let _ = parsed.verify(&parsed.candidates(&theirs));
    assert!(
        !parsed.verify(&parsed.candidates(fixed())),
        "a token nobody signed passed as signed by a fixed key: {token}"
    );
});
