//! Registry credentials, where Docker keeps them: `$DOCKER_CONFIG/config.json` (else
//! `~/.docker/config.json`), its `auths` (what `docker login` writes), `credHelpers` (one
//! credential helper per registry) and `credsStore` (one for all), a helper being the
//! program `docker-credential-NAME` that answers `get` with the registry on its stdin.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use crate::OciError;

mod lookup;

pub use lookup::{Found, lookup};

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
    let fail = |detail: String| OciError::Credentials {
        registry: registry.to_string(),
        detail: format!("{}{detail}", file.display()),
    };
    match lookup(&text, registry).map_err(fail)? {
        Found::Basic(user, pass) => Ok(RegistryAuth::Basic(user, pass)),
        Found::Anonymous => Ok(RegistryAuth::Anonymous),
        Found::Helper(helper) => from_helper(&helper, registry),
    }
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
        let auth =
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "alice:s3cret");
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
    fn a_helper_name_that_is_a_path_is_refused_not_run() {
        for text in [
            r#"{"credHelpers":{"r.example":"../../tmp/evil"}}"#,
            r#"{"credsStore":"/bin/sh"}"#,
        ] {
            let e = lookup(text, "r.example").unwrap_err();
            assert!(e.contains("which is not a helper's name"), "{e}");
        }
        assert_eq!(
            lookup(r#"{"credsStore":"desktop.exe"}"#, "r.example"),
            Ok(Found::Helper("desktop.exe".into()))
        );
    }

    #[test]
    fn a_missing_credential_helper_is_named() {
        let (_d, file) = config(r#"{"credHelpers":{"r.example":"no-such-helper-here"}}"#);
        let e = from_file(&file, "r.example").unwrap_err().to_string();
        assert!(e.contains("docker-credential-no-such-helper-here"), "{e}");
    }
}
