//! A peer gateway in front of the same server: IBM's ContextForge (PyPI
//! `mcp-contextforge-gateway`, in a venv under `target/peers`), set up as its users set it
//! up: started on loopback with a SQLite database and the secrets it requires, a JWT minted
//! with its own tool, the mounted server registered through its REST API
//! (`POST /gateways`), and a virtual server holding the one tool (`POST /servers`), whose
//! streamable HTTP endpoint (`/servers/ID/mcp`, a 2025-11-25 session) the `mcp_servers`
//! bench drives as it drives toolhost's. The server it mounts is `toolhost serve --http`
//! with the bare configuration, as toolhost's own HTTP gateway mounts it. Both start with
//! the bench (an attached server of the plan) and end when [`Running`] is dropped; between
//! their own rounds the bench keeps them stopped (SIGSTOP), so that what ContextForge spends
//! idle (a third of a core) is not taken from the other servers' timed rounds.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The ContextForge measured.
pub(super) const CONTEXTFORGE: &str = "mcp-contextforge-gateway==1.0.7.post20260921";

/// Processes the bench started for a peer, killed when dropped.
pub(super) struct Running(Vec<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A port nothing listens on now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// `method path` on loopback `port`, with a JSON `body` and a bearer `token`: the status
/// and the body read as JSON.
fn request(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("{method} {path}: {e}"))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let authorization = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json\r\n{authorization}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()))
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{method} {path}: no HTTP answer"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, serde_json::from_str(&body).unwrap_or(Value::Null)))
}

/// A chunked body, whole.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// Waits up to `within` for `GET path` on `port` to answer 200.
fn wait_healthy(port: u16, path: &str, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        if request(port, "GET", path, None, None).is_ok_and(|(s, _)| s == 200) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "nothing answered GET {path} on port {port} within {within:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// ContextForge in front of `upstream` (a `serve --http 127.0.0.1:{port}` command): the
/// plan's entry for it, what runs for it, and how long setting it up took.
pub(super) fn start(
    peers: &Path,
    upstream: &[String],
) -> Result<(Value, Running, Duration), String> {
    let began = Instant::now();
    let python = crate::peers::python_venv(peers, "contextforge", &[CONTEXTFORGE], "mcpgateway")?;
    let bin = python.parent().ok_or("no venv")?;
    let mut running = Running(Vec::new());
    // The server it mounts.
    let up_port = free_port()?;
    let (program, args) = upstream.split_first().ok_or("no upstream command")?;
    let up = Command::new(program)
        .args(
            args.iter()
                .map(|a| a.replace("{port}", &up_port.to_string())),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the upstream: {e}"))?;
    let up_pid = up.id();
    running.0.push(up);
    // ContextForge itself, on a fresh database.
    let dir = peers.join("contextforge-run");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let port = free_port()?;
    let secret = "bench-jwt-secret-0123456789abcdef0123456789abcdef";
    let env = [
        ("MCPGATEWAY_UI_ENABLED", "false"),
        ("MCPGATEWAY_ADMIN_API_ENABLED", "true"),
        ("AUTH_REQUIRED", "true"),
        ("JWT_SECRET_KEY", secret),
        (
            "AUTH_ENCRYPTION_SECRET",
            "bench-encryption-0123456789abcdef0123456789",
        ),
        ("BASIC_AUTH_PASSWORD", "bench-basic-0123456789abcdef"),
        ("PLATFORM_ADMIN_EMAIL", "admin@example.com"),
        (
            "PLATFORM_ADMIN_PASSWORD",
            "bench-admin-0123456789abcdefABC!",
        ),
        ("ENVIRONMENT", "development"),
        ("LOG_LEVEL", "ERROR"),
        // Its rate limit (100 MCP requests a minute, 20 more in a burst) would measure
        // itself; toolhost has none by default.
        ("RATE_LIMITING_ENABLED", "false"),
        // The server it mounts is on loopback, which its SSRF guard refuses by default.
        ("SSRF_ALLOW_LOCALHOST", "true"),
        ("SSRF_ALLOW_PRIVATE_NETWORKS", "true"),
    ];
    let gateway = Command::new(bin.join("mcpgateway"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .envs(env)
        .env(
            "DATABASE_URL",
            format!("sqlite:///{}", dir.join("mcp.db").display()),
        )
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start ContextForge: {e}"))?;
    let pid = gateway.id();
    running.0.push(gateway);
    wait_healthy(up_port, "/v1/health", Duration::from_secs(30))?;
    wait_healthy(port, "/health", Duration::from_secs(120))?;
    let minted = crate::peers::output(
        Command::new(&python)
            .args(["-m", "mcpgateway.utils.create_jwt_token", "--username"])
            .args(["admin@example.com", "--exp", "1440", "--secret", secret])
            .envs(env)
            .current_dir(&dir),
    )?;
    let token = minted.lines().last().unwrap_or_default().trim().to_string();
    let (status, registered) = request(
        port,
        "POST",
        "/gateways",
        Some(&token),
        Some(
            &json!({"name": "up", "url": format!("http://127.0.0.1:{up_port}/mcp"), "transport": "STREAMABLEHTTP"}),
        ),
    )?;
    if !(200..300).contains(&status) {
        return Err(format!("POST /gateways answered {status}: {registered}"));
    }
    let (_, tools) = request(port, "GET", "/tools", Some(&token), None)?;
    let listed = tools
        .as_array()
        .or_else(|| tools["items"].as_array())
        .cloned()
        .unwrap_or_default();
    let tool = listed
        .iter()
        .find(|t| t["name"] == "up-read-file")
        .ok_or_else(|| format!("ContextForge lists no up-read-file: {tools}"))?;
    let (status, made) = request(
        port,
        "POST",
        "/servers",
        Some(&token),
        Some(&json!({"server": {"name": "bench", "associated_tools": [tool["id"]]}})),
    )?;
    let id = made["id"]
        .as_str()
        .filter(|_| (200..300).contains(&status))
        .ok_or_else(|| format!("POST /servers answered {status}: {made}"))?;
    let entry = json!({
        "name": "contextforge-http",
        "tool": "up-read-file",
        "arguments": {"path": "a.txt"},
        "command": [],
        "http": {"stateless": false, "bearer": token, "path": format!("/servers/{id}/mcp")},
        "attached": {"port": port, "pids": [pid, up_pid]},
        "count": false,
        // A Python gateway: a round of the plan's calls would take minutes.
        "calls": 2000,
    });
    Ok((entry, running, began.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_is_read_whole() {
        assert_eq!(dechunk("4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n"), "{\"a\":1}");
        assert_eq!(dechunk("0\r\n\r\n"), "");
    }
}
