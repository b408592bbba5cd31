//! `serve --http` as an OAuth 2.1 resource server, against a real OpenID provider
//! (`oidc-provider` from npm, `tests/oauth/idp.mjs`) whose users log in through its own
//! login page (`tests/oauth/client.py`), and the official MCP Python SDK's OAuth client.
#![cfg(test)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use toolhost_tests::peer;

mod common;
use common::browser::Browser;
use common::raw_http::{
    Response, follow_events_with, legacy_session_with, post_mcp, post_stateless_with, request,
    stateless, wait_event,
};
use common::{Server, command, start, workspace};

/// The test identity provider, killed on drop.
struct Idp {
    child: Child,
    issuer: String,
}

impl Drop for Idp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn oauth_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oauth")
}

/// The peers these tests need: Node 22 with oidc-provider, and the Python SDK's venv.
fn peers() -> Option<(PathBuf, PathBuf, PathBuf)> {
    Some((
        peer("TOOLHOST_TEST_NODE")?,
        peer("TOOLHOST_TEST_OIDC_PROVIDER")?,
        peer("TOOLHOST_TEST_PYTHON_SDK")?,
    ))
}

impl Idp {
    /// Starts the provider on `port` (0: any) with fresh signing keys named `kid`.
    fn start(port: u16, kid: &str) -> Option<Idp> {
        let (node, provider, _) = peers()?;
        let mut child = Command::new(node)
            .arg(oauth_dir().join("idp.mjs"))
            .arg(provider)
            .arg(port.to_string())
            .arg(kid)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut line).unwrap();
        // What it says later (oidc-provider's notices) is read and dropped: a closed pipe
        // would end it.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let started: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the identity provider did not start ({e}): {line:?}"));
        Some(Idp {
            child,
            issuer: started["issuer"].as_str().unwrap().to_string(),
        })
    }

    fn port(&self) -> u16 {
        self.issuer.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// `client.py MODE ARGS…`'s JSON line.
    fn client(&self, args: &[&str]) -> Value {
        let (_, _, python) = peers().unwrap();
        let out = Command::new(python)
            .arg(oauth_dir().join("client.py"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "client.py {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// An access token for `user`, through `client`'s login, bound to `resource`.
    fn token(&self, client: &str, user: &str, resource: &str) -> String {
        let answer = self.client(&["token", &self.issuer, client, user, resource]);
        answer["access_token"].as_str().unwrap().to_string()
    }
}

/// The team's configuration: alice (dev) reads and writes files, writes denied by her
/// rule; bob (ops) reads and lists only.
fn team_config(issuer: &str, extra: &str) -> String {
    format!(
        r#"
[http.auth]
issuer = "{issuer}"
leeway_secs = 0
keys_min_refresh_secs = 0
scopes_supported = ["mcp"]
{extra}

[tool_confirmation.default]
write = "auto"

[[access]]
groups = ["dev"]
tools = ["read_file", "write_file"]
modes = {{ write = "deny" }}

[[access]]
groups = ["ops"]
tools = ["read_*", "list_dir"]
"#
    )
}

/// `serve --http` in `ws` with `config`; the resource its tokens must name.
fn serve(ws: &Path, config: &str, extra: &[&str]) -> (Server, String) {
    std::fs::write(ws.join("toolhost.toml"), config).unwrap();
    let mut args = vec![
        "--config",
        "toolhost.toml",
        "serve",
        "--http",
        "127.0.0.1:0",
    ];
    args.extend(extra);
    let mut cmd = command(ws, &args);
    cmd.env("TOOLHOST_LOG", "toolhost=debug")
        .env("TEST_CLIENT_SECRET", "toolhost-secret-0123456789");
    let server = start(cmd);
    let resource = format!("http://{}/mcp", server.addr);
    (server, resource)
}

fn call(server: &Server, token: &str, id: i64, method: &str, params: Value) -> Response {
    let bearer = format!("Bearer {token}");
    post_stateless_with(
        &server.addr,
        &[("Authorization", bearer.as_str())],
        &stateless(id, method, params, false),
    )
}

fn tool_names(response: &Response) -> Vec<String> {
    let list = response.json();
    let mut names: Vec<String> = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

fn read_readme(server: &Server, token: &str) -> Response {
    call(
        server,
        token,
        7,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "README.md"}}),
    )
}

#[test]
fn without_a_token_the_server_points_at_its_metadata_and_the_metadata_at_the_issuer() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    let (server, resource) = serve(ws.path(), &team_config(&idp.issuer, ""), &[]);
    let r = post_stateless_with(
        &server.addr,
        &[],
        &stateless(1, "tools/list", json!({}), false),
    );
    assert_eq!(r.status, 401, "{r:?}");
    let metadata_url = format!(
        "http://{}/.well-known/oauth-protected-resource/mcp",
        server.addr
    );
    assert_eq!(
        r.header("www-authenticate"),
        Some(format!("Bearer resource_metadata=\"{metadata_url}\"").as_str())
    );
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let m = request(&server.addr, "GET", path, &[], b"");
        assert_eq!(m.status, 200, "{path}: {m:?}");
        assert_eq!(
            m.json(),
            json!({"resource": resource, "authorization_servers": [idp.issuer],
                "bearer_methods_supported": ["header"], "resource_name": "toolhost",
                "scopes_supported": ["mcp"]})
        );
    }
}

#[test]
fn two_users_see_their_own_tools_and_a_tool_hidden_from_one_is_unknown_to_it() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    let config = format!(
        "{}\n[audit]\npath = \"audit.jsonl\"\nsync = true\n",
        team_config(&idp.issuer, "")
    );
    let (server, resource) = serve(ws.path(), &config, &[]);
    let alice = idp.token("test-client", "alice", &resource);
    let bob = idp.token("test-client", "bob", &resource);
    let alices = call(&server, &alice, 1, "tools/list", json!({}));
    assert_eq!(tool_names(&alices), ["read_file", "write_file"]);
    assert_eq!(alices.json()["result"]["cacheScope"], "private");
    let bobs = call(&server, &bob, 2, "tools/list", json!({}));
    assert_eq!(tool_names(&bobs), ["list_dir", "read_file"]);
    let hidden = call(
        &server,
        &alice,
        3,
        "tools/call",
        json!({"name": "list_dir", "arguments": {"path": "."}}),
    );
    let result = &hidden.json()["result"];
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("Tool 'list_dir' not found"), "{text}");
    assert!(
        !text.contains("list_dir,") && !text.contains("shell"),
        "{text}"
    );
    let read = read_readme(&server, &bob);
    assert_eq!(read.json()["result"]["content"][0]["text"], "# hello\n");
    std::thread::sleep(Duration::from_millis(200));
    let log = server.log.lock().unwrap().join("\n");
    assert!(
        !log.contains(&alice) && !log.contains(&bob),
        "a token reached the log"
    );
}

#[test]
fn a_callers_rule_narrows_the_policy_and_the_refusal_names_the_rule() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    let (server, resource) = serve(ws.path(), &team_config(&idp.issuer, ""), &[]);
    let alice = idp.token("test-client", "alice", &resource);
    let write = call(
        &server,
        &alice,
        1,
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": "x.txt", "content": "x"}}),
    );
    let result = &write.json()["result"];
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("access[0].modes.write"), "{text}");
    assert!(!ws.path().join("x.txt").exists());
}

/// `token` with its payload changed by `change` (the signature left as it was).
fn tampered(token: &str, change: impl Fn(&mut Value)) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    let mut claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    change(&mut claims);
    format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        parts[2]
    )
}

/// `token` re-headed with `alg` and signed by `sign` (none: no signature).
fn resigned(token: &str, alg: &str, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    let header = URL_SAFE_NO_PAD.encode(json!({"alg": alg, "typ": "at+jwt"}).to_string());
    let input = format!("{header}.{}", parts[1]);
    let signature = URL_SAFE_NO_PAD.encode(sign(input.as_bytes()));
    format!("{input}.{signature}")
}

#[test]
fn expired_foreign_unsigned_tampered_and_misdirected_tokens_are_refused_naming_why() {
    let (Some(idp), Some(stranger)) = (Idp::start(0, "k1"), Idp::start(0, "s1")) else {
        return;
    };
    let ws = workspace();
    let (server, resource) = serve(ws.path(), &team_config(&idp.issuer, ""), &[]);
    let good = idp.token("test-client", "alice", &resource);
    assert_eq!(read_readme(&server, &good).status, 200);
    let expiring = idp.token("expiring", "alice", &resource);
    std::thread::sleep(Duration::from_millis(2100));
    let jwks: Value = serde_json::from_slice(
        &request(
            &format!("127.0.0.1:{}", idp.port()),
            "GET",
            "/jwks",
            &[],
            b"",
        )
        .body,
    )
    .unwrap();
    let public_n = jwks["keys"][0]["n"].as_str().unwrap().to_string();
    let cases = [
        ("expired", expiring, "expired"),
        (
            "another audience",
            idp.token("test-client", "alice", "http://127.0.0.1:1/other"),
            "ask the issuer for a token with resource=",
        ),
        (
            "another issuer",
            stranger.token("test-client", "alice", &resource),
            "is not trusted here",
        ),
        (
            "unsigned",
            resigned(&good, "none", |_| Vec::new()),
            "unsigned",
        ),
        (
            "HMAC keyed with the public key",
            resigned(&good, "HS256", |input| {
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, public_n.as_bytes());
                ring::hmac::sign(&key, input).as_ref().to_vec()
            }),
            "shared secret",
        ),
        (
            "tampered",
            tampered(&good, |c| c["sub"] = json!("bob")),
            "signature does not verify",
        ),
        (
            "opaque, not introspected",
            "2YotnFZFEjr1zCsicMWpAA".to_string(),
            "opaque tokens are not introspected",
        ),
    ];
    for (what, token, says) in cases {
        let r = read_readme(&server, &token);
        assert_eq!(r.status, 401, "{what}: {r:?}");
        let challenge = r.header("www-authenticate").unwrap_or_default();
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\"") && challenge.contains(says),
            "{what}: {challenge}"
        );
    }
}

#[test]
fn a_token_without_a_required_scope_gets_403_naming_the_scope() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    let config = team_config(&idp.issuer, "required_scopes = [\"mcp\", \"mcp:admin\"]");
    let (server, resource) = serve(ws.path(), &config, &[]);
    let alice = idp.token("test-client", "alice", &resource);
    let r = read_readme(&server, &alice);
    assert_eq!(r.status, 403, "{r:?}");
    let challenge = r.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"mcp mcp:admin\""),
        "{challenge}"
    );
}

#[test]
fn an_opaque_token_is_introspected_and_refused_once_revoked() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    let introspection = "[http.auth.client]\nid = \"toolhost\"\nsecret_env = \"TEST_CLIENT_SECRET\"\n\n[http.auth.introspection]";
    let (server, resource) = serve(ws.path(), &team_config(&idp.issuer, introspection), &[]);
    let opaque = idp.token("opaque", "bob", &resource);
    assert!(!opaque.starts_with("eyJ"), "{opaque}");
    let bobs = call(&server, &opaque, 1, "tools/list", json!({}));
    assert_eq!(bobs.status, 200, "{bobs:?}");
    assert_eq!(tool_names(&bobs), ["list_dir", "read_file"]);
    idp.client(&["revoke", &idp.issuer, "opaque", &opaque]);
    let r = read_readme(&server, &opaque);
    assert_eq!(r.status, 401, "{r:?}");
    assert!(
        r.header("www-authenticate")
            .unwrap_or_default()
            .contains("not active"),
        "{r:?}"
    );
}

#[test]
fn new_signing_keys_at_the_issuer_are_fetched_for_a_token_that_names_one() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    let (server, resource) = serve(ws.path(), &team_config(&idp.issuer, ""), &[]);
    let before = idp.token("test-client", "alice", &resource);
    assert_eq!(read_readme(&server, &before).status, 200);
    // The issuer restarts with new keys (its old ones gone), at the same address.
    let port = idp.port();
    drop(idp);
    let rotated = Idp::start(port, "k2").unwrap();
    let after = rotated.token("es-client", "alice", &resource);
    let r = read_readme(&server, &after);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["result"]["content"][0]["text"], "# hello\n");
}

#[test]
fn static_tokens_keep_working_beside_oauth_and_rules_can_name_their_callers() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    let token = "a-static-token-for-the-oauth-test-0123";
    std::fs::write(ws.path().join("tokens"), token).unwrap();
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let principal: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let config = format!(
        "{}\n[[access]]\nprincipals = [\"token-{principal}\"]\ntools = [\"list_dir\"]\n",
        team_config(&idp.issuer, "")
    );
    let (server, resource) = serve(ws.path(), &config, &["--token-file", "tokens"]);
    let listed = call(&server, token, 1, "tools/list", json!({}));
    assert_eq!(tool_names(&listed), ["list_dir"]);
    let alice = idp.token("test-client", "alice", &resource);
    let alices = call(&server, &alice, 2, "tools/list", json!({}));
    assert_eq!(tool_names(&alices), ["read_file", "write_file"]);
}

#[test]
fn the_python_sdks_oauth_client_discovers_registers_logs_in_and_calls() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    let (server, resource) = serve(ws.path(), &team_config(&idp.issuer, ""), &[]);
    let seen = idp.client(&["sdk", &resource, "bob"]);
    assert_eq!(seen["tools"], json!(["list_dir", "read_file"]), "{seen}");
    assert_eq!(
        seen["read"],
        json!({"is_error": false, "text": "# hello\n"}),
        "{seen}"
    );
    assert_eq!(seen["registered"], true, "{seen}");
    assert_eq!(seen["resource"], json!(resource), "{seen}");
    assert_eq!(seen["pkce"], "S256", "{seen}");
    drop(server);
}

#[test]
fn each_caller_sees_and_answers_only_its_own_confirmations_in_the_control_api() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    let config = format!(
        "[http.auth]\nissuer = \"{}\"\n\n[[access]]\ngroups = [\"dev\", \"ops\"]\n",
        idp.issuer
    );
    let (server, resource) = serve(ws.path(), &config, &[]);
    let alice = format!("Bearer {}", idp.token("test-client", "alice", &resource));
    let bob = format!("Bearer {}", idp.token("test-client", "bob", &resource));
    let as_alice = [("Authorization", alice.as_str())];
    let as_bob = [("Authorization", bob.as_str())];
    // Alice's console watches, so her call that cannot ask her client waits for it.
    let alices_events = follow_events_with(&server.addr, &as_alice);
    let bobs_events = follow_events_with(&server.addr, &as_bob);
    std::thread::sleep(Duration::from_millis(200));
    let (addr, authorization) = (server.addr.clone(), alice.clone());
    let call = std::thread::spawn(move || {
        post_stateless_with(
            &addr,
            &[("Authorization", authorization.as_str())],
            &stateless(
                1,
                "tools/call",
                json!({"name": "write_file", "arguments": {"path": "alice.txt", "content": "hers"}}),
                false,
            ),
        )
    });
    let requested = wait_event(&alices_events, "tool.confirmation_requested");
    assert_eq!(requested["principal"], format!("{}#alice", idp.issuer));
    let id = requested["request_id"].as_str().unwrap().to_string();
    let pending = |who: &[(&str, &str)]| -> Value {
        serde_json::from_slice(&request(&server.addr, "GET", "/v1/confirmations", who, b"").body)
            .unwrap()
    };
    assert_eq!(pending(&as_alice).as_array().unwrap().len(), 1);
    assert_eq!(pending(&as_bob), json!([]));
    let answer = |who: &[(&str, &str)]| {
        let mut headers = vec![("Content-Type", "application/json")];
        headers.extend_from_slice(who);
        request(
            &server.addr,
            "POST",
            &format!("/v1/confirmations/{id}"),
            &headers,
            br#"{"decision":"allow"}"#,
        )
    };
    assert_eq!(
        answer(&as_bob).status,
        404,
        "bob answered alice's confirmation"
    );
    assert_eq!(answer(&as_alice).status, 200);
    let done = call.join().unwrap();
    assert_eq!(done.json()["result"]["isError"], false, "{done:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("alice.txt")).unwrap(),
        "hers"
    );
    // Bob's console saw nothing of it.
    assert!(
        bobs_events
            .try_iter()
            .all(|(_, e)| e["principal"] != format!("{}#alice", idp.issuer)),
        "bob's event stream carried alice's calls"
    );
}

#[test]
fn another_callers_console_does_not_hold_a_call_nobody_can_be_asked_about() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    // Were bob's console taken as watching alice's calls, her call would wait for it until
    // the confirmation timeout.
    let config = format!(
        "[http.auth]\nissuer = \"{}\"\n\n[timeouts]\nconfirmation_secs = 20\n",
        idp.issuer
    );
    let (server, resource) = serve(ws.path(), &config, &[]);
    let alice = format!("Bearer {}", idp.token("test-client", "alice", &resource));
    let bob = format!("Bearer {}", idp.token("test-client", "bob", &resource));
    let bobs_events = follow_events_with(&server.addr, &[("Authorization", bob.as_str())]);
    std::thread::sleep(Duration::from_millis(200));
    let write = |who: &str| {
        let started = std::time::Instant::now();
        let done = post_stateless_with(
            &server.addr,
            &[("Authorization", who)],
            &stateless(
                1,
                "tools/call",
                json!({"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}),
                false,
            ),
        )
        .json();
        (done, started.elapsed())
    };
    let (hers, took) = write(&alice);
    let text = hers["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(hers["result"]["isError"], true, "{hers}");
    assert!(text.contains("prompt_fallback"), "{text}");
    assert!(
        took < Duration::from_secs(10),
        "alice's call waited {took:?} for bob's console"
    );
    assert!(!ws.path().join("a.txt").exists());
    // Bob's own call that nobody else can be asked about waits for his console.
    let (addr, authorization) = (server.addr.clone(), bob.clone());
    let his = std::thread::spawn(move || {
        post_stateless_with(
            &addr,
            &[("Authorization", authorization.as_str())],
            &stateless(
                2,
                "tools/call",
                json!({"name": "write_file", "arguments": {"path": "b.txt", "content": "his"}}),
                false,
            ),
        )
    });
    let requested = wait_event(&bobs_events, "tool.confirmation_requested");
    let id = requested["request_id"].as_str().unwrap().to_string();
    let answered = request(
        &server.addr,
        "POST",
        &format!("/v1/confirmations/{id}"),
        &[
            ("Content-Type", "application/json"),
            ("Authorization", bob.as_str()),
        ],
        br#"{"decision":"allow"}"#,
    );
    assert_eq!(answered.status, 200);
    assert_eq!(his.join().unwrap().json()["result"]["isError"], false);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("b.txt")).unwrap(),
        "his"
    );
}

/// A toolhost to mount: it takes OAuth tokens for itself only (and `service`, a static
/// token, when given), audits its calls, and its README reads "# upstream".
fn mounted_toolhost(idp: &Idp, service: Option<&str>) -> (tempfile::TempDir, Server, String) {
    let ws = workspace();
    std::fs::write(ws.path().join("README.md"), "# upstream\n").unwrap();
    let config = format!(
        "[http.auth]\nissuer = \"{}\"\nscopes_supported = [\"mcp\"]\n\n[audit]\npath = \"audit.jsonl\"\nsync = true\n",
        idp.issuer
    );
    let mut extra = Vec::new();
    if let Some(service) = service {
        std::fs::write(ws.path().join("tokens"), service).unwrap();
        extra = vec!["--token-file", "tokens"];
    }
    let (server, resource) = serve(ws.path(), &config, &extra);
    (ws, server, resource)
}

/// The last record of the audit log in `ws`.
fn last_audited(ws: &Path) -> Value {
    let audit = std::fs::read_to_string(ws.join("audit.jsonl")).unwrap();
    serde_json::from_str(audit.lines().last().unwrap()).unwrap()
}

#[test]
fn a_mounted_server_gets_a_token_exchanged_for_the_caller_never_the_callers_own() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    // The mounted server: another toolhost taking tokens for itself only, and a service
    // token the gateway lists its tools with.
    let service = "service-token-for-listing-0123456789";
    let (up_ws, upstream, up_resource) = mounted_toolhost(&idp, Some(service));
    let gateway = |credentials: &str| {
        let ws = workspace();
        let config = format!(
            "[http.auth]\nissuer = \"{issuer}\"\n\n[http.auth.client]\nid = \"toolhost\"\nsecret_env = \"TEST_CLIENT_SECRET\"\n\n\
             [[mcp_servers]]\nid = \"up\"\nprefix = \"up\"\nurl = \"{up_resource}\"\nbearer_token_env = \"UP_SERVICE_TOKEN\"\ncredentials = \"{credentials}\"\n",
            issuer = idp.issuer
        );
        std::fs::write(ws.path().join("toolhost.toml"), &config).unwrap();
        let mut cmd = command(
            ws.path(),
            &[
                "--config",
                "toolhost.toml",
                "serve",
                "--http",
                "127.0.0.1:0",
            ],
        );
        cmd.env("TEST_CLIENT_SECRET", "toolhost-secret-0123456789")
            .env("UP_SERVICE_TOKEN", service);
        let server = start(cmd);
        let resource = format!("http://{}/mcp", server.addr);
        (ws, server, resource)
    };
    let (_ws, front, front_resource) = gateway("exchange");
    let alice = idp.token("test-client", "alice", &front_resource);
    let read = call(
        &front,
        &alice,
        1,
        "tools/call",
        json!({"name": "up__read_file", "arguments": {"path": "README.md"}}),
    );
    let result = &read.json()["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["content"][0]["text"], "# upstream\n");
    // The mounted server saw alice, through a token for itself: it takes no other.
    let record = last_audited(up_ws.path());
    assert_eq!(
        record["principal"],
        format!("{}#alice", idp.issuer),
        "{record}"
    );
    let up_log = upstream.log.lock().unwrap().join("\n");
    assert!(
        !up_log.contains(&alice),
        "the caller's own token reached the mounted server"
    );

    // Passed on as it is, alice's token is refused before it leaves: it is not for the
    // mounted server.
    let (_ws, passing, passing_resource) = gateway("caller");
    let alice = idp.token("test-client", "alice", &passing_resource);
    let refused = call(
        &passing,
        &alice,
        2,
        "tools/call",
        json!({"name": "up__read_file", "arguments": {"path": "README.md"}}),
    );
    let result = &refused.json()["result"];
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("not for it") && text.contains("credentials = \"exchange\""),
        "{text}"
    );
}

#[test]
fn toolhost_logs_in_to_a_remote_server_that_requires_oauth_and_calls_with_that_login() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let (up_ws, _upstream, up_resource) = mounted_toolhost(&idp, None);
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        format!(
            "[[mcp_servers]]\nid = \"remote\"\nprefix = \"remote\"\nurl = \"{up_resource}\"\ncredentials = \"login\"\n"
        ),
    )
    .unwrap();
    let read = |ws: &Path| {
        command(
            ws,
            &[
                "call",
                "remote__read_file",
                "--input",
                r#"{"path":"README.md"}"#,
                "--json",
            ],
        )
        .stdin(Stdio::null())
        .output()
        .unwrap()
    };
    // Before a login, the server's entry says what to run.
    let before = read(ws.path());
    let said = String::from_utf8_lossy(&before.stderr).to_string()
        + &String::from_utf8_lossy(&before.stdout);
    assert!(said.contains("toolhost mcp login remote"), "{said}");

    let mut login = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["mcp", "login", "remote"])
        .current_dir(ws.path())
        .env("XDG_CONFIG_HOME", ws.path().join(".no-config"))
        .env("XDG_STATE_HOME", ws.path().join(".state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(login.stderr.take().unwrap());
    let mut url = String::new();
    while !url.starts_with("http") {
        url.clear();
        assert!(
            stderr.read_line(&mut url).unwrap() > 0,
            "no URL to open was printed"
        );
    }
    let query: Vec<(String, String)> = url
        .trim()
        .split_once('?')
        .unwrap()
        .1
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let param = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(param("code_challenge_method"), Some("S256"));
    assert!(
        param("resource").is_some_and(|r| r.contains("mcp")),
        "{url}"
    );
    let browser = idp.client(&["follow", url.trim(), "alice"]);
    assert_eq!(browser["status"], 200, "{browser}");
    let out = login.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let kept = ws.path().join(".state/toolhost/mcp-logins.json");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let after = read(ws.path());
    let block: Value = serde_json::from_slice(&after.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&after.stderr)));
    assert_eq!(block["content"][0]["text"], "# upstream\n", "{block}");
    let record = last_audited(up_ws.path());
    assert_eq!(
        record["principal"],
        format!("{}#alice", idp.issuer),
        "{record}"
    );
}

#[test]
fn the_console_logs_in_at_the_identity_provider_and_answers_only_its_users_calls() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    let config = format!(
        "[http.auth]\nissuer = \"{}\"\nscopes_supported = [\"mcp\"]\n\n[http.auth.console]\nclient_id = \"toolhost-console\"\n\n[[access]]\ngroups = [\"dev\", \"ops\"]\n",
        idp.issuer
    );
    let (server, resource) = serve(ws.path(), &config, &[]);
    let Some(browser) = Browser::start() else {
        return;
    };
    browser.open(&format!("http://{}/", server.addr));
    browser.click("#login:not([hidden])");
    // The identity provider's own login page.
    let user = browser.wait_for("input[name=login]");
    browser.type_into(&user, "alice");
    let password = browser.wait_for("input[name=password]");
    browser.type_into(&password, "alice");
    browser.click("button[type=submit]");
    // A public client's login asks its user to confirm (oidc-provider's consent page).
    let console = format!("http://{}/", server.addr);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while browser.command("GET", "/url", json!({})).as_str() != Some(console.as_str()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the login never came back to the console"
        );
        if browser.count("form button[type=submit]") > 0 {
            // The page may move on between finding and clicking: the loop looks again.
            let _ = browser.try_click(&browser.wait_for("form button[type=submit]"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    browser.wait_for("#status.live");
    // Both users' writes wait for a console; alice's console shows hers alone.
    let write = |user: &str| {
        let (addr, bearer) = (
            server.addr.clone(),
            format!("Bearer {}", idp.token("test-client", user, &resource)),
        );
        let arguments = json!({"path": format!("{user}.txt"), "content": user});
        std::thread::spawn(move || {
            post_stateless_with(
                &addr,
                &[("Authorization", bearer.as_str())],
                &stateless(
                    1,
                    "tools/call",
                    json!({"name": "write_file", "arguments": arguments}),
                    false,
                ),
            )
        })
    };
    let alices = write("alice");
    let _bobs = write("bob");
    browser.wait_for("[data-request-id] button.allow");
    // Bob's call waits too by now (each is listed a moment after its event).
    std::thread::sleep(Duration::from_millis(1500));
    let listed = browser.count("[data-request-id]");
    assert_eq!(listed, 1, "the console showed another user's call");
    let shown = browser.text(&browser.wait_for("[data-request-id]"));
    assert!(
        shown.contains("alice.txt") && !shown.contains("bob.txt"),
        "{shown}"
    );
    browser.click("[data-request-id] button.allow");
    let done = alices.join().unwrap();
    assert_eq!(done.json()["result"]["isError"], false, "{done:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("alice.txt")).unwrap(),
        "alice"
    );
    assert!(!ws.path().join("bob.txt").exists());
}

#[test]
fn a_stdio_server_gets_a_process_per_caller_holding_a_token_exchanged_for_that_caller() {
    let Some((idp, config)) = per_caller_everything("") else {
        return;
    };
    let ws = workspace();
    let (server, resource) = serve(ws.path(), &config, &[]);
    let env_of = |user: &str| -> (String, Value) {
        let token = idp.token("test-client", user, &resource);
        let r = call(
            &server,
            &token,
            1,
            "tools/call",
            json!({"name": "ev__get-env", "arguments": {}}),
        );
        let result = &r.json()["result"];
        assert_eq!(result["isError"], false, "{result}");
        let env: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        let given = env["UPSTREAM_TOKEN"]
            .as_str()
            .unwrap_or_else(|| panic!("no token in {env}"))
            .to_string();
        let claims: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(given.split('.').nth(1).unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_ne!(given, token, "the caller's own token reached the server");
        (given, claims)
    };
    let (alices, claims) = env_of("alice");
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["aud"], "https://stdio.example/mcp");
    assert_eq!(claims["act"]["sub"], "toolhost", "{claims}");
    let (bobs, claims) = env_of("bob");
    assert_eq!(claims["sub"], "bob", "bob's calls reached alice's process");
    assert_ne!(alices, bobs);
}

/// An identity provider, and a configuration mounting server-everything over stdio with a
/// process per caller holding a token exchanged for that caller; `extra` is added to its
/// entry. `None` when the run lacks the peers.
fn per_caller_everything(extra: &str) -> Option<(Idp, String)> {
    let (Some(idp), Some(everything)) =
        (Idp::start(0, "k1"), peer("TOOLHOST_TEST_SERVER_EVERYTHING"))
    else {
        return None;
    };
    let node = peer("TOOLHOST_TEST_NODE").unwrap();
    let modules = everything.ancestors().nth(4).unwrap().to_path_buf();
    // The tests read the token a server process was given from `get-env`'s result: a tool
    // that returns a secret by design, so its results are not redacted.
    let config = format!(
        "[http.auth]\nissuer = \"{issuer}\"\n\n[http.auth.client]\nid = \"toolhost\"\nsecret_env = \"TEST_CLIENT_SECRET\"\n\n\
         [secrets.per_tool]\n\"ev__get-env\" = \"off\"\n\n\
         [[mcp_servers]]\nid = \"ev\"\nprefix = \"ev\"\ncommand = \"{node}\"\nargs = [\"{everything}\", \"stdio\"]\nreadable_roots = [\"{modules}\"]\n\
         credentials = \"exchange\"\ntoken_env = \"UPSTREAM_TOKEN\"\naudience = \"https://stdio.example/mcp\"\n{extra}",
        issuer = idp.issuer,
        node = node.display(),
        everything = everything.display(),
        modules = modules.display(),
    );
    Some((idp, config))
}

/// The live child processes of `server`: the mounted server's own (which lists its tools)
/// and its callers'.
fn live_children(server: &Server) -> usize {
    toolhost_tests::children_of(server.child.id())
        .into_iter()
        .filter(|pid| toolhost_tests::process_alive(*pid))
        .count()
}

/// Waits up to 10 s for `server` to have `n` live children; how many it has then.
fn children_become(server: &Server, n: usize) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = live_children(server);
        if now == n || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn past_max_callers_the_longest_idle_callers_process_is_closed_and_a_full_house_refuses_naming_the_key()
 {
    let Some((idp, config)) = per_caller_everything("max_callers = 1\n") else {
        return;
    };
    let ws = workspace();
    let (server, resource) = serve(ws.path(), &config, &[]);
    let base = live_children(&server);
    let token_of = |user: &str| idp.token("test-client", user, &resource);
    let (alice, bob) = (token_of("alice"), token_of("bob"));
    let get_env = |token: &str| {
        call(
            &server,
            token,
            1,
            "tools/call",
            json!({"name": "ev__get-env", "arguments": {}}),
        )
        .json()
    };
    assert_eq!(get_env(&alice)["result"]["isError"], false);
    assert_eq!(
        children_become(&server, base + 1),
        base + 1,
        "alice's process"
    );
    // Alice's process is busy with a call of 3 s: bob, a second caller past max_callers = 1,
    // is refused, and told which key allows more.
    let long = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            call(
                &server,
                &alice,
                2,
                "tools/call",
                json!({"name": "ev__trigger-long-running-operation", "arguments": {"duration": 3, "steps": 3}}),
            )
            .json()
        });
        std::thread::sleep(Duration::from_millis(1000));
        let refused = get_env(&bob);
        let text = refused["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(refused["result"]["isError"], true, "{refused}");
        assert!(
            text.contains("max_callers") && text.contains("each has a call in flight"),
            "{text}"
        );
        running.join().unwrap()
    });
    assert_eq!(long["result"]["isError"], false, "{long}");
    // Once alice's call ended, her process is the one idle the longest: bob's first call
    // closes it and gets a process of his own, and so on.
    assert_eq!(get_env(&bob)["result"]["isError"], false);
    assert_eq!(
        children_become(&server, base + 1),
        base + 1,
        "only bob's process"
    );
    assert_eq!(get_env(&alice)["result"]["isError"], false);
    assert_eq!(
        children_become(&server, base + 1),
        base + 1,
        "only alice's process"
    );
}

#[test]
fn a_callers_process_with_no_call_for_caller_idle_timeout_secs_is_closed_and_opened_again_at_its_next_call()
 {
    let Some((idp, config)) = per_caller_everything("caller_idle_timeout_secs = 1\n") else {
        return;
    };
    let ws = workspace();
    let (server, resource) = serve(ws.path(), &config, &[]);
    let base = live_children(&server);
    let alice = idp.token("test-client", "alice", &resource);
    let get_env = || {
        call(
            &server,
            &alice,
            1,
            "tools/call",
            json!({"name": "ev__get-env", "arguments": {}}),
        )
        .json()
    };
    assert_eq!(get_env()["result"]["isError"], false);
    assert_eq!(live_children(&server), base + 1, "alice's process");
    assert_eq!(
        children_become(&server, base),
        base,
        "closed after 1 s without a call"
    );
    assert_eq!(get_env()["result"]["isError"], false, "opened again");
    assert_eq!(live_children(&server), base + 1);
}

#[test]
fn max_callers_of_zero_is_refused_naming_the_key() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("toolhost.toml"),
        "[[mcp_servers]]\nid = \"ev\"\nprefix = \"ev\"\ncommand = \"x\"\nmax_callers = 0\n",
    )
    .unwrap();
    let out = command(ws.path(), &["--config", "toolhost.toml", "list"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("max_callers must be at least 1"), "{err}");
}

#[test]
fn a_2025_session_is_its_openers_and_another_caller_presenting_its_id_is_refused() {
    let Some(idp) = Idp::start(0, "k1") else {
        return;
    };
    let ws = workspace();
    let (server, resource) = serve(ws.path(), &team_config(&idp.issuer, ""), &[]);
    let alice = format!("Bearer {}", idp.token("test-client", "alice", &resource));
    let bob = format!("Bearer {}", idp.token("test-client", "bob", &resource));
    let session = legacy_session_with(&server.addr, &[("Authorization", alice.as_str())], false);
    let read = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "README.md"}}});
    let in_session = |who: &str| {
        post_mcp(
            &server.addr,
            &[
                ("Authorization", who),
                ("Mcp-Session-Id", session.as_str()),
                ("MCP-Protocol-Version", "2025-11-25"),
            ],
            &read,
        )
    };
    let hers = in_session(&alice).json();
    assert_eq!(hers["result"]["isError"], false, "{hers}");
    let his = in_session(&bob).json();
    let message = his["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("opened by another caller"), "{his}");
}
