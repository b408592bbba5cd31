//! `toolhost.toml`, parsed and checked; [`crate::host`] builds from it.
//!
//! Each table deserializes into the type of the crate that uses it, with that type's own
//! defaults: `[timeouts]` into [`dispatcher_core::Timeouts`], `[results]` into
//! [`dispatcher_core::ResultLimits`], `[limits]` into [`dispatcher_core::RateLimits`],
//! `[tool_confirmation]` into [`ConfirmationPolicy`], `[sandbox]` into
//! [`::sandbox::Settings`], `[mcp.tasks]` into [`mcp_server::TaskSettings`],
//! `[[mcp_servers]]` into [`McpServerConfig`]. Nothing is copied into a mirror of its own. A
//! bad value is refused by the value's type while the file is deserialized, so every error
//! names the file, the key and the line. `docs/configuration.md` lists every key with its
//! default, and a test here loads that block as written.

pub mod access;
pub mod audit;
mod plugin_grant;
mod plugins;
pub mod policies;
pub mod remote;
pub mod store;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dispatcher_core::{COMMAND_HOOK_TIMEOUT, Limit, RateLimits, ResultLimits, Seconds, Separator};
use dispatcher_core::{
    ConfirmationPolicy, DispatcherConfig, InterruptBehavior, OnExecuteError, Timeouts,
};
use mcp_toolsets::McpServerConfig;
pub use plugin_grant::PluginGrant;
use plugin_host::{Isolation, PublicKey};
pub use plugins::Plugins;
use serde::Deserialize;

/// The file name looked for in the working directory and the user's config directory.
pub const FILE_NAME: &str = "toolhost.toml";

/// The whole configuration file. A key left out takes the library's default
/// ([`DispatcherConfig::default`] and its kin); a bad value is refused while the file is
/// read, naming the file, the key and the line.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Plugin directories, relative to the config file's directory.
    pub plugin_dirs: Vec<PathBuf>,
    /// Capabilities enabled for gated tools.
    pub capabilities: Vec<String>,
    /// Per-session concurrency cap.
    pub max_concurrency: Limit,
    /// What a failed `execute` call does to its batch.
    pub on_execute_error: OnExecuteError,
    /// Where tools run and how the programs they start are confined.
    pub sandbox: ::sandbox::Settings,
    /// Per-tool concurrency caps.
    pub tool_concurrency: BTreeMap<String, Limit>,
    /// Per-tool interrupt behaviour.
    pub interrupt: BTreeMap<String, InterruptBehavior>,
    /// Result size caps.
    pub results: ResultLimits,
    /// External command hooks.
    pub hooks: Hooks,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// The confirmation policy.
    pub tool_confirmation: ConfirmationPolicy,
    /// Separator between a toolset prefix and a tool name.
    pub toolset_separator: Separator,
    /// The MCP server (`toolhost serve --mcp`).
    pub mcp: McpConfig,
    /// External MCP servers whose tools become toolsets (ids and prefixes unique).
    #[serde(deserialize_with = "unique_servers")]
    pub mcp_servers: Vec<McpServerConfig>,
    /// Where plugin packages run by default: `auto` (in process when signed by a trusted
    /// key, else in a worker process), `process` or `in_process`.
    pub plugin_isolation: Isolation,
    /// Per-plugin settings, by plugin name (`[plugins.NAME] isolation = "process"`), and
    /// where plugins are installed from (`[[plugins.sources]] oci = "REF"`).
    pub plugins: Plugins,
    /// The address-space limit of each plugin worker process, in MiB (0: none).
    pub plugin_memory_limit_mib: u64,
    /// The most linear memory one WebAssembly component instance may grow to, in MiB.
    pub wasm_memory_limit_mib: WasmMemoryMib,
    /// Public keys (`toolhost-ed25519:…`) whose signatures make a package trusted.
    pub trusted_keys: Vec<PublicKey>,
    /// Refuse every package not signed by a trusted key, before it is opened.
    pub require_signatures: bool,
    /// Where the instances of a deployment share their state.
    pub store: store::StoreConfig,
    /// Rate limits per caller.
    pub limits: RateLimits,
    /// The audit log.
    pub audit: audit::Audit,
    /// The host that runs the tools routed to `remote`.
    pub remote: Option<remote::Remote>,
    /// `serve --http`'s settings beyond its command line: `[http.auth]`.
    pub http: access::HttpConfig,
    /// Which tools each caller of `serve --http` sees and calls (`[[access]]`).
    pub access: Vec<access::AccessRule>,
    /// Secrets in results and arguments (`[secrets]`).
    pub secrets: ::secrets::Settings,
    /// Guardrail services that judge calls and results (`[[guardrails]]`).
    pub guardrails: Vec<crate::guardrail::GuardrailConfig>,
    /// Cedar policies over who calls which tool with what arguments (`[policies]`).
    pub policies: policies::PolicyConfig,
}

impl Default for Config {
    fn default() -> Self {
        let d = DispatcherConfig::default();
        Config {
            plugin_dirs: Vec::new(),
            capabilities: Vec::new(),
            max_concurrency: Limit(d.max_concurrency),
            on_execute_error: d.on_execute_error,
            sandbox: ::sandbox::Settings::default(),
            tool_concurrency: BTreeMap::new(),
            interrupt: BTreeMap::new(),
            results: ResultLimits::default(),
            hooks: Hooks::default(),
            timeouts: Timeouts::default(),
            tool_confirmation: ConfirmationPolicy::default(),
            toolset_separator: Separator(d.toolset_separator),
            mcp: McpConfig::default(),
            mcp_servers: Vec::new(),
            plugin_isolation: plugin_host::DEFAULT_ISOLATION,
            plugins: Plugins::default(),
            plugin_memory_limit_mib: plugin_host::isolated::DEFAULT_MEMORY_LIMIT >> 20,
            wasm_memory_limit_mib: WasmMemoryMib(256),
            trusted_keys: Vec::new(),
            require_signatures: false,
            store: store::StoreConfig::default(),
            limits: RateLimits::default(),
            audit: audit::Audit::default(),
            remote: None,
            http: access::HttpConfig::default(),
            access: Vec::new(),
            secrets: ::secrets::Settings::default(),
            guardrails: Vec::new(),
            policies: policies::PolicyConfig::default(),
        }
    }
}

/// Refuses two servers with the same id or prefix, naming both entries.
fn unique_servers<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<McpServerConfig>, D::Error> {
    let servers = Vec::<McpServerConfig>::deserialize(d)?;
    for (i, server) in servers.iter().enumerate() {
        if let Some(problem) = server.problem() {
            return Err(serde::de::Error::custom(format!(
                "entry {i} ({:?}): {problem}",
                server.id
            )));
        }
        if let Some(j) = servers[..i].iter().position(|s| s.id == server.id) {
            return Err(serde::de::Error::custom(format!(
                "entries {j} and {i} have the same id {:?}; ids must be unique",
                server.id
            )));
        }
        // Servers mounted without a prefix may be several: their tools' names are checked
        // when they are published.
        if let Some(j) = servers[..i]
            .iter()
            .position(|s| !server.prefix.is_empty() && s.prefix == server.prefix)
        {
            return Err(serde::de::Error::custom(format!(
                "entries {j} and {i} have the same prefix {:?}; prefixes must be unique",
                server.prefix
            )));
        }
    }
    Ok(servers)
}

/// The `[mcp]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// What answers a `prompt` when the MCP client cannot be asked (no elicitation):
    /// `deny` (default) or `allow`.
    pub prompt_fallback: mcp_server::PromptFallback,
    /// The largest message a client may send, in bytes, on stdio and HTTP (default 16 MiB);
    /// a larger one is refused with its size and this limit.
    pub max_message_bytes: MessageBytes,
    /// The key ring that seals stateless confirmations (`requestState`), relative to this
    /// file; `TOOLHOST_REQUEST_STATE_KEYS` wins. None: a key of the process's own.
    pub request_state_keys: Option<PathBuf>,
    /// Where the pinned definitions of mounted MCP servers' tools are kept, relative to
    /// this file. None: `$XDG_STATE_HOME/toolhost/mcp-pins.json` (or
    /// `~/.local/state/toolhost/mcp-pins.json`). Keep it outside every workspace: a tool
    /// that can write it can approve a changed definition.
    pub pins_file: Option<PathBuf>,
    /// Calls that outlive their request ([`mcp_server::tasks`]).
    pub tasks: mcp_server::TaskSettings,
    /// Whether toolhost's own log messages (info and above) go to the MCP clients that
    /// asked for log messages, beside the mounted servers' (default `false`).
    pub client_logs: bool,
    /// The MCP Registry API `toolhost mcp add NAME` looks servers up in (e.g.
    /// `https://registry.modelcontextprotocol.io`); none: `mcp add` takes `--file` or `--url`.
    pub registry: Option<String>,
    /// Progressive discovery: a few tools listed and a search for the rest
    /// ([`mcp_server::discovery`]); applied again on a reload.
    pub discovery: mcp_server::Discovery,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            prompt_fallback: mcp_server::PromptFallback::default(),
            max_message_bytes: MessageBytes(mcp_server::screen::DEFAULT_MAX_MESSAGE_BYTES),
            request_state_keys: None,
            pins_file: None,
            tasks: mcp_server::TaskSettings::default(),
            client_logs: false,
            registry: None,
            discovery: mcp_server::Discovery::default(),
        }
    }
}

/// A WebAssembly instance's memory limit in MiB: from 1 to 4096 (a 32-bit memory's most).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WasmMemoryMib(pub u64);

impl<'de> Deserialize<'de> for WasmMemoryMib {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        if (1..=4096).contains(&n) {
            Ok(WasmMemoryMib(n as u64))
        } else {
            Err(serde::de::Error::custom(format!(
                "expected MiB from 1 to 4096 (a WebAssembly memory holds at most 4 GiB), found {n}"
            )))
        }
    }
}

/// A message size limit in bytes: from 1 KiB to 1 GiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageBytes(pub usize);

impl<'de> Deserialize<'de> for MessageBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const MIN: i64 = 1 << 10;
        const MAX: i64 = 1 << 30;
        let n = i64::deserialize(d)?;
        if (MIN..=MAX).contains(&n) {
            Ok(MessageBytes(n as usize))
        } else {
            Err(serde::de::Error::custom(format!(
                "expected a number of bytes from {MIN} (1 KiB) to {MAX} (1 GiB), found {n}"
            )))
        }
    }
}

/// The `[hooks]` table: external commands run around calls.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hooks {
    /// Run before a call, after validation ([`CommandHook`] says what they may answer).
    pub pre_tool_use: Vec<HookConfig>,
    /// Run after a call, with its result.
    pub post_tool_use: Vec<HookConfig>,
}

/// One `[[hooks.pre_tool_use]]` or `[[hooks.post_tool_use]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// The command line, run with `/bin/sh -c`.
    #[serde(deserialize_with = "dispatcher_core::non_empty")]
    pub command: String,
    /// The tools it runs for (default: every tool).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// How long it may run; a hook that takes longer is killed and ignored.
    #[serde(default = "hook_timeout", rename = "timeout_secs")]
    pub timeout: Seconds,
}

fn hook_timeout() -> Seconds {
    Seconds(COMMAND_HOOK_TIMEOUT)
}

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("config file '{file}': cannot read it: {source}")]
    Read {
        /// The file.
        file: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML, or a key is unknown or has a wrong type or a bad value.
    #[error("config file '{file}'{}: key `{key}`: {message}", location.as_deref().map(|l| format!(" ({l})")).unwrap_or_default())]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Dotted key path (`timeouts.default_secs`), or `(document)`.
        key: String,
        /// What was wrong and what was expected.
        message: String,
        /// `line L, column C`.
        location: Option<String>,
    },
}

impl Config {
    /// Parses a config file's text. `file` is only used in messages.
    pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
        let config: Config =
            plugin_host::manifest::parse_keyed(text).map_err(|e| ConfigError::Invalid {
                file: file.to_path_buf(),
                key: e.key,
                message: e.message,
                location: e.location,
            })?;
        for (i, source) in config.plugins.sources.iter().enumerate() {
            let problem = match source.check() {
                Err(e) => Some(e.to_string()),
                Ok(())
                    if config.plugins.sources[..i]
                        .iter()
                        .any(|s| s.oci == source.oci) =>
                {
                    Some(format!("{:?} is listed twice", source.oci))
                }
                Ok(()) => None,
            };
            if let Some(message) = problem {
                return Err(ConfigError::Invalid {
                    file: file.to_path_buf(),
                    key: format!("plugins.sources[{i}].oci"),
                    message,
                    location: None,
                });
            }
        }
        if let Err((key, message)) = access::check(&config) {
            return Err(ConfigError::Invalid {
                file: file.to_path_buf(),
                key,
                message,
                location: None,
            });
        }
        for (i, g) in config.guardrails.iter().enumerate() {
            let problem = g.problem().or_else(|| {
                config.guardrails[..i]
                    .iter()
                    .any(|other| other.name == g.name)
                    .then(|| format!("another guardrail is named {:?}", g.name))
            });
            if let Some(message) = problem {
                return Err(ConfigError::Invalid {
                    file: file.to_path_buf(),
                    key: format!("guardrails[{i}]"),
                    message,
                    location: None,
                });
            }
        }
        if let Err(e) = ::secrets::Scanner::check(&config.secrets.rules) {
            let index = match &e {
                ::secrets::SecretsError::Rule { id, .. } => {
                    config.secrets.rules.iter().position(|r| &r.id == id)
                }
                ::secrets::SecretsError::Builtin(_) => None,
            };
            return Err(ConfigError::Invalid {
                file: file.to_path_buf(),
                key: index.map_or("secrets.rules".into(), |i| format!("secrets.rules[{i}]")),
                message: e.to_string(),
                location: None,
            });
        }
        if config.remote.is_none()
            && let Some(tool) = config
                .sandbox
                .per_tool
                .iter()
                .find(|(_, mode)| **mode == ::sandbox::Mode::Remote)
                .map(|(tool, _)| tool)
        {
            return Err(ConfigError::Invalid {
                file: file.to_path_buf(),
                key: format!("sandbox.per_tool.{tool}"),
                message: "\"remote\" runs the tool on another toolhost: add a [remote] table with its url (and bearer_token_env)".into(),
                location: None,
            });
        }
        Ok(config)
    }

    /// The `[[mcp_servers]]` entry with `id`, or an error naming the ids there are.
    pub fn mcp_server(&self, id: &str) -> Result<&McpServerConfig, String> {
        self.mcp_servers.iter().find(|s| s.id == id).ok_or_else(|| {
            let known: Vec<&str> = self.mcp_servers.iter().map(|s| s.id.as_str()).collect();
            format!(
                "no MCP server '{id}' (its [[mcp_servers]] ids: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )
        })
    }

    /// Reads and parses a config file.
    pub fn load(file: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
            file: file.to_path_buf(),
            source,
        })?;
        let mut config = Config::parse(file, &text)?;
        let base = file.parent().unwrap_or(Path::new("."));
        for dir in &mut config.plugin_dirs {
            *dir = ::sandbox::resolve(dir, base);
        }
        config.sandbox.resolve_paths(base);
        if let Some(pins) = &mut config.mcp.pins_file {
            *pins = ::sandbox::resolve(pins, base);
        }
        if let Some(audit) = &mut config.audit.path {
            *audit = ::sandbox::resolve(audit, base);
        }
        if let Some(keys) = &mut config.mcp.request_state_keys {
            *keys = ::sandbox::resolve(keys, base);
        }
        if let Some(model) = &mut config.mcp.discovery.model {
            *model = ::sandbox::resolve(model, base);
        }
        for server in &mut config.mcp_servers {
            for root in server
                .allow_read
                .iter_mut()
                .chain(server.writable_roots.iter_mut())
            {
                *root = ::sandbox::resolve(root, base);
            }
        }
        // toolhost's own state is hidden from what it runs: the key ring sealing
        // confirmations, the pins, the audit log (the default state directory is on the
        // deny list already).
        config.sandbox.host_state.extend(
            [
                config.mcp.request_state_keys.clone(),
                config.mcp.pins_file.clone(),
                config.audit.path.clone(),
            ]
            .into_iter()
            .flatten(),
        );
        Ok(config)
    }

    /// The config file to use: `explicit`, else `./toolhost.toml`, else
    /// `$XDG_CONFIG_HOME/toolhost/toolhost.toml` (or `~/.config/…`), else none.
    pub fn locate(explicit: Option<&Path>) -> Option<PathBuf> {
        if let Some(p) = explicit {
            return Some(p.to_path_buf());
        }
        let local = PathBuf::from(FILE_NAME);
        if local.is_file() {
            return Some(local);
        }
        let config_home = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        let user = config_home.join("toolhost").join(FILE_NAME);
        user.is_file().then_some(user)
    }
}

/// A config file's `text` with `entry` appended, on a line of its own: the user's text is
/// kept as written.
pub(crate) fn appended(text: &str, entry: &str) -> String {
    let mut out = String::with_capacity(text.len() + entry.len() + 1);
    out.push_str(text);
    if !text.is_empty() && !text.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(entry);
    out
}

/// Writes a config file through a temporary file beside it renamed into place (its mode
/// kept): a reader sees the old text or the new, never half of it.
pub(crate) fn write_atomically(file: &Path, text: &str) -> Result<(), String> {
    use std::io::Write as _;
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| format!("cannot write beside {}: {e}", file.display()))?;
    tmp.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    if let Ok(meta) = std::fs::metadata(file) {
        let _ = std::fs::set_permissions(tmp.path(), meta.permissions());
    }
    tmp.persist(file)
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dispatcher_core::Mode;
    use tool_api::SideEffect;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("toolhost.toml"), text)
    }

    #[test]
    fn plugin_sources_sit_beside_per_plugin_settings() {
        let c = parse(
            "[plugins.grep]\nisolation = \"process\"\n\n[[plugins.sources]]\noci = \"ghcr.io/acme/grep:0.3.1\"\n\n[[plugins.sources]]\noci = \"ghcr.io/acme/fetch\"\nversion = \"~1.2\"\n",
        )
        .unwrap();
        assert_eq!(c.plugins["grep"].isolation, Some(Isolation::Process));
        let oci: Vec<&str> = c.plugins.sources.iter().map(|s| s.oci.as_str()).collect();
        assert_eq!(oci, ["ghcr.io/acme/grep:0.3.1", "ghcr.io/acme/fetch"]);
        let table = [
            (
                "[[plugins.sources]]\noci = \"r.example/a:1.0.0\"\nversion = \"^1\"\n",
                "plugins.sources[0].oci",
            ),
            (
                "[[plugins.sources]]\noci = \"r.example/a:1\"\n[[plugins.sources]]\noci = \"r.example/a:1\"\n",
                "listed twice",
            ),
            (
                "[[plugins.sources]]\nurl = \"r.example/a:1\"\n",
                "unknown field `url`",
            ),
        ];
        for (text, needle) in table {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }

    #[test]
    fn empty_file_gives_every_default() {
        let c = parse("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(
            c.tool_confirmation.default.get(SideEffect::Write),
            Mode::Prompt
        );
        assert_eq!(
            c.tool_confirmation.default.get(SideEffect::Read),
            Mode::Auto
        );
    }

    #[test]
    fn spec_example_policy_parses() {
        let c = parse(
            r#"
            [tool_confirmation.default]
            NONE = "auto"
            READ = "auto"
            WRITE = "prompt"
            EXECUTE = "prompt"
            NETWORK = "prompt"
            [tool_confirmation.per_tool]
            git_status = "auto"
            npm_install = "prompt"
            [tool_confirmation]
            trusted_workspaces = ["~/code/myproject"]
            [tool_confirmation.trusted_workspace_overrides]
            EXECUTE = "prompt"
            "#,
        )
        .unwrap();
        assert_eq!(c.tool_confirmation.per_tool["git_status"], Mode::Auto);
        assert_eq!(
            c.tool_confirmation.trusted_workspace_overrides.execute,
            Some(Mode::Prompt)
        );
    }

    #[test]
    fn unknown_key_names_file_key_and_expected_keys() {
        let e = parse("max_concurency = 3").unwrap_err().to_string();
        assert!(
            e.contains("toolhost.toml") && e.contains("max_concurency"),
            "{e}"
        );
        assert!(e.contains("expected one of"), "{e}");
    }

    #[test]
    fn wrong_type_names_the_dotted_key_and_line() {
        let e = parse("[timeouts]\ndefault_secs = \"soon\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key `timeouts.default_secs`") && e.contains("line 2"),
            "{e}"
        );
    }

    #[test]
    fn bad_mode_names_the_key_and_the_modes() {
        let e = parse("[tool_confirmation.per_tool]\nshell = \"maybe\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tool_confirmation.per_tool.shell"), "{e}");
        assert!(
            e.contains("auto") && e.contains("prompt") && e.contains("deny"),
            "{e}"
        );
    }

    #[test]
    fn zero_concurrency_and_negative_timeouts_are_refused() {
        assert!(
            parse("max_concurrency = 0")
                .unwrap_err()
                .to_string()
                .contains("max_concurrency")
        );
        let e = parse("[timeouts.per_tool]\nshell = -1")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("timeouts.per_tool.shell") && e.contains("positive"),
            "{e}"
        );
    }

    #[test]
    fn unsupported_sandbox_mode_is_refused_with_a_clear_error() {
        let e = parse("sandbox = \"container\"").unwrap_err().to_string();
        assert!(
            e.contains("key `sandbox`")
                && e.contains("'container' is not supported")
                && e.contains("supported: host, read-only, workspace-write"),
            "{e}"
        );
        let e = parse("[sandbox.per_tool]\nshell = \"wasm\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key `sandbox.per_tool.shell`") && e.contains("'wasm' is not supported"),
            "{e}"
        );
        let e = parse("sandbox = \"jail\"").unwrap_err().to_string();
        assert!(e.contains("sandbox") && e.contains("host"), "{e}");
    }

    #[test]
    fn a_deny_read_pattern_globset_cannot_read_and_a_zero_limit_are_refused_naming_them() {
        // An entry with `*` or `?` is a pattern; this one's class never closes.
        let e = parse("[sandbox]\ndeny_read = [\"secrets/*[a-\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sandbox") && e.contains("deny_read pattern 'secrets/*[a-'"),
            "{e}"
        );
        let e = parse("[sandbox]\ndeny_read_limit = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("deny_read_limit = 0"), "{e}");
        let c = parse("[sandbox]\ndeny_read_limit = 5000\n").unwrap();
        assert_eq!(c.sandbox.deny_read_limit, 5000);
    }

    #[test]
    fn a_secret_rule_that_cannot_be_used_and_a_bad_action_are_refused_naming_them() {
        let rule = |pattern: &str| {
            format!(
                "[secrets]\naction = \"redact\"\n[[secrets.rules]]\nid = \"ok\"\nkeywords = [\"k\"]\npattern = 'k'\n[[secrets.rules]]\nid = \"acme\"\nkeywords = [\"acme_\"]\npattern = '{pattern}'\n"
            )
        };
        let e = parse(&rule("acme_[0-9")).unwrap_err().to_string();
        for says in ["secrets.rules[1]", "'acme'", "does not compile"] {
            assert!(e.contains(says), "{says:?} in {e}");
        }
        let c = parse(&rule("acme_[0-9a-f]{12}")).unwrap();
        assert_eq!(c.secrets.rules.len(), 2);
        let e = parse("[secrets]\naction = \"mask\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("secrets.action") && e.contains("redact"), "{e}");
        let e = parse("[secrets.per_tool]\nshell = \"drop\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("secrets.per_tool"), "{e}");
    }

    #[test]
    fn bad_interrupt_and_cap_values_name_their_keys() {
        let e = parse("[interrupt]\nshell = \"ignore\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("interrupt.shell") && e.contains("block"), "{e}");
        let e = parse("[tool_concurrency]\nshell = 0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tool_concurrency.shell"), "{e}");
        let e = parse("[results.per_tool]\nshell = 0")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("results.per_tool.shell") && e.contains("positive"),
            "{e}"
        );
        let e = parse("[[hooks.post_tool_use]]\ncommand = \"x\"\ntimeout_secs = -1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("hooks.post_tool_use[0].timeout_secs"), "{e}");
        let e = parse("[[hooks.pre_tool_use]]\ncommand = \"\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("hooks.pre_tool_use[0].command"), "{e}");
    }

    /// The ```toml block after `marker` in the README or docs/.
    fn readme_block(marker: &str) -> String {
        toolhost_tests::docs::block(marker, "toml")
    }

    #[test]
    fn plugin_isolation_per_plugin_settings_and_trusted_keys_load() {
        let key = plugin_host::trust::SecretKey::from_seed([5; 32]).public();
        let c = parse(&format!(
            "plugin_isolation = \"process\"\ntrusted_keys = [\"{key}\"]\nrequire_signatures = true\nplugin_memory_limit_mib = 512\n\n[plugins.grep-tool]\nisolation = \"in_process\"\n"
        ))
        .unwrap();
        assert_eq!(c.plugin_isolation, Isolation::Process);
        assert_eq!(c.plugins["grep-tool"].isolation, Some(Isolation::InProcess));
        assert_eq!(c.trusted_keys, [key]);
        assert!(c.require_signatures);
        assert_eq!(c.plugin_memory_limit_mib, 512);
        assert_eq!(c.wasm_memory_limit_mib, WasmMemoryMib(256), "the default");
    }

    #[test]
    fn a_bad_trusted_key_is_refused_naming_the_key_and_line() {
        let e = parse("require_signatures = false\ntrusted_keys = [\"ssh-ed25519 AAAA\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("trusted_keys"), "{e}");
        assert!(e.contains("line 2"), "{e}");
        assert!(e.contains("toolhost-ed25519:"), "{e}");
    }

    #[test]
    fn an_unknown_isolation_is_refused_naming_the_plugin() {
        let e = parse("[plugins.grep-tool]\nisolation = \"sandboxed\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("plugins.grep-tool.isolation"), "{e}");
        assert!(e.contains("in_process"), "{e}");
    }

    #[test]
    fn an_http_hosts_entry_that_is_not_a_host_is_refused_naming_it() {
        let e = parse(
            "[plugins.fetcher]\nhttp_hosts = [\"api.example.com\", \"https://x.example.com\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("plugins.fetcher.http_hosts"), "{e}");
        assert!(
            e.contains("'https://x.example.com'") && e.contains("without a scheme"),
            "{e}"
        );
        let c =
            parse("[plugins.fetcher]\nhttp_hosts = [\"api.example.com\", \"127.0.0.1:8080\"]\n")
                .unwrap();
        assert_eq!(
            c.plugins["fetcher"].http_hosts.entries(),
            ["api.example.com", "127.0.0.1:8080"]
        );
    }

    #[test]
    fn readme_http_hosts_block_loads_as_written() {
        let c = parse(&readme_block("**Outgoing HTTP**")).unwrap();
        assert_eq!(
            c.plugins["weather"].http_hosts.entries(),
            ["api.weather.example", "127.0.0.1:8080", "*.cdn.example"]
        );
    }

    #[test]
    fn the_readmes_small_configuration_loads_as_written() {
        let block = readme_block("## Configuration\n");
        let c = parse(&block).unwrap_or_else(|e| panic!("{e}\n{block}"));
        assert_eq!(c.tool_confirmation.per_tool["shell"], Mode::Deny);
        assert_eq!(c.plugin_dirs, [PathBuf::from("plugins")]);
    }

    #[test]
    fn a_bad_value_in_a_core_section_is_refused_naming_its_dotted_key() {
        let table = [
            (
                "[results]\nmax_chars = 0",
                "results.max_chars",
                "positive number of characters",
            ),
            (
                "[results.per_tool]\nshell = -1",
                "results.per_tool.shell",
                "positive number",
            ),
            (
                "[timeouts]\nmax_secs = 0",
                "timeouts.max_secs",
                "positive number of seconds",
            ),
            (
                "[limits]\ncalls_per_minut = 3",
                "limits.calls_per_minut",
                "calls_per_minute",
            ),
            (
                "[limits.per_tool]\nshell = -2",
                "limits.per_tool.shell",
                "u32",
            ),
            (
                "[mcp.tasks]\nmax_per_client = 0",
                "mcp.tasks.max_per_client",
                "from 1 to",
            ),
            (
                "[mcp.tasks]\npoll_interval = \"soon\"",
                "mcp.tasks.poll_interval",
                "line 2",
            ),
        ];
        for (text, key, says) in table {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(&format!("key `{key}`")), "{text}: {e}");
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn readme_configuration_block_loads_as_written_and_is_the_defaults() {
        let block = readme_block("## `toolhost.toml`");
        let c = parse(&block).unwrap_or_else(|e| panic!("{e}\n{block}"));
        assert_eq!(
            c,
            Config::default(),
            "docs/configuration.md's block shows the defaults"
        );
    }

    #[test]
    fn the_teams_block_of_the_readme_and_the_auth_block_of_the_docs_load_as_written() {
        let c = parse(&readme_block(
            "## Teams: log in with your identity provider",
        ))
        .unwrap();
        let auth = c.http.auth.as_ref().unwrap();
        assert_eq!(auth.issuers, ["https://login.example.com/realms/team"]);
        assert_eq!(c.access.len(), 2);
        assert_eq!(c.access[0].groups, ["dev"]);
        let docs = parse(&readme_block("## Authorization (OAuth 2.1)")).unwrap();
        let auth = docs.http.auth.unwrap();
        assert_eq!(
            auth,
            {
                let mut expected =
                    oauth::Settings::for_issuers(["https://login.example.com/realms/team"]);
                expected.resource = Some("https://mcp.example.com/mcp".into());
                expected.scopes_supported = vec!["mcp".into()];
                expected.client = auth.client.clone();
                expected.introspection = Some(oauth::IntrospectionSettings::default());
                expected
            },
            "the docs show the defaults"
        );
        assert_eq!(auth.client.map(|c| c.id).as_deref(), Some("toolhost"));
    }

    #[test]
    fn bad_auth_settings_and_access_rules_are_refused_naming_their_keys() {
        for (text, key, says) in [
            (
                "[http.auth]\nissuer = \"http://idp.example\"",
                "http.auth.issuers[0]",
                "plain HTTP",
            ),
            (
                "[http.auth]\nissuers = []",
                "http.auth.issuers",
                "at least one",
            ),
            (
                "[http.auth]\nissuer = \"https://idp.example\"\ngroups_claim = \"a..b\"",
                "http.auth.groups_claim",
                "not a claim name",
            ),
            (
                "[[access]]\ntoolsets = [\"nowhere\"]",
                "access[0].toolsets",
                "no [[mcp_servers]] entry",
            ),
            (
                "[[access]]\nmodes = { write = \"auto\" }",
                "access",
                "only narrows",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn readme_mcp_servers_block_loads_as_written() {
        let c = parse(&readme_block("### Other MCP servers as toolsets")).unwrap();
        let s = &c.mcp_servers[0];
        assert_eq!((s.id.as_str(), s.prefix.as_str()), ("github", "gh"));
        assert_eq!(s.side_effects["get_issue"], SideEffect::Read);
        assert_eq!(s.max_concurrency, 64, "the README shows the default");
    }

    /// The first ```toml block after `heading` in docs/sandbox.md.
    fn sandbox_doc_block(heading: &str) -> &'static str {
        let doc = include_str!("../../../docs/sandbox.md");
        let after = &doc[doc.find(heading).expect("heading in docs/sandbox.md")..];
        let start = after.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let len = after[start..].find("```").expect("the block ends");
        &after[start..start + len]
    }

    #[test]
    fn the_sandbox_docs_blocks_load_as_written_and_show_the_defaults() {
        let c = parse(sandbox_doc_block("Every key, with its default")).unwrap();
        assert_eq!(c.sandbox, ::sandbox::Settings::default());
        let c = parse(&readme_block("## Sandbox\n")).unwrap();
        assert_eq!(c.sandbox.deny_read, [PathBuf::from("**/.env")]);
        assert!(c.sandbox.network.enabled);
        assert_eq!(c.sandbox.env.keep, ["CARGO_REGISTRY_TOKEN"]);
        let c = parse(sandbox_doc_block("### Environment")).unwrap();
        assert!(matches!(
            c.mcp_servers[0].network,
            Some(sandbox::NetworkEntry::Own { enabled: true, .. })
        ));
    }

    #[test]
    fn readme_sandbox_blocks_load_as_written() {
        let c = parse(sandbox_doc_block("## Plugin workers")).unwrap();
        assert_eq!(
            c.plugins["fetcher"].sandbox,
            Some(PluginGrant::Classes(plugin_host::WorkerGrant::default()))
        );
        assert_eq!(c.plugins["http-client"].tcp_ports, Some(vec![443]));
        assert_eq!(
            c.plugins["http-client"].http_hosts.entries(),
            ["api.example.com"]
        );
        assert_eq!(c.plugins["legacy"].sandbox, Some(PluginGrant::Unconfined));
    }

    #[test]
    fn a_bad_value_names_its_key_and_line() {
        let e = parse("max_concurrency = 2\n[timeouts.per_tool]\nshell = -1")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key `timeouts.per_tool.shell`") && e.contains("line 3"),
            "{e}"
        );
        let e = parse("\n\nmax_concurrency = 0").unwrap_err().to_string();
        assert!(
            e.contains("key `max_concurrency`") && e.contains("line 3"),
            "{e}"
        );
        let e = parse("toolset_separator = \"::\"").unwrap_err().to_string();
        assert!(
            e.contains("toolset_separator") && e.contains("line 1"),
            "{e}"
        );
        let e = parse("\nsandbox = \"container\"").unwrap_err().to_string();
        assert!(e.contains("key `sandbox`") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn mcp_server_entries_are_checked_where_they_stand() {
        let server = |id: &str, prefix: &str| {
            format!("[[mcp_servers]]\nid = \"{id}\"\nprefix = \"{prefix}\"\ncommand = \"srv\"\n")
        };
        let e = parse(&format!("{}{}", server("a", "x"), server("a", "y")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mcp_servers") && e.contains("same id \"a\""),
            "{e}"
        );
        let e = parse(&format!("{}{}", server("a", "x"), server("b", "x")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("same prefix \"x\""), "{e}");
        let e = parse(&server("a", "bad prefix")).unwrap_err().to_string();
        assert!(
            e.contains("mcp_servers[0].prefix") && e.contains("line 3") && e.contains("1-32"),
            "{e}"
        );
        let e = parse(&format!("{}startup_timeout_secs = 0\n", server("a", "x")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mcp_servers[0].startup_timeout_secs") && e.contains("line 5"),
            "{e}"
        );
        for bad in ["0", "1025", "-1"] {
            let e = parse(&format!("{}max_concurrency = {bad}\n", server("a", "x")))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("mcp_servers[0].max_concurrency")
                    && e.contains("line 5")
                    && e.contains("from 1 to 1024"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_servers_max_concurrency_defaults_to_64_and_is_apart_from_the_sessions() {
        let server = "[[mcp_servers]]\nid = \"a\"\nprefix = \"a\"\ncommand = \"srv\"\n";
        let c = parse(server).unwrap();
        assert_eq!(c.mcp_servers[0].max_concurrency, 64);
        assert_eq!(c.max_concurrency.0, 4);
        let c = parse(&format!(
            "max_concurrency = 2\n{server}max_concurrency = 300\n"
        ))
        .unwrap();
        assert_eq!(c.mcp_servers[0].max_concurrency, 300);
        assert_eq!(c.max_concurrency.0, 2);
    }

    #[test]
    fn the_docs_block_of_a_server_taking_exchanged_tokens_loads_and_each_mode_needs_its_table() {
        let c = parse(&readme_block("### Whose credentials a mounted server gets")).unwrap();
        let s = &c.mcp_servers[0];
        assert_eq!(s.credentials, mcp_toolsets::Credentials::Exchange);
        assert_eq!(s.problem(), None);
        let entry = |credentials: &str| {
            format!(
                "[[mcp_servers]]\nid = \"up\"\nprefix = \"up\"\nurl = \"https://up.example/mcp\"\ncredentials = \"{credentials}\"\n"
            )
        };
        for (text, says) in [
            (entry("caller"), "add [http.auth]"),
            (entry("exchange"), "[http.auth.client]"),
            (
                "[[mcp_servers]]\nid = \"up\"\nprefix = \"up\"\ncommand = \"srv\"\ncredentials = \"exchange\"\n".into(),
                "needs `token_env`",
            ),
        ] {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains("mcp_servers") && e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn readme_http_mcp_server_block_loads_as_written() {
        let c = parse(&readme_block("Or a server reached over streamable HTTP:")).unwrap();
        let s = &c.mcp_servers[0];
        assert_eq!(s.url.as_deref(), Some("https://mcp.example.com/mcp"));
        assert_eq!(s.bearer_token_env.as_deref(), Some("REMOTE_MCP_TOKEN"));
        assert_eq!(s.problem(), None);
    }

    #[test]
    fn max_message_bytes_out_of_range_names_the_key_and_the_range() {
        for bad in ["10", "2000000000", "-1"] {
            let e = parse(&format!("[mcp]\nmax_message_bytes = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("mcp.max_message_bytes") && e.contains("line 2") && e.contains("1 KiB"),
                "{bad}: {e}"
            );
        }
        let c = parse("[mcp]\nmax_message_bytes = 4096\n").unwrap();
        assert_eq!(c.mcp.max_message_bytes, MessageBytes(4096));
    }

    #[test]
    fn wasm_memory_limit_out_of_range_names_the_key_and_the_range() {
        for bad in ["0", "4097", "-5"] {
            let e = parse(&format!("wasm_memory_limit_mib = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("wasm_memory_limit_mib") && e.contains("from 1 to 4096"),
                "{bad}: {e}"
            );
        }
        let c = parse("wasm_memory_limit_mib = 64\n").unwrap();
        assert_eq!(c.wasm_memory_limit_mib, WasmMemoryMib(64));
    }

    #[test]
    fn an_mcp_server_entry_needs_exactly_one_of_command_and_url() {
        let entry = |body: &str| format!("[[mcp_servers]]\nid = \"r\"\nprefix = \"r\"\n{body}");
        let ok = parse(&entry(
            "url = \"https://mcp.example.com/mcp\"\nbearer_token_env = \"T\"\n",
        ))
        .unwrap();
        assert_eq!(
            ok.mcp_servers[0].url.as_deref(),
            Some("https://mcp.example.com/mcp")
        );
        for (body, says) in [
            ("", "set `command`"),
            ("command = \"srv\"\nurl = \"http://h/mcp\"\n", "not both"),
            ("url = \"ftp://h/mcp\"\n", "http:// or https://"),
            (
                "command = \"srv\"\nbearer_token_env = \"T\"\n",
                "goes with `url`",
            ),
        ] {
            let e = parse(&entry(body)).unwrap_err().to_string();
            assert!(
                e.contains("mcp_servers") && e.contains("entry 0") && e.contains(says),
                "{body}: {e}"
            );
        }
    }

    #[test]
    fn syntax_error_says_where() {
        let e = parse("plugin_dirs = [").unwrap_err().to_string();
        assert!(e.contains("toolhost.toml") && e.contains("line 1"), "{e}");
    }
}
