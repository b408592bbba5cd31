//! A real OCI registry for the tests of publishing and installing plugins: Debian's
//! `docker-registry` (the CNCF distribution registry), on a free loopback port, storing in a
//! temporary folder, with or without basic auth; killed on drop. `cargo xtask test`
//! installs it and names it in `TOOLHOST_TEST_OCI_REGISTRY`.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The user the registry with basic auth accepts.
pub const USER: &str = "tester";
/// Its password.
pub const PASSWORD: &str = "registry-test-password";
/// `PASSWORD`'s bcrypt hash (cost 5), as `htpasswd -B` writes it.
const PASSWORD_BCRYPT: &str = "$2b$05$Qz6cgjYVj4Absyx8drGx6O.4T4SmxYk.WGAknuiPiFvLn3QJvVVoa";

/// A running registry.
pub struct OciRegistry {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl OciRegistry {
    /// A registry anyone may push to; `None` (the test skips) when the run has none.
    pub fn start() -> Option<OciRegistry> {
        OciRegistry::start_with(false)
    }

    /// A registry that asks for [`USER`] and [`PASSWORD`].
    pub fn start_with_auth() -> Option<OciRegistry> {
        OciRegistry::start_with(true)
    }

    fn start_with(auth: bool) -> Option<OciRegistry> {
        let program = crate::peer("TOOLHOST_TEST_OCI_REGISTRY")?;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("no temp dir: {e}"));
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("no free port: {e}"));
        let storage = dir.path().join("data");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
            storage.display()
        );
        if auth {
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{USER}:{PASSWORD_BCRYPT}\n"))
                .unwrap_or_else(|e| panic!("{e}"));
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: toolhost-test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        let config_file = dir.path().join("config.yml");
        std::fs::write(&config_file, config).unwrap_or_else(|e| panic!("{e}"));
        // Its log (every 404 of a push's existence checks is an "error" there) stays in its
        // folder, beside its storage.
        let log = std::fs::File::create(dir.path().join("registry.log"))
            .unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new(&program)
            .arg("serve")
            .arg(&config_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let registry = OciRegistry { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the registry did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(registry)
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The file a blob is stored in (to tamper with it).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// A Docker config folder holding this registry's credentials (for `DOCKER_CONFIG`).
    pub fn docker_config(&self, into: &Path) -> PathBuf {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
        std::fs::create_dir_all(into).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            into.join("config.json"),
            format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, self.host()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        into.to_path_buf()
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
