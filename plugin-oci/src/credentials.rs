//! Registry credentials, where Docker keeps them: `$DOCKER_CONFIG/config.json` (else
//! `~/.docker/config.json`), its `auths` (what `docker login` writes), `credHelpers` (one
//! credential helper per registry) and `credsStore` (one for all), a helper being the
//! program `docker-credential-NAME` that answers `get` with the registry on its stdin.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use crate::OciError;

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

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HelperAnswer {
    username: String,
    secret: String,
}

/// Docker's config file: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
pub fn docker_config_file() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
}

/// The credentials for `registry` (`host[:port]`) in Docker's config, else anonymous.
pub fn for_registry(registry: &str) -> Result<RegistryAuth, OciError> {
    match docker_config_file() {
        Some(file) => from_file(&file, registry),
        None => Ok(RegistryAuth::Anonymous),
    }
}

/// [`for_registry`] from the config file `file` (none there: anonymous).
pub fn from_file(file: &Path, registry: &str) -> Result<RegistryAuth, OciError> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RegistryAuth::Anonymous),
        Err(e) => {
            return Err(OciError::Credentials {
                registry: registry.to_string(),
                detail: format!("cannot read {}: {e}", file.display()),
            });
        }
    };
    let config: DockerConfig = serde_json::from_str(&text).map_err(|e| OciError::Credentials {
        registry: registry.to_string(),
        detail: format!("{} is not a Docker config file: {e}", file.display()),
    })?;
    let key = |k: &str| normalize(k) == normalize(registry_key(registry));
    if let Some((_, helper)) = config.cred_helpers.iter().find(|(k, _)| key(k)) {
        return from_helper(helper, registry);
    }
    if let Some((_, entry)) = config.auths.iter().find(|(k, _)| key(k)) {
        return from_entry(entry, registry, file);
    }
    match &config.creds_store {
        Some(store) if !store.is_empty() => from_helper(store, registry),
        _ => Ok(RegistryAuth::Anonymous),
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

fn from_entry(entry: &AuthEntry, registry: &str, file: &Path) -> Result<RegistryAuth, OciError> {
    if let (Some(user), Some(pass)) = (&entry.username, &entry.password) {
        return Ok(RegistryAuth::Basic(user.clone(), pass.clone()));
    }
    let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) else {
        return Ok(RegistryAuth::Anonymous);
    };
    let bad = |detail: &str| OciError::Credentials {
        registry: registry.to_string(),
        detail: format!(
            "{}: auths.\"{registry}\".auth {detail}; run `docker login {registry}` again",
            file.display()
        ),
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(|_| bad("is not base64"))?;
    let text = String::from_utf8(decoded).map_err(|_| bad("is not UTF-8"))?;
    let (user, pass) = text
        .split_once(':')
        .ok_or_else(|| bad("is not USER:PASSWORD"))?;
    Ok(RegistryAuth::Basic(user.to_string(), pass.to_string()))
}

/// Asks `docker-credential-HELPER get` for `registry`'s credentials.
fn from_helper(helper: &str, registry: &str) -> Result<RegistryAuth, OciError> {
    let program = format!("docker-credential-{helper}");
    let fail = |detail: String| OciError::Credentials {
        registry: registry.to_string(),
        detail,
    };
    let mut child = Command::new(&program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            fail(format!(
                "the Docker config names the credential helper '{helper}', and {program} cannot be started: {e}"
            ))
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that exits without reading gets a broken pipe here; its answer says more.
        let _ = stdin.write_all(registry.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| fail(format!("{program} get: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // The helpers' own words for "nothing stored for this registry".
        if stdout.contains("credentials not found") {
            return Ok(RegistryAuth::Anonymous);
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(fail(format!(
            "{program} get failed ({}): {}",
            out.status,
            format!("{stdout} {stderr}").trim()
        )));
    }
    let answer: HelperAnswer = serde_json::from_str(&stdout).map_err(|e| {
        fail(format!(
            "{program} get answered what is not a credential ({e})"
        ))
    })?;
    Ok(RegistryAuth::Basic(answer.username, answer.secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        std::fs::write(&file, text).unwrap();
        (dir, file)
    }

    #[test]
    fn docker_login_credentials_are_found_by_host_whatever_the_key_looks_like() {
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret");
        for key in [
            "127.0.0.1:5000",
            "https://127.0.0.1:5000",
            "http://127.0.0.1:5000/v2/",
        ] {
            let (_d, file) = config(&format!(r#"{{"auths":{{"{key}":{{"auth":"{auth}"}}}}}}"#));
            match from_file(&file, "127.0.0.1:5000").unwrap() {
                RegistryAuth::Basic(u, p) => {
                    assert_eq!((u.as_str(), p.as_str()), ("alice", "s3cret"))
                }
                other => panic!("{key}: {other:?}"),
            }
        }
    }

    #[test]
    fn no_config_or_no_entry_is_anonymous() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            from_file(&dir.path().join("none.json"), "r.example").unwrap(),
            RegistryAuth::Anonymous
        ));
        let (_d, file) = config(r#"{"auths":{"other.example":{"auth":"eDp5"}}}"#);
        assert!(matches!(
            from_file(&file, "r.example").unwrap(),
            RegistryAuth::Anonymous
        ));
    }

    #[test]
    fn a_broken_entry_says_where_and_what_to_do() {
        let (_d, file) = config(r#"{"auths":{"r.example":{"auth":"bm9jb2xvbg=="}}}"#);
        let e = from_file(&file, "r.example").unwrap_err().to_string();
        assert!(
            e.contains("USER:PASSWORD") && e.contains("docker login r.example"),
            "{e}"
        );
        let (_d, file) = config("{not json");
        let e = from_file(&file, "r.example").unwrap_err().to_string();
        assert!(e.contains("not a Docker config file"), "{e}");
    }

    #[test]
    fn a_missing_credential_helper_is_named() {
        let (_d, file) = config(r#"{"credHelpers":{"r.example":"no-such-helper-here"}}"#);
        let e = from_file(&file, "r.example").unwrap_err().to_string();
        assert!(e.contains("docker-credential-no-such-helper-here"), "{e}");
    }
}
