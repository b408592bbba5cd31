//! Where toolhost keeps its logins to remote MCP servers ([`crate::login::Login`]): one
//! JSON file (the host puts it outside every workspace, beside the pins), readable by its
//! owner only, written whole.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::login::Login;

/// The logins file.
pub struct Logins {
    path: PathBuf,
}

impl Logins {
    /// The logins kept in `path`.
    pub fn new(path: PathBuf) -> Logins {
        Logins { path }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<BTreeMap<String, Login>, String> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{} is not a logins file: {e}", self.path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(format!("cannot read {}: {e}", self.path.display())),
        }
    }

    /// The login kept for `key`.
    pub fn get(&self, key: &str) -> Result<Option<Login>, String> {
        Ok(self.read()?.remove(key))
    }

    /// Keeps `login` for `key` (the file is written beside itself, then renamed; owner
    /// only).
    pub fn put(&self, key: &str, login: Login) -> Result<(), String> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut all = self.read()?;
        all.insert(key.to_string(), login);
        let text = serde_json::to_vec_pretty(&all).map_err(|e| e.to_string())?;
        let failed =
            |doing: &str, e: std::io::Error| format!("cannot {doing} {}: {e}", self.path.display());
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| failed("make the folder of", e))?;
        }
        let tmp = self
            .path
            .with_extension(format!("json.{}.tmp", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&text).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(failed("write", e));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_is_kept_for_its_owner_only_and_read_back() {
        let dir = std::env::temp_dir().join(format!("toolhost-logins-{}", std::process::id()));
        let logins = Logins::new(dir.join("state/mcp-logins.json"));
        assert_eq!(logins.get("k").unwrap(), None);
        let login = Login {
            issuer: "https://idp.example".into(),
            token_endpoint: "https://idp.example/token".into(),
            client_id: "c".into(),
            resource: "https://mcp.example/mcp".into(),
            refresh_token: "r".into(),
        };
        logins.put("k", login.clone()).unwrap();
        assert_eq!(logins.get("k").unwrap(), Some(login.clone()));
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(logins.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!format!("{login:?}").contains("\"r\""));
        let _ = std::fs::remove_dir_all(dir);
    }
}
