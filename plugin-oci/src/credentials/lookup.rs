//! A Docker config file read for one registry ([`lookup`]): where its credentials are.
//! Pure, with no helper run (the fuzz target `docker_config` reads it from this file).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;

/// The registry key Docker files Docker Hub's credentials under.
const DOCKER_HUB_KEY: &str = "https://index.docker.io/v1/";

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
    #[serde(default)]
    creds_store: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// Where a Docker config says `registry`'s credentials are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// In the file itself (`auths`).
    Basic(String, String),
    /// With the credential helper `docker-credential-NAME` (`credHelpers`, `credsStore`).
    Helper(String),
    /// Nowhere: the registry is asked anonymously.
    Anonymous,
}

/// Reads a Docker config's `text` for `registry`: its entry in `credHelpers`, else in
/// `auths`, else `credsStore`. Pure (no helper is run; the fuzz target `docker_config`
/// reads it). The error, after the file's name, says what is wrong and what to do.
///
/// Kept rather than `docker_credential`'s reading: its errors name neither the file, the
/// key nor what to do (`Unable to decode credential`), it takes a helper's "credentials
/// not found" for a failure where Docker goes on anonymously, and it runs any helper name
/// the file gives, where a name with a `/` would run a program by path.
pub fn lookup(text: &str, registry: &str) -> Result<Found, String> {
    let config: DockerConfig =
        serde_json::from_str(text).map_err(|e| format!(" is not a Docker config file: {e}"))?;
    let key = |k: &str| normalize(k) == normalize(registry_key(registry));
    let helper = |name: &str, key: &str| {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(format!(
                ": {key} names the credential helper {name:?}, which is not a helper's name (docker-credential-NAME, NAME of letters, digits, `-`, `_` and `.`)"
            ));
        }
        Ok(Found::Helper(name.to_string()))
    };
    if let Some((k, name)) = config.cred_helpers.iter().find(|(k, _)| key(k)) {
        return helper(name, &format!("credHelpers.\"{k}\""));
    }
    if let Some((_, entry)) = config.auths.iter().find(|(k, _)| key(k)) {
        return from_entry(entry, registry);
    }
    match &config.creds_store {
        Some(store) if !store.is_empty() => helper(store, "credsStore"),
        _ => Ok(Found::Anonymous),
    }
}

/// The key Docker files `registry`'s credentials under.
fn registry_key(registry: &str) -> &str {
    match registry {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB_KEY,
        other => other,
    }
}

/// `https://host:port/v1/` and `host:port` are the same registry.
fn normalize(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

fn from_entry(entry: &AuthEntry, registry: &str) -> Result<Found, String> {
    if let (Some(user), Some(pass)) = (&entry.username, &entry.password) {
        return Ok(Found::Basic(user.clone(), pass.clone()));
    }
    let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) else {
        return Ok(Found::Anonymous);
    };
    let bad = |detail: &str| {
        format!(": auths.\"{registry}\".auth {detail}; run `docker login {registry}` again")
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(|_| bad("is not base64"))?;
    let text = String::from_utf8(decoded).map_err(|_| bad("is not UTF-8"))?;
    let (user, pass) = text
        .split_once(':')
        .ok_or_else(|| bad("is not USER:PASSWORD"))?;
    Ok(Found::Basic(user.to_string(), pass.to_string()))
}
