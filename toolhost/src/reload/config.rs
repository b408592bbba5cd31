//! The configuration file read again under a running server, and what of it applies now.

use std::sync::{Arc, PoisonError};

use crate::config::Config;

use super::Reloader;

/// The settings a running server cannot take: the key, and whether it changed.
fn needing_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut keys = Vec::new();
    let mut check = |key: &'static str, changed: bool| {
        if changed {
            keys.push(key);
        }
    };
    check("[store]", old.store != new.store);
    check("[http]", old.http != new.http);
    check("[audit]", old.audit != new.audit);
    check("[remote]", old.remote != new.remote);
    check("[hooks]", old.hooks != new.hooks);
    check("capabilities", old.capabilities != new.capabilities);
    check(
        "toolset_separator",
        old.toolset_separator != new.toolset_separator,
    );
    // Discovery applies at once (below); the rest of [mcp] at the next start.
    let without_discovery = |c: &Config| crate::config::McpConfig {
        discovery: mcp_server::Discovery::default(),
        ..c.mcp.clone()
    };
    check("[mcp]", without_discovery(old) != without_discovery(new));
    keys
}

/// Whether the packages load differently: they are loaded again.
fn plugins_changed(old: &Config, new: &Config) -> bool {
    old.plugin_dirs != new.plugin_dirs
        || old.plugin_isolation != new.plugin_isolation
        || old.plugins != new.plugins
        || old.plugin_memory_limit_mib != new.plugin_memory_limit_mib
        || old.wasm_memory_limit_mib != new.wasm_memory_limit_mib
        || old.trusted_keys != new.trusted_keys
        || old.require_signatures != new.require_signatures
        || old.sandbox != new.sandbox
        || old.timeouts.cancel_grace != new.timeouts.cancel_grace
}

impl Reloader {
    /// Reads the configuration file again and applies what changed. A file that does not
    /// load changes nothing.
    pub(crate) async fn reload_config(self: &Arc<Self>) {
        let new = match Config::load(&self.file) {
            Ok(new) => new,
            Err(e) => {
                tracing::error!(target: "toolhost::reload",
                    "{} not reloaded: {e}; the running configuration stays", self.file.display());
                return;
            }
        };
        let old = self.config();
        if new == old {
            // The policy files may have changed under an unchanged config.
            if !new.policies.files.is_empty() {
                self.reload_policies(&new);
            }
            tracing::debug!(target: "toolhost::reload", "{}: nothing else changed", self.file.display());
            return;
        }
        let restart = needing_restart(&old, &new);
        if !restart.is_empty() {
            tracing::warn!(target: "toolhost::reload",
                "{}: {} changed; restart toolhost to apply {} (the rest of the file applies now)",
                self.file.display(), restart.join(", "),
                if restart.len() == 1 { "it" } else { "them" });
        }
        {
            let _one = self.busy.lock().await;
            let mut applied = crate::host::dispatcher_config(&new);
            applied.toolset_separator = self.dispatcher.config().toolset_separator.clone();
            if let Err(e) = self
                .dispatcher
                .reconfigure(applied, new.tool_confirmation.clone())
            {
                tracing::error!(target: "toolhost::reload", "{}: {e}", self.file.display());
            }
            if old.access != new.access {
                let sessions = self.access.replace(new.access.clone(), &self.dispatcher);
                tracing::info!(target: "toolhost::reload", sessions, "access rules replaced");
            }
            if old.mcp.discovery.model != new.mcp.discovery.model {
                // Reading 90 MB of weights is no work for a runtime worker.
                let (model, file) = (new.mcp.discovery.model.clone(), self.file.clone());
                let dispatcher = self.dispatcher.clone();
                let load = move || crate::text_model::apply(model.as_deref(), &file, &dispatcher);
                match tokio::task::spawn_blocking(load).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::error!(target: "toolhost::reload", "{}; the model loaded before is kept", e.0)
                    }
                    Err(e) => {
                        tracing::error!(target: "toolhost::reload", "[mcp.discovery] model not loaded: {e}")
                    }
                }
            }
            if old.mcp.discovery != new.mcp.discovery
                && let Some(shared) = self.shared.get()
            {
                shared.set_discovery(new.mcp.discovery.clone());
                tracing::info!(target: "toolhost::reload", "[mcp.discovery] replaced");
            }
            let servers_changed = old.mcp_servers != new.mcp_servers || old.sandbox != new.sandbox;
            *self.config.lock().unwrap_or_else(PoisonError::into_inner) = new.clone();
            if servers_changed {
                self.reload_servers(&old, &new).await;
            }
        }
        if plugins_changed(&old, &new) {
            self.rescan_plugins(true).await;
        }
        // Checked against the tools as they are now that servers and plugins reloaded.
        if !(old.policies.files.is_empty() && new.policies.files.is_empty()) {
            self.reload_policies(&new);
        }
        tracing::info!(target: "toolhost::reload", "{} reloaded", self.file.display());
    }

    /// Reads the policies again: a set that does not load leaves the running one in force.
    fn reload_policies(&self, config: &Config) {
        match crate::policy_files::apply(config, &self.file, &self.dispatcher) {
            Ok(()) => tracing::info!(target: "toolhost::reload", "[policies] reloaded"),
            Err(e) => tracing::error!(target: "toolhost::reload",
                "[policies] not reloaded, the running policies stay: {e}"),
        }
    }

    /// Stops the servers removed or changed (a server's sandbox settings included), starts
    /// the changed and the added ones; an unchanged server keeps running.
    async fn reload_servers(&self, old: &Config, new: &Config) {
        let mut servers = self.servers.lock().await;
        let unchanged = |id: &str| {
            old.sandbox == new.sandbox
                && old.mcp_servers.iter().find(|s| s.id == id)
                    == new.mcp_servers.iter().find(|s| s.id == id)
        };
        let mut kept = Vec::new();
        for (id, running) in servers.drain(..) {
            if unchanged(&id) {
                kept.push((id, running));
                continue;
            }
            if let Ok(ts) = &running {
                self.dispatcher.unregister_toolset(&id);
                dispatcher_core::Toolset::stop(ts.as_ref());
            }
            let how = if new.mcp_servers.iter().any(|s| s.id == id) {
                "stopped to start again: its entry changed"
            } else {
                "removed"
            };
            tracing::info!(target: "toolhost::reload", server = %id, "MCP server {how}");
        }
        let to_start: Vec<mcp_toolsets::McpServerConfig> = new
            .mcp_servers
            .iter()
            .filter(|s| !kept.iter().any(|(id, _)| *id == s.id))
            .cloned()
            .collect();
        let started = crate::host::start_servers(new, &self.file, &self.workspace, &to_start).await;
        for (server, result) in to_start.iter().zip(started) {
            let result = result.and_then(|ts| crate::host::register_server(&self.dispatcher, ts));
            match &result {
                Ok(_) => {
                    tracing::info!(target: "toolhost::reload", server = %server.id, "MCP server started")
                }
                Err(e) => {
                    tracing::warn!(target: "toolhost::reload", server = %server.id, "MCP server not loaded: {e}")
                }
            }
            kept.push((server.id.clone(), result));
        }
        // In the order of the file.
        kept.sort_by_key(|(id, _)| new.mcp_servers.iter().position(|s| s.id == *id));
        // Their prompts and resources pass through as their tools do.
        if let Some(shared) = self.shared.get() {
            shared.upstreams.replace(crate::host::started(&kept)).await;
        }
        *servers = kept;
    }
}
