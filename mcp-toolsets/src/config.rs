//! One `[[mcp_servers]]` entry ([`McpServerConfig`]), its defaults, and the nesting limit
//! that keeps a configuration from starting toolhost as its own server without end.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use dispatcher_core::Seconds;
use serde::Deserialize;
use tool_api::SideEffect;

/// Environment variable counting how deep this process is in a chain of toolhosts started
/// as each other's MCP servers (toolhost-in-toolhost). Children get it incremented.
pub const NESTING_ENV: &str = "TOOLHOST_NESTING";
/// A toolhost this deep starts no MCP servers: a configuration that lists toolhost as its own
/// MCP server would otherwise start copies of itself without end.
pub const MAX_NESTING: u32 = 3;

/// This process's nesting depth (0 when not started by a toolhost).
pub fn nesting() -> u32 {
    std::env::var(NESTING_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Seconds a server may take to start and initialize, unless configured.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Seconds a call may take, unless configured.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How many callers' own connections (or processes) one server keeps open at once, unless
/// configured: a team of a hundred, each with a connection of their own, and room to spare.
pub const DEFAULT_MAX_CALLERS: usize = 128;
/// How long a caller's own connection stays open with no call, unless configured.
pub const DEFAULT_CALLER_IDLE: Duration = Duration::from_secs(600);
/// How many calls to one server a session has in flight at once, unless configured: a
/// gateway's client sends a server as many as it would send the server alone (16 is
/// common), and the calls of a principal's stateless HTTP requests share one session.
pub const DEFAULT_MAX_CONCURRENCY: usize = 64;

/// One `[[mcp_servers]]` entry. Bad values are refused while it is deserialized.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Toolset id (what session allowlists and messages name).
    #[serde(deserialize_with = "dispatcher_core::non_empty")]
    pub id: String,
    /// Prefix of its published tool names ([`dispatcher_core::check_prefix`]);
    /// `""` publishes them under their own names (a transparent mount: a name another tool
    /// has is refused, naming both).
    #[serde(deserialize_with = "prefix")]
    pub prefix: String,
    /// The program to run (or `url`).
    #[serde(default)]
    pub command: String,
    /// A streamable HTTP endpoint instead of a program (`http://` or `https://`).
    #[serde(default)]
    pub url: Option<String>,
    /// With `url`: the environment variable holding a bearer token to send.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for it (a secret this one server needs, say), over the environment
    /// `[sandbox.env]` passes on (which withholds secrets by default). A value that is
    /// exactly `${NAME}` is toolhost's own variable `NAME` (so the secret stays out of the
    /// file).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory (default: toolhost's).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Time to start and initialize (default [`DEFAULT_STARTUP_TIMEOUT`]).
    #[serde(default = "default_startup", rename = "startup_timeout_secs")]
    pub startup_timeout: Seconds,
    /// How many calls to it one session has in flight at once (default
    /// [`DEFAULT_MAX_CONCURRENCY`], 1 to 1024), apart from the session's own
    /// `max_concurrency`: that bounds the calls that run in toolhost, and a server's calls
    /// run in the server, so they take no place there.
    #[serde(
        default = "default_max_concurrency",
        deserialize_with = "dispatcher_core::Limit::count"
    )]
    pub max_concurrency: usize,
    /// Time a call may take (default [`DEFAULT_CALL_TIMEOUT`]): its tools' declared
    /// timeout, which the dispatcher enforces as any tool's (a `[timeouts.per_tool]` entry
    /// wins over it; `[timeouts] max_secs` bounds it).
    #[serde(default = "default_call", rename = "call_timeout_secs")]
    pub call_timeout: Seconds,
    /// Per-tool side-effect classes; win over the server's annotations.
    #[serde(default)]
    pub side_effects: BTreeMap<String, SideEffect>,
    /// Where a stdio server runs: `host`, `read-only` or `workspace-write` (default: the
    /// host's).
    #[serde(default)]
    pub sandbox: Option<sandbox::Mode>,
    /// Whether it may open connections, and where: `true`/`false` (with the host's lists),
    /// or a table (`{ allow = [...], deny = [...] }`: its own allow list instead of the
    /// host's, its deny list besides the host's; on unless `enabled = false`). Default: the
    /// host's setting.
    #[serde(default)]
    pub network: Option<sandbox::NetworkEntry>,
    /// Paths re-opened from the deny list for it, besides the host's `allow_read`.
    #[serde(default, alias = "readable_roots")]
    pub allow_read: Vec<PathBuf>,
    /// More directories it may write under `workspace-write`, besides the host's.
    #[serde(default)]
    pub writable_roots: Vec<PathBuf>,
    /// Start it unconfined where its sandbox cannot be enforced (default: the host's).
    #[serde(default)]
    pub allow_unsandboxed: Option<bool>,
    /// What a tool whose definition changed since it was pinned gets: withheld until
    /// approved (`block`, default) or published with a warning (`warn`).
    #[serde(default)]
    pub on_change: crate::pins::OnChange,
    /// Which input schemas its tools may have: the subset model providers accept
    /// (`subset`, default: a tool outside it is left out, named in the log), or any JSON
    /// Schema with local references (`as-given`: for a gateway whose clients take any).
    #[serde(default)]
    pub input_schemas: InputSchemas,
    /// With `url`: whose credentials its calls carry ([`Credentials`]).
    #[serde(default)]
    pub credentials: Credentials,
    /// With `credentials = "caller"` or `"exchange"`: the server's resource URI, the
    /// audience of the tokens it takes (default: `url`; a server started over stdio must
    /// name it).
    #[serde(default)]
    pub audience: Option<String>,
    /// With `command` and `credentials = "caller"` or `"exchange"`: the environment
    /// variable the server reads its caller's token from. Each caller then gets a process
    /// of its own, so one process never holds two callers' tokens.
    #[serde(default)]
    pub token_env: Option<String>,
    /// With `credentials = "caller"` or `"exchange"`: the most callers' own connections
    /// (processes, for a server over stdio) open at once (default [`DEFAULT_MAX_CALLERS`]).
    /// A new caller past it closes the connection idle the longest; when every one has a
    /// call in flight, the new caller's call is refused, naming this key.
    #[serde(default = "default_max_callers", deserialize_with = "at_least_one")]
    pub max_callers: usize,
    /// With `credentials = "caller"` or `"exchange"`: a caller's own connection with no
    /// call for this long is closed (default [`DEFAULT_CALLER_IDLE`]); the caller's next call
    /// opens another.
    #[serde(default = "default_caller_idle", rename = "caller_idle_timeout_secs")]
    pub caller_idle_timeout: Seconds,
    /// The token this connection presents instead of `bearer_token_env`'s: a caller's own
    /// connection ([`Credentials`]); never read from a file.
    #[serde(skip)]
    pub(crate) caller_token: Option<CallerToken>,
}

/// Whose credentials a mounted server over HTTP gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Credentials {
    /// The server's own: `bearer_token_env`'s token, or none (the default).
    #[default]
    Static,
    /// The calling user's own access token, passed on: only one whose audience names the
    /// server (`audience`), never one issued for toolhost alone.
    Caller,
    /// A token for the server (`audience`), obtained for the calling user from the
    /// identity provider by token exchange (RFC 8693): the server never sees the caller's
    /// token.
    Exchange,
    /// toolhost's own login to the server (`toolhost mcp login ID`: authorization code
    /// with PKCE at the server's authorization server), refreshed as it connects.
    Login,
}

impl Credentials {
    /// The config spelling.
    pub fn name(self) -> &'static str {
        match self {
            Credentials::Static => "static",
            Credentials::Caller => "caller",
            Credentials::Exchange => "exchange",
            Credentials::Login => "login",
        }
    }
}

/// A token that shows as `[redacted]` wherever it is printed.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct CallerToken(pub(crate) String);

impl std::fmt::Debug for CallerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Which input schemas a mounted server's tools may have.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InputSchemas {
    /// The subset model providers accept ([`tool_api::schema`]); a tool outside it is left
    /// out.
    #[default]
    Subset,
    /// Any JSON Schema (Draft 2020-12) with local references, published as the server gave
    /// it.
    AsGiven,
}

fn default_startup() -> Seconds {
    Seconds(DEFAULT_STARTUP_TIMEOUT)
}

fn default_call() -> Seconds {
    Seconds(DEFAULT_CALL_TIMEOUT)
}

fn default_max_concurrency() -> usize {
    DEFAULT_MAX_CONCURRENCY
}

fn default_max_callers() -> usize {
    DEFAULT_MAX_CALLERS
}

fn default_caller_idle() -> Seconds {
    Seconds(DEFAULT_CALLER_IDLE)
}

fn at_least_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    match usize::deserialize(d)? {
        0 => Err(serde::de::Error::custom(
            "max_callers must be at least 1 (a caller needs a connection of its own)",
        )),
        n => Ok(n),
    }
}

fn prefix<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if !s.is_empty() {
        dispatcher_core::check_prefix(&s)
            .map_err(|e| serde::de::Error::custom(format!("{e}, or \"\" for none")))?;
    }
    Ok(s)
}

impl McpServerConfig {
    /// The key its pins are kept under: its id and what it runs or reaches, so that two
    /// configurations naming different servers alike do not share pins.
    pub fn pin_key(&self) -> String {
        match &self.url {
            Some(url) => format!("{} {url}", self.id),
            None => {
                let mut key = format!("{} {}", self.id, self.command);
                for arg in &self.args {
                    key.push(' ');
                    key.push_str(arg);
                }
                key
            }
        }
    }

    /// A server `id` running `command`, published under `prefix`, with every default.
    pub fn new(
        id: impl Into<String>,
        prefix: impl Into<String>,
        command: impl Into<String>,
    ) -> Self {
        McpServerConfig {
            id: id.into(),
            prefix: prefix.into(),
            command: command.into(),
            url: None,
            bearer_token_env: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            startup_timeout: default_startup(),
            call_timeout: default_call(),
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            side_effects: BTreeMap::new(),
            sandbox: None,
            network: None,
            allow_read: Vec::new(),
            writable_roots: Vec::new(),
            allow_unsandboxed: None,
            on_change: crate::pins::OnChange::Block,
            input_schemas: InputSchemas::Subset,
            credentials: Credentials::Static,
            audience: None,
            token_env: None,
            max_callers: DEFAULT_MAX_CALLERS,
            caller_idle_timeout: default_caller_idle(),
            caller_token: None,
        }
    }

    /// A server `id` reached at `url` (streamable HTTP), published under `prefix`.
    pub fn http(id: impl Into<String>, prefix: impl Into<String>, url: impl Into<String>) -> Self {
        let mut config = McpServerConfig::new(id, prefix, "");
        config.url = Some(url.into());
        config
    }

    /// What is wrong with an entry whose fields are each well-formed: it needs exactly one
    /// of `command` and `url`, an `http(s)://` URL, and a token variable only with a URL.
    pub fn problem(&self) -> Option<String> {
        match (&self.url, self.command.trim().is_empty()) {
            (Some(_), false) => Some("set `command` or `url`, not both".into()),
            (None, true) => Some(
                "set `command` (a program to run) or `url` (a streamable HTTP endpoint)".into(),
            ),
            (Some(url), true) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                Some(format!(
                    "`url` must start with http:// or https://, found {url:?}"
                ))
            }
            (None, false) if self.bearer_token_env.is_some() => {
                Some("`bearer_token_env` goes with `url`, not with `command`".into())
            }
            (None, false) if self.credentials == Credentials::Login => Some(
                "`credentials = \"login\"` goes with `url`: toolhost logs in to a server it reaches over HTTP".into(),
            ),
            (None, false)
                if self.credentials != Credentials::Static
                    && (self.token_env.is_none() || self.audience.is_none()) =>
            {
                Some(format!(
                    "a server started over stdio with credentials = \"{}\" needs `token_env` (the variable it reads its caller's token from: each caller gets a process of its own) and `audience` (the resource its tokens are for)",
                    self.credentials.name()
                ))
            }
            (_, _) if self.token_env.is_some() && (self.url.is_some() || self.credentials == Credentials::Static) => Some(
                "`token_env` goes with `command` and credentials = \"caller\" or \"exchange\": a server over `url` gets its caller's token in each request".into(),
            ),
            (Some(_), true)
                if self.audience.is_some()
                    && matches!(self.credentials, Credentials::Static | Credentials::Login) =>
            {
                Some("`audience` goes with `credentials = \"caller\"` or `\"exchange\"`".into())
            }
            (Some(_), true)
                if self.sandbox.is_some()
                    || self.network.is_some()
                    || !self.allow_read.is_empty()
                    || !self.writable_roots.is_empty()
                    || self.allow_unsandboxed.is_some() =>
            {
                Some("the sandbox settings (`sandbox`, `network`, `allow_read`, `writable_roots`, `allow_unsandboxed`) go with `command`: a server reached over `url` runs elsewhere".into())
            }
            _ => None,
        }
    }

    /// Its `env`, each `${NAME}` taken from toolhost's environment; a variable named that
    /// is not set is an error that names it.
    pub fn environment(&self) -> Result<Vec<(String, String)>, String> {
        self.env
            .iter()
            .map(|(k, v)| match v.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
                Some(name) => std::env::var(name).map(|value| (k.clone(), value)).map_err(|_| {
                    format!("its env {k} = \"${{{name}}}\" names {name}, which is not set in toolhost's environment")
                }),
                None => Ok((k.clone(), v.clone())),
            })
            .collect()
    }

    /// The resource its callers' tokens must be for: `audience`, else `url`.
    pub(crate) fn audience(&self) -> &str {
        self.audience
            .as_deref()
            .or(self.url.as_deref())
            .unwrap_or_default()
    }

    pub(crate) fn startup_timeout(&self) -> Duration {
        self.startup_timeout.0
    }
    pub(crate) fn call_timeout(&self) -> Duration {
        self.call_timeout.0
    }
    pub(crate) fn caller_idle_timeout(&self) -> Duration {
        self.caller_idle_timeout.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_env_value_naming_a_host_variable_takes_it_and_an_unset_one_is_named() {
        let mut c = McpServerConfig::new("s", "s", "srv");
        c.env.insert("LITERAL".into(), "v".into());
        c.env.insert("HOME_OF_HOST".into(), "${HOME}".into());
        let env = c.environment().unwrap();
        assert_eq!(env[0].0, "HOME_OF_HOST");
        assert_eq!(env[0].1, std::env::var("HOME").unwrap());
        assert_eq!(env[1], ("LITERAL".to_string(), "v".to_string()));
        c.env
            .insert("T".into(), "${TOOLHOST_TEST_SURELY_UNSET_93}".into());
        let e = c.environment().unwrap_err();
        assert!(
            e.contains("TOOLHOST_TEST_SURELY_UNSET_93") && e.contains("not set"),
            "{e}"
        );
    }
}
