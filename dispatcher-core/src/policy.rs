//! Who decides whether a call may run without asking: [`ConfirmationPolicy`].

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

/// One value per side-effect class: the modes of `default` ([`ClassModes`]) and the
/// optional ones of `trusted_workspace_overrides` ([`ClassOverrides`]). A class left out of
/// the table takes its value from [`Default`]: the default modes below, or no override.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    default,
    bound(
        serialize = "T: Serialize + Unset",
        deserialize = "T: Deserialize<'de>, PerClass<T>: Default"
    )
)]
pub struct PerClass<T> {
    /// For `none` tools.
    #[serde(alias = "NONE", skip_serializing_if = "Unset::unset")]
    pub none: T,
    /// For `read` tools.
    #[serde(alias = "READ", skip_serializing_if = "Unset::unset")]
    pub read: T,
    /// For `write` tools.
    #[serde(alias = "WRITE", skip_serializing_if = "Unset::unset")]
    pub write: T,
    /// For `execute` tools.
    #[serde(alias = "EXECUTE", skip_serializing_if = "Unset::unset")]
    pub execute: T,
    /// For `network` tools.
    #[serde(alias = "NETWORK", skip_serializing_if = "Unset::unset")]
    pub network: T,
}

/// A mode per side-effect class (`[tool_confirmation.default]`).
pub type ClassModes = PerClass<Mode>;

/// Optional modes per class (`[tool_confirmation.trusted_workspace_overrides]`).
pub type ClassOverrides = PerClass<Option<Mode>>;

/// Whether a value is left out when a table is written back (an override not set).
pub trait Unset {
    /// `true` when there is nothing to write.
    fn unset(&self) -> bool;
}

impl Unset for Mode {
    fn unset(&self) -> bool {
        false
    }
}

impl Unset for Option<Mode> {
    fn unset(&self) -> bool {
        self.is_none()
    }
}

/// The default modes, the one table of them: what runs without asking and what prompts.
impl Default for ClassModes {
    fn default() -> Self {
        PerClass {
            none: Mode::Auto,
            read: Mode::Auto,
            write: Mode::Prompt,
            execute: Mode::Prompt,
            network: Mode::Prompt,
        }
    }
}

/// No override for any class.
impl Default for ClassOverrides {
    fn default() -> Self {
        PerClass::every(None)
    }
}

impl<T: Copy> PerClass<T> {
    /// The same value for every class.
    pub fn every(value: T) -> Self {
        PerClass {
            none: value,
            read: value,
            write: value,
            execute: value,
            network: value,
        }
    }

    /// The value for a class.
    pub fn get(&self, class: SideEffect) -> T {
        match class {
            SideEffect::None => self.none,
            SideEffect::Read => self.read,
            SideEffect::Write => self.write,
            SideEffect::Execute => self.execute,
            SideEffect::Network => self.network,
        }
    }
}

impl ClassModes {
    /// Every class in `auto` (what `--yes` means).
    pub fn all_auto() -> Self {
        PerClass::every(Mode::Auto)
    }
}

/// Who decides whether a call may run without asking: the confirmation policy.
///
/// # Policy
///
/// [`ConfirmationPolicy`] deserializes from the `[tool_confirmation]` table, in TOML:
///
/// ```toml
/// [tool_confirmation.default]
/// none = "auto"        # never prompt
/// read = "auto"
/// write = "prompt"     # the defaults: write, execute and network prompt
/// execute = "prompt"
/// network = "prompt"
///
/// [tool_confirmation.per_tool]
/// git_status = "auto"
/// npm_install = "prompt"
///
/// [tool_confirmation]
/// trusted_workspaces = ["~/code/myproject"]
///
/// [tool_confirmation.trusted_workspace_overrides]
/// execute = "prompt"
/// ```
///
/// Class names are accepted in upper or lower case; modes are `auto`, `prompt`, `deny`.
///
/// # How a mode is chosen for a call
///
/// 1. `per_tool.<name>`, if set, decides.
/// 2. In a trusted workspace (the session root is one of `trusted_workspaces` or inside
///    one), `trusted_workspace_overrides.<class>` decides if set; otherwise the bar is
///    lowered: a class that would `prompt` runs `auto`, and `deny` stays `deny`.
/// 3. Otherwise `default.<class>` decides.
///
/// Then pre-use hooks ([`crate::PreUseHook`]) have their say: a hook's `Deny` denies, its `Ask`
/// turns `auto` into `prompt`, and its `Allow` turns `prompt` into `auto`. Finally a session
/// approval ("always allow this tool") turns `prompt` into `auto` for the rest of the
/// session. Neither a hook nor an approval ever overrides a `deny` of this policy.
///
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
    /// Rules over whole calls decided ([`crate::CallRules`]), with what they say beyond
    /// `rule` (how to allow a refused call): a prompt they ask for is asked each time (an
    /// earlier "always allow" of the tool does not answer for these arguments).
    pub from_rules: Option<std::sync::Arc<str>>,
}

/// Modes that narrow a session's confirmation policy: a caller's access rule. A mode here
/// applies only where it is stricter than what the policy decided (`auto` < `prompt` <
/// `deny`), and then the decision names `rule` (`access[1].modes.write`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Narrowing {
    /// The rule's config key, e.g. `access[1]`.
    pub rule: String,
    /// Per side-effect class.
    pub classes: ClassOverrides,
    /// Per tool name; wins over the class.
    pub per_tool: std::collections::BTreeMap<String, Mode>,
}

impl Narrowing {
    /// `decision` narrowed by this rule for `tool` of `class`.
    pub fn narrow(
        &self,
        decision: PolicyDecision,
        tool: &str,
        class: SideEffect,
    ) -> PolicyDecision {
        let (mode, key) = match self.per_tool.get(tool) {
            Some(mode) => (Some(*mode), format!("{}.per_tool.{tool}", self.rule)),
            None => (
                self.classes.get(class),
                format!("{}.modes.{}", self.rule, class.as_str()),
            ),
        };
        match mode {
            Some(mode) if mode > decision.mode => PolicyDecision {
                mode,
                rule: key.into(),
                explicit: true,
                from_rules: None,
            },
            _ => decision,
        }
    }
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
                from_rules: None,
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
                    from_rules: None,
                };
            }
            if default == Mode::Prompt {
                return PolicyDecision {
                    mode: Mode::Auto,
                    rule: "tool_confirmation.trusted_workspaces".into(),
                    explicit: false,
                    from_rules: None,
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
            from_rules: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: serde_json::Value) -> Result<ConfirmationPolicy, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_narrowing_only_ever_makes_a_decision_stricter_and_names_its_rule() {
        let narrowing = Narrowing {
            rule: "access[1]".into(),
            classes: ClassOverrides {
                write: Some(Mode::Deny),
                read: Some(Mode::Prompt),
                ..ClassOverrides::default()
            },
            per_tool: [("shell".to_string(), Mode::Prompt)].into(),
        };
        let ws = Path::new("/nowhere");
        let policy = ConfirmationPolicy {
            per_tool: [("shell".to_string(), Mode::Deny)].into(),
            ..ConfirmationPolicy::default()
        };
        let decide =
            |tool: &str, class| narrowing.narrow(policy.decide(tool, class, ws), tool, class);
        let write = decide("write_file", SideEffect::Write);
        assert_eq!(
            (write.mode, write.rule.as_ref()),
            (Mode::Deny, "access[1].modes.write")
        );
        let read = decide("read_file", SideEffect::Read);
        assert_eq!(
            (read.mode, read.rule.as_ref()),
            (Mode::Prompt, "access[1].modes.read")
        );
        // The policy's deny stays: the rule's prompt cannot widen it.
        let shell = decide("shell", SideEffect::Execute);
        assert_eq!(
            (shell.mode, shell.rule.as_ref()),
            (Mode::Deny, "tool_confirmation.per_tool.shell")
        );
        // A class the rule leaves alone keeps the policy's decision.
        let net = decide("fetch", SideEffect::Network);
        assert_eq!(net.rule, "tool_confirmation.default.network");
    }

    #[test]
    fn a_class_left_out_keeps_its_default_mode_and_has_no_override() {
        let p = policy(serde_json::json!({
            "default": {"WRITE": "auto"},
            "trusted_workspace_overrides": {"execute": "prompt"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let expected = ClassModes {
            write: Mode::Auto,
            ..ClassModes::default()
        };
        assert_eq!(p.default, expected);
        assert_eq!(
            p.trusted_workspace_overrides.get(SideEffect::Execute),
            Some(Mode::Prompt)
        );
        assert_eq!(p.trusted_workspace_overrides.get(SideEffect::Write), None);
    }

    #[test]
    fn an_unknown_class_is_refused_by_name() {
        for table in ["default", "trusted_workspace_overrides"] {
            let result = policy(serde_json::json!({table: {"delete": "deny"}}));
            let Err(err) = result else {
                panic!("{table}: an unknown class was taken");
            };
            assert!(err.contains("unknown field `delete`"), "{table}: {err}");
        }
    }

    #[test]
    fn overrides_write_back_only_what_is_set() {
        let overrides = ClassOverrides {
            network: Some(Mode::Deny),
            ..ClassOverrides::default()
        };
        assert_eq!(
            serde_json::to_value(overrides).ok(),
            Some(serde_json::json!({"network": "deny"}))
        );
        assert_eq!(
            serde_json::to_value(ClassModes::default()).ok(),
            Some(
                serde_json::json!({"none": "auto", "read": "auto", "write": "prompt", "execute": "prompt", "network": "prompt"})
            )
        );
    }
}
