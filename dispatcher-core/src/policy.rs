//! Who decides whether a call may run without asking: the confirmation policy.
//!
//! # Policy
//!
//! [`ConfirmationPolicy`] deserializes from the `[tool_confirmation]` table, in TOML:
//!
//! ```toml
//! [tool_confirmation.default]
//! NONE = "auto"        # never prompt
//! READ = "auto"
//! WRITE = "prompt"     # the defaults: write, execute and network prompt
//! EXECUTE = "prompt"
//! NETWORK = "prompt"
//!
//! [tool_confirmation.per_tool]
//! git_status = "auto"
//! npm_install = "prompt"
//!
//! [tool_confirmation]
//! trusted_workspaces = ["~/code/myproject"]
//!
//! [tool_confirmation.trusted_workspace_overrides]
//! EXECUTE = "prompt"
//! ```
//!
//! Class names are accepted in upper or lower case; modes are `auto`, `prompt`, `deny`.
//!
//! # How a mode is chosen for a call
//!
//! 1. `per_tool.<name>`, if set, decides.
//! 2. In a trusted workspace (the session root is one of `trusted_workspaces` or inside
//!    one), `trusted_workspace_overrides.<class>` decides if set; otherwise the bar is
//!    lowered: a class that would `prompt` runs `auto`, and `deny` stays `deny`.
//! 3. Otherwise `default.<class>` decides.
//!
//! Then pre-use hooks ([`crate::hooks`]) have their say: a hook's `Deny` denies, its `Ask`
//! turns `auto` into `prompt`, and its `Allow` turns `prompt` into `auto`. Finally a session
//! approval ("always allow this tool") turns `prompt` into `auto` for the rest of the
//! session. Neither a hook nor an approval ever overrides a `deny` of this policy.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tool_api::SideEffect;

/// What to do with a call of a given class or tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Run without asking.
    #[serde(alias = "AUTO")]
    Auto,
    /// Ask the user first.
    #[serde(alias = "PROMPT")]
    Prompt,
    /// Never run.
    #[serde(alias = "DENY")]
    Deny,
}

impl Mode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Prompt => "prompt",
            Mode::Deny => "deny",
        }
    }
}

/// A mode per side-effect class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassModes {
    /// Mode for `none` tools (default `auto`).
    #[serde(default = "auto", alias = "NONE")]
    pub none: Mode,
    /// Mode for `read` tools (default `auto`).
    #[serde(default = "auto", alias = "READ")]
    pub read: Mode,
    /// Mode for `write` tools (default `prompt`).
    #[serde(default = "prompt", alias = "WRITE")]
    pub write: Mode,
    /// Mode for `execute` tools (default `prompt`).
    #[serde(default = "prompt", alias = "EXECUTE")]
    pub execute: Mode,
    /// Mode for `network` tools (default `prompt`).
    #[serde(default = "prompt", alias = "NETWORK")]
    pub network: Mode,
}

fn auto() -> Mode {
    Mode::Auto
}
fn prompt() -> Mode {
    Mode::Prompt
}

impl Default for ClassModes {
    fn default() -> Self {
        ClassModes {
            none: Mode::Auto,
            read: Mode::Auto,
            write: Mode::Prompt,
            execute: Mode::Prompt,
            network: Mode::Prompt,
        }
    }
}

impl ClassModes {
    /// The mode for a class.
    pub fn get(&self, class: SideEffect) -> Mode {
        match class {
            SideEffect::None => self.none,
            SideEffect::Read => self.read,
            SideEffect::Write => self.write,
            SideEffect::Execute => self.execute,
            SideEffect::Network => self.network,
        }
    }

    /// Every class in `auto` (what `--yes` means).
    pub fn all_auto() -> Self {
        ClassModes {
            none: Mode::Auto,
            read: Mode::Auto,
            write: Mode::Auto,
            execute: Mode::Auto,
            network: Mode::Auto,
        }
    }
}

/// Optional modes per class (the trusted-workspace overrides).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassOverrides {
    /// Override for `none`.
    #[serde(default, alias = "NONE", skip_serializing_if = "Option::is_none")]
    pub none: Option<Mode>,
    /// Override for `read`.
    #[serde(default, alias = "READ", skip_serializing_if = "Option::is_none")]
    pub read: Option<Mode>,
    /// Override for `write`.
    #[serde(default, alias = "WRITE", skip_serializing_if = "Option::is_none")]
    pub write: Option<Mode>,
    /// Override for `execute`.
    #[serde(default, alias = "EXECUTE", skip_serializing_if = "Option::is_none")]
    pub execute: Option<Mode>,
    /// Override for `network`.
    #[serde(default, alias = "NETWORK", skip_serializing_if = "Option::is_none")]
    pub network: Option<Mode>,
}

impl ClassOverrides {
    /// The override for a class, if any.
    pub fn get(&self, class: SideEffect) -> Option<Mode> {
        match class {
            SideEffect::None => self.none,
            SideEffect::Read => self.read,
            SideEffect::Write => self.write,
            SideEffect::Execute => self.execute,
            SideEffect::Network => self.network,
        }
    }
}

/// The `[tool_confirmation]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmationPolicy {
    /// Mode per class.
    #[serde(default)]
    pub default: ClassModes,
    /// Mode per tool name; wins over everything else.
    #[serde(default)]
    pub per_tool: BTreeMap<String, Mode>,
    /// Workspaces where the bar is lowered (`~` is expanded).
    #[serde(default)]
    pub trusted_workspaces: Vec<PathBuf>,
    /// Modes that still apply inside trusted workspaces.
    #[serde(default)]
    pub trusted_workspace_overrides: ClassOverrides,
}

/// The outcome of the policy for one call, with the rule that produced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDecision {
    /// The mode.
    pub mode: Mode,
    /// The config key that decided, e.g. `tool_confirmation.default.write`.
    pub rule: std::borrow::Cow<'static, str>,
    /// The rule names this tool (`tool_confirmation.per_tool.NAME`): what the user said
    /// about exactly this tool, which a pre-use hook's allow does not override.
    pub explicit: bool,
}

/// Expands a leading `~` to `$HOME`.
pub fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => path.to_path_buf(),
    }
}

impl ConfirmationPolicy {
    /// Whether `workspace` (a canonical path) is, or lies inside, a trusted workspace.
    pub fn is_trusted(&self, workspace: &Path) -> bool {
        self.trusted_workspaces.iter().any(|t| {
            let t = expand_home(t);
            let t = std::fs::canonicalize(&t).unwrap_or(t);
            workspace.starts_with(&t)
        })
    }

    /// The mode for a call of `tool` (of class `class`) in `workspace`.
    pub fn decide(&self, tool: &str, class: SideEffect, workspace: &Path) -> PolicyDecision {
        let class_key = class.as_str();
        if let Some(mode) = self.per_tool.get(tool) {
            return PolicyDecision {
                mode: *mode,
                rule: format!("tool_confirmation.per_tool.{tool}").into(),
                explicit: true,
            };
        }
        let default = self.default.get(class);
        if self.is_trusted(workspace) {
            if let Some(mode) = self.trusted_workspace_overrides.get(class) {
                return PolicyDecision {
                    mode,
                    rule: format!("tool_confirmation.trusted_workspace_overrides.{class_key}")
                        .into(),
                    explicit: false,
                };
            }
            if default == Mode::Prompt {
                return PolicyDecision {
                    mode: Mode::Auto,
                    rule: "tool_confirmation.trusted_workspaces".into(),
                    explicit: false,
                };
            }
        }
        // Static text: the common case allocates nothing.
        let rule = match class {
            SideEffect::None => "tool_confirmation.default.none",
            SideEffect::Read => "tool_confirmation.default.read",
            SideEffect::Write => "tool_confirmation.default.write",
            SideEffect::Execute => "tool_confirmation.default.execute",
            SideEffect::Network => "tool_confirmation.default.network",
        };
        debug_assert_eq!(rule, format!("tool_confirmation.default.{class_key}"));
        PolicyDecision {
            mode: default,
            rule: rule.into(),
            explicit: false,
        }
    }
}
