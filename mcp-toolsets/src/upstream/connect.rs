//! Starting a server (in its sandbox) or reaching it over HTTP, up to its first
//! listing of tools.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};

use rmcp::service::ServiceExt;

use super::{Upstream, waited};
use crate::config::{NESTING_ENV, nesting};
use crate::confine;
use crate::error::UpstreamError;
use crate::upstream::client::{Live, ProgressFirst, listed, listen_for_changes};
use crate::upstream::http_client::install_tls_provider;

/// An access token from toolhost's login to the server (`toolhost mcp login ID`), kept
/// outside every workspace; a rotated refresh token is kept in its place.
async fn logged_in(c: &crate::config::McpServerConfig) -> Result<String, String> {
    let logins = crate::pins::state_file(crate::pins::LOGINS_FILE)
        .map(oauth::logins::Logins::new)
        .ok_or("neither XDG_STATE_HOME nor HOME is set, so no login can be kept")?;
    let key = c.pin_key();
    let login = logins.get(&key)?.ok_or_else(|| {
        format!(
            "it takes toolhost's own login (credentials = \"login\") and none is kept: run `toolhost mcp login {}`",
            c.id
        )
    })?;
    let (access, rotated) = login.refresh().await.map_err(|e| {
        format!(
            "its login could not be refreshed ({e}): run `toolhost mcp login {}` again",
            c.id
        )
    })?;
    if let Some(rotated) = rotated {
        logins.put(&key, rotated)?;
    }
    Ok(access.token)
}

impl Upstream {
    /// Starts (or reaches) the server and lists its tools. A change it announced while
    /// starting, which its first listing may predate, is listed again before it counts
    /// as up, so the host publishes what the server has now.
    pub(super) async fn connect(&self, me: Weak<Upstream>) -> Result<Live, UpstreamError> {
        let changes = self.list_changes.load(Ordering::Acquire);
        let live = match self.config.url.clone() {
            Some(url) => self.connect_http(&url, me).await,
            None => self.connect_child(me).await,
        }?;
        *self
            .version
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            live.service.peer().peer_info().and_then(|i| {
                i.server_info
                    .as_ref()
                    .map(|s| Arc::from(s.version.as_str()))
            });
        if self.list_changes.load(Ordering::Acquire) != changes {
            match live.service.peer().list_all_tools().await {
                Ok(tools) => self.keep_tools(tools),
                Err(e) => {
                    tracing::warn!(server = %self.config.id, "re-listing tools after a change announced at start failed: {e}")
                }
            }
        }
        Ok(live)
    }

    /// Reaches the server over streamable HTTP: `server/discover` first (2026-07-28), then
    /// `initialize` for a server that does not know it.
    async fn connect_http(&self, url: &str, me: Weak<Upstream>) -> Result<Live, UpstreamError> {
        use rmcp::ClientServiceExt as _;
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let c = &self.config;
        install_tls_provider();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        if let Some(token) = &c.caller_token {
            config.auth_header = Some(token.0.clone());
        } else if c.credentials == crate::config::Credentials::Login {
            config.auth_header =
                Some(
                    logged_in(c)
                        .await
                        .map_err(|detail| UpstreamError::Initialize {
                            id: c.id.clone(),
                            detail,
                        })?,
                );
        } else if let Some(var) = &c.bearer_token_env {
            let token = std::env::var(var).map_err(|_| UpstreamError::Initialize {
                id: c.id.clone(),
                detail: format!(
                    "bearer_token_env names {var}, which is not set in toolhost's environment"
                ),
            })?;
            config.auth_header = Some(token);
        }
        let client = self.client_side(me);
        let bearer = config.auth_header.clone();
        let session = Arc::new(super::posting::Session::default());
        let watched = super::posting::Watched {
            client: super::http_client::http_client(),
            session: session.clone(),
        };
        let (to_connection, read_elsewhere) = tokio::sync::mpsc::unbounded_channel();
        let transport = ProgressFirst {
            inner: StreamableHttpClientTransport::with_client(watched, config),
            calls: client.calls.clone(),
            read_elsewhere: Some(read_elsewhere),
        };
        let init = async {
            let service = client
                .clone()
                .serve_with_lifecycle(
                    transport,
                    rmcp::ClientLifecycleMode::Auto {
                        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
                        legacy_version: Some(rmcp::model::ProtocolVersion::V_2025_11_25),
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
            listed(service).await
        };
        match tokio::time::timeout(c.startup_timeout(), init).await {
            Ok(Ok((service, tools))) => {
                self.keep_tools(tools);
                tracing::info!(server = %c.id, url, "MCP server reached over HTTP");
                let listen = listen_for_changes(&service, &client, c.startup_timeout()).await;
                let posts = service.peer().peer_info().and_then(|info| {
                    let own = rmcp::ClientHandler::get_info(&client);
                    super::posting::Posts::new(super::posting::Setup {
                        url,
                        bearer: bearer.as_deref(),
                        session,
                        version: &info.protocol_version,
                        client: own.client_info,
                        capabilities: own.capabilities,
                        to_connection,
                    })
                });
                Ok(Live {
                    service,
                    child: None,
                    direct: None,
                    posts: posts.map(Arc::new),
                    listen,
                    stderr: None,
                    _tmp: None,
                    _egress: None,
                })
            }
            Ok(Err(detail)) => Err(UpstreamError::Initialize {
                id: c.id.clone(),
                detail: format!("{detail} (at {url})"),
            }),
            Err(_) => Err(UpstreamError::StartupTimeout {
                id: c.id.clone(),
                timeout: c.startup_timeout,
                detail: String::new(),
            }),
        }
    }

    /// The server's command: its arguments, its environment (the sandbox's, its entry's,
    /// a caller's token in its own process), its pipes, its temporary folder and proxy.
    fn command(
        &self,
        env: Vec<(String, String)>,
        confined: &confine::Confined,
    ) -> tokio::process::Command {
        let c = &self.config;
        let mut cmd = tokio::process::Command::new(&c.command);
        self.sandbox.settings.env.apply(cmd.as_std_mut());
        if let (Some(token), Some(var)) = (&c.caller_token, &c.token_env) {
            // This caller's own process: its token, and no other's.
            cmd.env(var, &token.0);
        }
        cmd.args(&c.args)
            .envs(env)
            .env(NESTING_ENV, (nesting() + 1).to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(cwd) = &c.cwd {
            cmd.current_dir(cwd);
        }
        if let Some(tmp) = &confined.tmp {
            cmd.env("TMPDIR", tmp.path());
        }
        if confined.grant.is_some_and(|g| g.network) {
            cmd.envs(sandbox::egress::proxy_env());
        }
        cmd
    }

    async fn connect_child(&self, me: Weak<Upstream>) -> Result<Live, UpstreamError> {
        let c = &self.config;
        let env = c.environment().map_err(|detail| UpstreamError::Spawn {
            id: c.id.clone(),
            command: c.command.clone(),
            detail,
        })?;
        let mut confined = confine::confine(c, &self.sandbox)?;
        let mut cmd = self.command(env, &confined);
        let attached = match confined.prepared.take() {
            Some(prepared) => {
                Some(
                    prepared
                        .attach(cmd.as_std_mut())
                        .map_err(|e| UpstreamError::Sandbox {
                            id: c.id.clone(),
                            mode: confined.label.clone(),
                            detail: format!("could not be prepared: {e}"),
                        })?,
                )
            }
            None => None,
        };
        let mut child = cmd.spawn().map_err(|e| UpstreamError::Spawn {
            id: c.id.clone(),
            command: c.command.clone(),
            detail: if e.kind() == std::io::ErrorKind::PermissionDenied && confined.tmp.is_some()
            {
                format!(
                    "{e}: under its sandbox ({}) it runs any program but those the deny list hides; if the program lies under a hidden path, re-open it with `allow_read` on its [[mcp_servers]] entry",
                    confined.label
                )
            } else {
                e.to_string()
            },
        })?;
        let egress = match attached {
            Some(attached) => {
                let id = c.id.clone();
                let log: sandbox::egress::OnRefusal = Arc::new(move |refusal| {
                    tracing::warn!(server = %id, "{refusal}");
                });
                attached
                    .serve(self.sandbox.rules(&c.id), Some(log))
                    .map_err(|e| UpstreamError::Spawn {
                        id: c.id.clone(),
                        command: c.command.clone(),
                        detail: format!("its egress proxy could not start: {e}"),
                    })?
            }
            None => None,
        };
        let stderr = child
            .stderr
            .take()
            .map(|err| Arc::new(super::stderr::log_stderr(&c.id, err)));
        *self.confined.lock().unwrap_or_else(PoisonError::into_inner) = confined.label.clone();
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(UpstreamError::Spawn {
                id: c.id.clone(),
                command: c.command.clone(),
                detail: "no stdio pipes".into(),
            });
        };
        let child = Arc::new(tokio::sync::Mutex::new(child));
        let client = self.client_side(me);
        let init = async {
            let transport = super::lines::Lines::new(stdout, stdin, client.calls.clone(), &c.id);
            let direct = transport.direct();
            let service = client.serve(transport).await.map_err(|e| e.to_string())?;
            listed(service)
                .await
                .map(|(service, tools)| (service, tools, direct))
        };
        // What the sandbox denied it, from its error output and its proxy, for a failure.
        let explain = |confined: &confine::Confined, egress: Option<&sandbox::egress::Egress>| {
            let tail = stderr.as_ref().map(|t| t.text()).unwrap_or_default();
            let denied = confined.denials(&self.sandbox, &c.id, &tail, egress);
            let mut detail = String::new();
            if !tail.trim().is_empty() {
                detail.push_str("; its error output ended with:\n");
                detail.push_str(tail.trim_end());
            }
            if denied.is_empty() {
                detail.push_str(&confined.what_widens_it(self.sandbox.settings.network.enabled));
            }
            for d in denied {
                detail.push_str("\nsandbox: ");
                detail.push_str(&d);
            }
            detail
        };
        match tokio::time::timeout(c.startup_timeout(), init).await {
            Ok(Ok((service, tools, direct))) => {
                self.keep_tools(tools);
                if let Some(stderr) = &stderr {
                    stderr.started();
                }
                tracing::info!(server = %c.id, "MCP server started");
                // Started with `initialize` (2025 era): it notifies on the connection.
                Ok(Live {
                    service,
                    child: Some(child),
                    direct: Some(direct),
                    posts: None,
                    listen: None,
                    stderr,
                    _tmp: confined.tmp,
                    _egress: egress,
                })
            }
            Ok(Err(detail)) => {
                let detail = match waited(&child).await {
                    // The transport's error (a broken pipe) says less than the exit does.
                    Ok(Some(status)) => {
                        if let Some(t) = &stderr {
                            t.drained().await;
                        }
                        format!(
                            "the server exited ({status}) before it answered `initialize`{}",
                            explain(&confined, egress.as_ref())
                        )
                    }
                    Ok(None) => format!("{detail} (process: still running but not answering)"),
                    Err(e) => format!("{detail} (process: unknown exit status: {e})"),
                };
                let _ = child.lock().await.kill().await;
                Err(UpstreamError::Initialize {
                    id: c.id.clone(),
                    detail,
                })
            }
            Err(_) => {
                let _ = child.lock().await.kill().await;
                let detail = explain(&confined, egress.as_ref());
                Err(UpstreamError::StartupTimeout {
                    id: c.id.clone(),
                    timeout: c.startup_timeout,
                    detail,
                })
            }
        }
    }
}
