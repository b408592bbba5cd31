//! A real `redis-server` for the tests of the shared state store: started on a free port
//! with nothing persisted, stopped and started again on the same port by the test, killed
//! on drop. `cargo xtask test` installs Debian's `redis-server` and names it in
//! `TOOLHOST_TEST_REDIS`.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running (or stopped) Redis.
pub struct RedisServer {
    program: PathBuf,
    port: u16,
    child: Option<Child>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

impl RedisServer {
    /// A Redis on a free port; `None` (the test skips) when the run has none.
    pub fn start() -> Option<RedisServer> {
        let program = crate::peer("TOOLHOST_TEST_REDIS")?;
        let mut server = RedisServer {
            program,
            port: free_port(),
            child: None,
        };
        server.restart();
        Some(server)
    }

    /// Its URL (database 0).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// What `redis-cli` (beside its program) prints for `args`.
    fn cli(&self, args: &[&str]) -> String {
        let cli = self.program.with_file_name("redis-cli");
        let out = Command::new(&cli)
            .args(["-h", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", cli.display()));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Wipes every key, as a restart without persistence would (the server stays up).
    pub fn flush_all(&self) {
        let said = self.cli(&["FLUSHALL"]);
        assert_eq!(said.trim(), "OK", "FLUSHALL answered {said}");
    }

    /// How many commands it has processed so far (`INFO stats`, read with the `redis-cli`
    /// beside its program; the INFO itself counts once).
    pub fn commands_processed(&self) -> u64 {
        let cli = self.program.with_file_name("redis-cli");
        self.cli(&["INFO", "stats"])
            .lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no total_commands_processed from {}", cli.display()))
    }

    /// Stops it (its data is gone: nothing is persisted).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, and waits until it answers.
    pub fn restart(&mut self) {
        self.stop();
        let child = Command::new(&self.program)
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.program.display()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
