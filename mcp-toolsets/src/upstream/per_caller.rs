//! A server whose entry takes its caller's credentials (`credentials = "caller"` or
//! `"exchange"`): each caller's calls go through a connection of its own that presents
//! that caller's token (passed on only when it is for the server; else one exchanged for
//! it), opened at the caller's first call and again when its token changes. A server
//! started over stdio gets a process of its own per caller, the token in its `token_env`.

use std::sync::Arc;

use tool_api::ToolError;

use super::Upstream;
use crate::callers::callers;
use crate::config::{CallerToken, Credentials};

impl Upstream {
    /// The connection a call in host session `session` goes through: this one, or (for an
    /// entry that takes its caller's credentials) that caller's own.
    pub(crate) async fn for_caller(
        self: &Arc<Self>,
        session: &str,
    ) -> Result<Arc<Upstream>, ToolError> {
        let mode = self.config.credentials;
        if matches!(mode, Credentials::Static | Credentials::Login)
            || self.config.caller_token.is_some()
        {
            return Ok(self.clone());
        }
        let id = &self.config.id;
        let caller = callers().of(session).ok_or_else(|| {
            ToolError::failed(format!(
                "MCP server '{id}' acts with its caller's own credentials (credentials = \"{}\"), and this call has none: \
                 call it through `toolhost serve --http` as a caller who logged in at the identity provider ([http.auth])",
                mode.name()
            ))
        })?;
        let audience = self.config.audience();
        let token = match mode {
            Credentials::Caller if caller.audiences.iter().any(|a| a == audience) => {
                caller.token.clone()
            }
            Credentials::Caller => {
                return Err(ToolError::failed(format!(
                    "MCP server '{id}' takes its caller's own token, and this caller's token is not for it \
                     (it is for {:?}, the server is {audience}): passing it on would hand it to a server it was not issued for; \
                     have the identity provider issue tokens for both, or set credentials = \"exchange\"",
                    caller.audiences
                )));
            }
            _ => {
                let exchange = callers().exchange().ok_or_else(|| {
                    ToolError::failed(format!(
                        "MCP server '{id}' takes a token exchanged for its caller, and this toolhost exchanges none: \
                         add [http.auth.client] (this server's client at the identity provider)"
                    ))
                })?;
                exchange.exchange(&caller.token, audience).await.map_err(|e| {
                    ToolError::failed(format!(
                        "MCP server '{id}': no token could be obtained for {audience} for this caller: {e}"
                    ))
                })?
            }
        };
        let token = CallerToken(token);
        if let Some((kept, connection)) = self.per_caller.lock().await.get(&caller.principal)
            && *kept == token
        {
            return Ok(connection.clone());
        }
        // Started without holding the map: other callers' calls go on meanwhile.
        let mut config = self.config.clone();
        config.caller_token = Some(token.clone());
        let connection = Upstream::start(config, self.sandbox.clone(), self.pins.clone())
            .await
            .map_err(|e| {
                ToolError::failed(format!(
                    "MCP server '{id}' could not be reached with this caller's credentials: {e}"
                ))
            })?;
        if let Some(relay) = self.relay.get() {
            let _ = connection.relay.set(relay.clone());
        }
        let mut own = self.per_caller.lock().await;
        // The same caller's call that started one too, first: use that one.
        if let Some((kept, first)) = own.get(&caller.principal)
            && *kept == token
        {
            let first = first.clone();
            drop(own);
            connection.stop();
            return Ok(first);
        }
        tracing::info!(server = %id, principal = %caller.principal, "connected with the caller's credentials ({})", mode.name());
        if let Some((_, old)) = own.insert(caller.principal.clone(), (token, connection.clone())) {
            old.stop();
        }
        Ok(connection)
    }
}
