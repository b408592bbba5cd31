//! `toolhost.toml`: every key, its default, and errors that name the file and the key.
//!
//! ```toml
//! # Directories scanned for plugin packages (relative to this file; `~` expanded).
//! # Default: none. `--plugins DIR` adds more.
//! plugin_dirs = ["plugins"]
//! # Capabilities enabled for tools that require one. Default: none.
//! capabilities = []
//! # Calls of one session that may execute at once. Default: 4.
//! max_concurrency = 4
//! # What a failed `execute` call (e.g. shell) does to the other calls of its batch:
//! # "continue" (default) or "cancel_siblings" (they end `cancelled`, reason sibling_error).
//! on_execute_error = "continue"
//! # Where tools run. Only "host" is supported; another mode is refused, never ignored.
//! sandbox = "host"
//!
//! [tool_concurrency]         # per-tool caps in a session, on top of max_concurrency
//! shell = 1
//!
//! [interrupt]                # per tool: "cancel" (default) or "block" (runs to completion)
//! write_file = "block"
//!
//! [results]                  # result size caps, in characters
//! max_chars = 100000         # beyond it: spooled to a file, the model gets a preview + path
//! preview_chars = 2000
//! [results.per_tool]
//! shell = 30000
//!
//! [[hooks.pre_tool_use]]     # an external command judging calls (JSON of the call on
//! command = "./check.sh"     # stdin; exit 0 allow, exit 2 deny with stderr as the reason)
//! tools = ["shell"]          # optional; default: every tool
//! timeout_secs = 10          # optional; default 10
//! [[hooks.post_tool_use]]    # sees each result; may print {"annotate": "…"}
//! command = "./audit.sh"
//!
//! [timeouts]
//! default_secs = 60          # none/read/write tools that declare no timeout
//! execute_secs = 600         # execute/network tools that declare no timeout
//! confirmation_secs = 300    # how long a confirmation prompt waits
//! cancel_grace_secs = 30     # how long a cancelled tool may take to stop
//! slow_call_warn_secs = 10   # calls slower than this log a warning
//! [timeouts.per_tool]        # per-tool timeouts, in seconds
//! shell = 120
//!
//! [tool_confirmation.default]   # auto | prompt | deny, per side-effect class
//! NONE = "auto"
//! READ = "auto"
//! WRITE = "prompt"
//! EXECUTE = "prompt"
//! NETWORK = "prompt"
//! [tool_confirmation.per_tool]
//! list_dir = "auto"
//! [tool_confirmation]
//! trusted_workspaces = ["~/code/myproject"]
//! [tool_confirmation.trusted_workspace_overrides]
//! EXECUTE = "prompt"
//!
//! # Between a toolset's prefix and its tools' names: "__" (default), "_", "-", "--" or ".".
//! toolset_separator = "__"
//!
//! [mcp]                      # `toolhost serve --mcp`
//! prompt_fallback = "deny"   # answers prompts when the client cannot elicit: deny | allow
//!
//! [[mcp_servers]]            # an external MCP server; its tools become the toolset `id`
//! id = "github"
//! prefix = "gh"              # tools published as gh__<tool>
//! command = "github-mcp"
//! args = ["--stdio"]
//! env = { GITHUB_TOKEN = "…" }
//! cwd = "."                  # optional, relative to this file
//! startup_timeout_secs = 10
//! call_timeout_secs = 60
//! side_effects = { list_issues = "read" }   # overrides; unannotated tools count as execute
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dispatcher_core::hooks::{CommandHook, HookMatcher};
use dispatcher_core::{
    ConfirmationPolicy, DispatcherConfig, InterruptBehavior, OnExecuteError, SandboxMode,
};
use serde::{Deserialize, Serialize};

/// The file name looked for in the working directory and the user's config directory.
pub const FILE_NAME: &str = "toolhost.toml";

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Plugin directories, relative to the config file's directory.
    #[serde(default)]
    pub plugin_dirs: Vec<PathBuf>,
    /// Capabilities enabled for gated tools.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Per-session concurrency cap.
    #[serde(default = "default_concurrency")]
    pub max_concurrency: usize,
    /// What a failed `execute` call does to its batch.
    #[serde(default)]
    pub on_execute_error: OnExecuteError,
    /// Where tools run (only `host` is supported).
    #[serde(default)]
    pub sandbox: SandboxMode,
    /// Per-tool concurrency caps.
    #[serde(default)]
    pub tool_concurrency: BTreeMap<String, usize>,
    /// Per-tool interrupt behaviour.
    #[serde(default)]
    pub interrupt: BTreeMap<String, InterruptBehavior>,
    /// Result size caps.
    #[serde(default)]
    pub results: Results,
    /// External command hooks.
    #[serde(default)]
    pub hooks: Hooks,
    /// Timeouts.
    #[serde(default)]
    pub timeouts: Timeouts,
    /// The confirmation policy.
    #[serde(default)]
    pub tool_confirmation: ConfirmationPolicy,
    /// Separator between a toolset prefix and a tool name (default `__`).
    #[serde(default = "default_separator")]
    pub toolset_separator: String,
    /// The MCP server (`toolhost serve --mcp`).
    #[serde(default)]
    pub mcp: McpConfig,
    /// External MCP servers whose tools become toolsets.
    #[serde(default)]
    pub mcp_servers: Vec<mcp_toolsets::McpServerConfig>,
}

fn default_separator() -> String {
    "__".into()
}

/// The `[mcp]` table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// What answers a `prompt` when the MCP client cannot be asked (no elicitation):
    /// `deny` (default) or `allow`.
    #[serde(default)]
    pub prompt_fallback: crate::mcp_server::PromptFallback,
}

fn default_concurrency() -> usize {
    4
}

impl Default for Config {
    fn default() -> Self {
        Config {
            plugin_dirs: Vec::new(),
            capabilities: Vec::new(),
            max_concurrency: default_concurrency(),
            on_execute_error: OnExecuteError::default(),
            sandbox: SandboxMode::default(),
            tool_concurrency: BTreeMap::new(),
            interrupt: BTreeMap::new(),
            results: Results::default(),
            hooks: Hooks::default(),
            timeouts: Timeouts::default(),
            tool_confirmation: ConfirmationPolicy::default(),
            toolset_separator: default_separator(),
            mcp: McpConfig::default(),
            mcp_servers: Vec::new(),
        }
    }
}

/// The `[results]` table: result size caps, in characters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Results {
    /// Characters of text a result may have before it is spooled (default 100 000).
    #[serde(default = "default_max_chars")]
    pub max_chars: usize,
    /// Characters of a spooled result shown inline (default 2 000).
    #[serde(default = "default_preview_chars")]
    pub preview_chars: usize,
    /// Per-tool caps.
    #[serde(default)]
    pub per_tool: BTreeMap<String, usize>,
}

fn default_max_chars() -> usize {
    100_000
}
fn default_preview_chars() -> usize {
    dispatcher_core::spool::DEFAULT_PREVIEW_CHARS
}

impl Default for Results {
    fn default() -> Self {
        Results {
            max_chars: default_max_chars(),
            preview_chars: default_preview_chars(),
            per_tool: BTreeMap::new(),
        }
    }
}

/// The `[hooks]` table: external commands run around calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hooks {
    /// Run before a call, after validation ([`CommandHook`] says what they may answer).
    #[serde(default)]
    pub pre_tool_use: Vec<HookConfig>,
    /// Run after a call, with its result.
    #[serde(default)]
    pub post_tool_use: Vec<HookConfig>,
}

/// One `[[hooks.pre_tool_use]]` or `[[hooks.post_tool_use]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// The command line, run with `/bin/sh -c`.
    pub command: String,
    /// The tools it runs for (default: every tool).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// How long it may run (default 10 s); a hook that takes longer is killed and ignored.
    #[serde(default = "d10")]
    pub timeout_secs: f64,
}

/// The `[timeouts]` table, in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    /// none/read/write tools.
    #[serde(default = "d60")]
    pub default_secs: f64,
    /// execute/network tools.
    #[serde(default = "d600")]
    pub execute_secs: f64,
    /// Confirmation prompts.
    #[serde(default = "d300")]
    pub confirmation_secs: f64,
    /// Grace period after cancellation.
    #[serde(default = "d30")]
    pub cancel_grace_secs: f64,
    /// Slow-call warning threshold.
    #[serde(default = "d10")]
    pub slow_call_warn_secs: f64,
    /// Per-tool timeouts.
    #[serde(default)]
    pub per_tool: BTreeMap<String, f64>,
}

fn d60() -> f64 {
    60.0
}
fn d600() -> f64 {
    600.0
}
fn d300() -> f64 {
    300.0
}
fn d30() -> f64 {
    30.0
}
fn d10() -> f64 {
    10.0
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            default_secs: d60(),
            execute_secs: d600(),
            confirmation_secs: d300(),
            cancel_grace_secs: d30(),
            slow_call_warn_secs: d10(),
            per_tool: BTreeMap::new(),
        }
    }
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
    /// The file is not valid TOML, or a key is unknown or has the wrong type.
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

fn positive(file: &Path, key: &str, secs: f64) -> Result<Duration, ConfigError> {
    if secs.is_finite() && secs > 0.0 && secs < 1.0e9 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(ConfigError::Invalid {
            file: file.to_path_buf(),
            key: key.into(),
            message: format!("expected a positive number of seconds, found {secs}"),
            location: None,
        })
    }
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
        config.validate(file)?;
        Ok(config)
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
            let expanded = dispatcher_core::policy::expand_home(dir);
            *dir = if expanded.is_absolute() {
                expanded
            } else {
                base.join(expanded)
            };
        }
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

    fn validate(&self, file: &Path) -> Result<(), ConfigError> {
        if !matches!(
            self.toolset_separator.as_str(),
            "__" | "_" | "-" | "--" | "."
        ) {
            return Err(ConfigError::Invalid {
                file: file.to_path_buf(),
                key: "toolset_separator".into(),
                message: format!(
                    "expected one of \"__\", \"_\", \"-\", \"--\" or \".\" (providers reject other characters), found {:?}",
                    self.toolset_separator
                ),
                location: None,
            });
        }
        if self.max_concurrency == 0 || self.max_concurrency > 1024 {
            return Err(ConfigError::Invalid {
                file: file.to_path_buf(),
                key: "max_concurrency".into(),
                message: format!(
                    "expected an integer from 1 to 1024, found {}",
                    self.max_concurrency
                ),
                location: None,
            });
        }
        let mut ids = std::collections::HashSet::new();
        let mut prefixes = std::collections::HashSet::new();
        for (i, server) in self.mcp_servers.iter().enumerate() {
            let key = |k: &str| format!("mcp_servers[{i}].{k}");
            let bad = |k: &str, message: String| ConfigError::Invalid {
                file: file.to_path_buf(),
                key: key(k),
                message,
                location: None,
            };
            if server.id.is_empty() || !ids.insert(server.id.clone()) {
                return Err(bad(
                    "id",
                    format!("expected a unique, non-empty id, found {:?}", server.id),
                ));
            }
            let valid_prefix = !server.prefix.is_empty()
                && server.prefix.len() <= 32
                && server
                    .prefix
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid_prefix || !prefixes.insert(server.prefix.clone()) {
                return Err(bad(
                    "prefix",
                    format!(
                        "expected a unique prefix of 1-32 letters, digits, '_' or '-', found {:?}",
                        server.prefix
                    ),
                ));
            }
            if server.command.is_empty() {
                return Err(bad("command", "expected the program to run".into()));
            }
            for (k, v) in [
                ("startup_timeout_secs", server.startup_timeout_secs),
                ("call_timeout_secs", server.call_timeout_secs),
            ] {
                if !(v.is_finite() && v > 0.0) {
                    return Err(bad(
                        k,
                        format!("expected a positive number of seconds, found {v}"),
                    ));
                }
            }
        }
        let bad = |key: String, message: String| ConfigError::Invalid {
            file: file.to_path_buf(),
            key,
            message,
            location: None,
        };
        self.sandbox
            .check_supported()
            .map_err(|m| bad("sandbox".into(), m))?;
        for (tool, cap) in &self.tool_concurrency {
            if *cap == 0 || *cap > 1024 {
                return Err(bad(
                    format!("tool_concurrency.{tool}"),
                    format!("expected an integer from 1 to 1024, found {cap}"),
                ));
            }
        }
        let r = &self.results;
        for (key, n) in [
            ("results.max_chars".to_string(), r.max_chars),
            ("results.preview_chars".to_string(), r.preview_chars),
        ]
        .into_iter()
        .chain(
            r.per_tool
                .iter()
                .map(|(t, n)| (format!("results.per_tool.{t}"), *n)),
        ) {
            if n == 0 {
                return Err(bad(
                    key,
                    "expected a positive number of characters, found 0".into(),
                ));
            }
        }
        for (table, hooks) in [
            ("hooks.pre_tool_use", &self.hooks.pre_tool_use),
            ("hooks.post_tool_use", &self.hooks.post_tool_use),
        ] {
            for (i, hook) in hooks.iter().enumerate() {
                if hook.command.trim().is_empty() {
                    return Err(bad(
                        format!("{table}[{i}].command"),
                        "expected the command line to run".into(),
                    ));
                }
                positive(
                    file,
                    &format!("{table}[{i}].timeout_secs"),
                    hook.timeout_secs,
                )?;
            }
        }
        self.dispatcher_config(file).map(|_| ())
    }

    /// The command hooks this config declares: (pre-use, post-use).
    pub fn command_hooks(&self) -> (Vec<CommandHook>, Vec<CommandHook>) {
        let make = |h: &HookConfig| CommandHook {
            command: h.command.clone(),
            matcher: match &h.tools {
                Some(tools) => HookMatcher::Tools(tools.clone()),
                None => HookMatcher::All,
            },
            timeout: Duration::from_secs_f64(h.timeout_secs.clamp(0.001, 1.0e6)),
        };
        (
            self.hooks.pre_tool_use.iter().map(make).collect(),
            self.hooks.post_tool_use.iter().map(make).collect(),
        )
    }

    /// The dispatcher limits this config sets.
    pub fn dispatcher_config(&self, file: &Path) -> Result<DispatcherConfig, ConfigError> {
        let t = &self.timeouts;
        let mut tool_timeouts = std::collections::HashMap::new();
        for (tool, secs) in &t.per_tool {
            tool_timeouts.insert(
                tool.clone(),
                positive(file, &format!("timeouts.per_tool.{tool}"), *secs)?,
            );
        }
        Ok(DispatcherConfig {
            max_concurrency: self.max_concurrency,
            default_timeout: positive(file, "timeouts.default_secs", t.default_secs)?,
            execute_timeout: positive(file, "timeouts.execute_secs", t.execute_secs)?,
            tool_timeouts,
            confirmation_timeout: positive(
                file,
                "timeouts.confirmation_secs",
                t.confirmation_secs,
            )?,
            cancel_grace: positive(file, "timeouts.cancel_grace_secs", t.cancel_grace_secs)?,
            slow_call_threshold: positive(
                file,
                "timeouts.slow_call_warn_secs",
                t.slow_call_warn_secs,
            )?,
            max_result_chars: self.results.max_chars,
            tool_result_chars: self.results.per_tool.clone().into_iter().collect(),
            result_preview_chars: self.results.preview_chars,
            tool_concurrency: self.tool_concurrency.clone().into_iter().collect(),
            on_execute_error: self.on_execute_error,
            interrupt: self.interrupt.clone().into_iter().collect(),
            sandbox: self.sandbox,
            ..DispatcherConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dispatcher_core::Mode;
    use tool_api::SideEffect;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("toolhost.toml"), text)
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
    fn scheduling_results_and_hooks_keys_reach_the_dispatcher_config() {
        let c = parse(
            r#"
            on_execute_error = "cancel_siblings"
            sandbox = "host"
            [tool_concurrency]
            shell = 1
            [interrupt]
            write_file = "block"
            [results]
            max_chars = 5000
            preview_chars = 100
            [results.per_tool]
            shell = 300
            [[hooks.pre_tool_use]]
            command = "exit 0"
            tools = ["shell"]
            timeout_secs = 2
            [[hooks.post_tool_use]]
            command = "exit 0"
            "#,
        )
        .unwrap();
        let d = c.dispatcher_config(Path::new("toolhost.toml")).unwrap();
        assert_eq!(d.on_execute_error, OnExecuteError::CancelSiblings);
        assert_eq!(d.tool_concurrency["shell"], 1);
        assert_eq!(d.interrupt["write_file"], InterruptBehavior::Block);
        assert_eq!((d.max_result_chars, d.result_preview_chars), (5000, 100));
        assert_eq!(d.tool_result_chars["shell"], 300);
        let (pre, post) = c.command_hooks();
        assert_eq!((pre.len(), post.len()), (1, 1));
        assert!(pre[0].matcher.matches("shell") && !pre[0].matcher.matches("read_file"));
        assert_eq!(pre[0].timeout, Duration::from_secs(2));
    }

    #[test]
    fn unsupported_sandbox_mode_is_refused_with_a_clear_error() {
        let e = parse("sandbox = \"read-only\"").unwrap_err().to_string();
        assert!(
            e.contains("key `sandbox`")
                && e.contains("'read-only' is not supported")
                && e.contains("supported: host"),
            "{e}"
        );
        let e = parse("sandbox = \"jail\"").unwrap_err().to_string();
        assert!(e.contains("sandbox") && e.contains("host"), "{e}");
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

    #[test]
    fn syntax_error_says_where() {
        let e = parse("plugin_dirs = [").unwrap_err().to_string();
        assert!(e.contains("toolhost.toml") && e.contains("line 1"), "{e}");
    }
}
