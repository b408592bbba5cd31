//! The `[remote]` table: another toolhost that runs the calls of the tools routed to it
//! (`[sandbox.per_tool] NAME = "remote"`, the spec's `Remote` grant).
//!
//! ```toml
//! [remote]
//! url = "https://runner.internal:8765/mcp"   # its MCP endpoint (toolhost serve --http)
//! bearer_token_env = "TOOLHOST_REMOTE_TOKEN"  # the variable holding the token it accepts
//! startup_timeout_secs = 10
//! ```

use dispatcher_core::Seconds;
use serde::Deserialize;

/// The `[remote]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Remote {
    /// Its MCP endpoint.
    #[serde(deserialize_with = "http_url")]
    pub url: String,
    /// The environment variable holding the bearer token it accepts (the token itself is
    /// never written in the file).
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// How long connecting to it may take (default 10 s).
    #[serde(default = "default_startup", rename = "startup_timeout_secs")]
    pub startup_timeout: Seconds,
}

fn default_startup() -> Seconds {
    Seconds(mcp_toolsets::DEFAULT_STARTUP_TIMEOUT)
}

fn http_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let url = String::deserialize(d)?;
    let ok = url
        .parse::<http::Uri>()
        .is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
    if ok {
        Ok(url)
    } else {
        Err(serde::de::Error::custom(format!(
            "expected the http:// or https:// URL of another toolhost's MCP endpoint (e.g. http://runner:8765/mcp), found {url:?}"
        )))
    }
}
