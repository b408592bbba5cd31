//! Starting a server (in its sandbox) or reaching it over HTTP, up to its first
//! listing of tools.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};

use rmcp::service::ServiceExt;

use super::{Upstream, waited};
use crate::client::{Live, install_tls_provider, listed, listen_for_changes};
use crate::config::{NESTING_ENV, nesting};
use crate::confine;
use crate::error::UpstreamError;

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
        if let Some(var) = &c.bearer_token_env {
            let token = std::env::var(var).map_err(|_| UpstreamError::Initialize {
                id: c.id.clone(),
                detail: format!(
                    "bearer_token_env names {var}, which is not set in toolhost's environment"
                ),
            })?;
            config.auth_header = Some(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let client = self.client_side(me);
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
                Ok(Live {
                    service,
                    child: None,
                    listen,
                    _tmp: None,
                })
            }
            Ok(Err(detail)) => Err(UpstreamError::Initialize {
                id: c.id.clone(),
                detail: format!("{detail} (at {url})"),
            }),
            Err(_) => Err(UpstreamError::StartupTimeout {
                id: c.id.clone(),
                timeout: c.startup_timeout,
            }),
        }
    }

    async fn connect_child(&self, me: Weak<Upstream>) -> Result<Live, UpstreamError> {
        let c = &self.config;
        let confined = confine::confine(c, &self.sandbox)?;
        let mut cmd = tokio::process::Command::new(&c.command);
        cmd.args(&c.args)
            .envs(&c.env)
            .env(NESTING_ENV, (nesting() + 1).to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true);
        if let Some(cwd) = &c.cwd {
            cmd.current_dir(cwd);
        }
        if let Some(tmp) = &confined.tmp {
            cmd.env("TMPDIR", tmp.path());
        }
        if let Some(prepared) = confined.prepared {
            prepared.attach(cmd.as_std_mut());
        }
        let mut child = cmd.spawn().map_err(|e| UpstreamError::Spawn {
            id: c.id.clone(),
            command: c.command.clone(),
            detail: if e.kind() == std::io::ErrorKind::PermissionDenied && confined.tmp.is_some()
            {
                format!(
                    "{e}: under its sandbox ({}) it may run only programs in the system directories, the workspace and its readable roots; add the program's directory to `readable_roots`",
                    confined.label
                )
            } else {
                e.to_string()
            },
        })?;
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
            let service = client
                .serve((stdout, stdin))
                .await
                .map_err(|e| e.to_string())?;
            listed(service).await
        };
        match tokio::time::timeout(c.startup_timeout(), init).await {
            Ok(Ok((service, tools))) => {
                self.keep_tools(tools);
                tracing::info!(server = %c.id, "MCP server started");
                // Started with `initialize` (2025 era): it notifies on the connection.
                Ok(Live {
                    service,
                    child: Some(child),
                    listen: None,
                    _tmp: confined.tmp,
                })
            }
            Ok(Err(detail)) => {
                let detail = match waited(&child).await {
                    // The transport's error (a broken pipe) says less than the exit does.
                    Ok(Some(status)) => format!(
                        "the server exited ({status}) before it answered `initialize`; \
                         its error output, above, says why"
                    ),
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
                Err(UpstreamError::StartupTimeout {
                    id: c.id.clone(),
                    timeout: c.startup_timeout,
                })
            }
        }
    }
}
