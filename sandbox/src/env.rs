//! The environment a confined command starts with ([`EnvSettings`], `[sandbox.env]`):
//! by default the host's, minus every variable whose name says it holds a secret.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use serde::{Deserialize, Serialize};

/// Words that mark a variable as secret, anywhere in its name, in any case.
pub const SECRET_WORDS: &[&str] = &[
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
];

/// The prefix of toolhost's own variables, never passed on (a child that needs one, such
/// as the nesting depth, is given it explicitly).
pub const HOST_PREFIX: &str = "TOOLHOST_";

/// Which of the host's variables a command inherits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Inherit {
    /// Every variable (toolhost's own `TOOLHOST_*` excepted).
    All,
    /// Every variable but those whose names contain a [`SECRET_WORDS`] word, and
    /// toolhost's own (the default).
    #[default]
    Filtered,
    /// None: only `keep` and `set`.
    None,
}

/// `[sandbox.env]`: what commands and stdio MCP servers get of the host's environment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvSettings {
    /// `all`, `filtered` (default) or `none`.
    pub inherit: Inherit,
    /// Variables passed on whatever `inherit` says (a build's `CARGO_REGISTRY_TOKEN`, say).
    pub keep: Vec<String>,
    /// Variables set for every command (after the others).
    pub set: BTreeMap<String, String>,
}

/// Whether a variable's name marks it as secret: it contains a [`SECRET_WORDS`] word (any
/// case) or starts with [`HOST_PREFIX`].
pub fn is_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.starts_with(HOST_PREFIX) || SECRET_WORDS.iter().any(|w| upper.contains(w))
}

impl EnvSettings {
    /// Whether a variable named `name` is passed on.
    pub fn passes(&self, name: &OsStr) -> bool {
        let name = name.to_string_lossy();
        if self.keep.iter().any(|k| *k == name) {
            return true;
        }
        match self.inherit {
            Inherit::All => !name.to_ascii_uppercase().starts_with(HOST_PREFIX),
            Inherit::Filtered => !is_secret(&name),
            Inherit::None => false,
        }
    }

    /// The environment of a command, from the host's `vars`: what passes, then `set`.
    pub fn environment(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> =
            vars.into_iter().filter(|(k, _)| self.passes(k)).collect();
        for (k, v) in &self.set {
            env.retain(|(name, _)| name != k.as_str());
            env.push((k.into(), v.into()));
        }
        env
    }

    /// The names of `vars` that are withheld, sorted.
    pub fn withheld(&self, vars: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<String> {
        let mut names: Vec<String> = vars
            .into_iter()
            .filter(|(k, _)| !self.passes(k))
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Sets the environment of `command` from the host's: clears it, then adds what passes
    /// and `set`.
    pub fn apply(&self, command: &mut std::process::Command) {
        command
            .env_clear()
            .envs(self.environment(std::env::vars_os()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(names: &[&str]) -> Vec<(OsString, OsString)> {
        names.iter().map(|n| ((*n).into(), "v".into())).collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        env.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn secret_names_are_withheld_by_default_in_any_case() {
        let host = vars(&[
            "PATH",
            "HOME",
            "ANTHROPIC_API_KEY",
            "github_token",
            "DB_Password",
            "AWS_SECRET_ACCESS_KEY",
            "SSH_AUTH_SOCK",
            "SESSION_COOKIE",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "TOOLHOST_REMOTE_TOKEN",
            "TOOLHOST_NESTING",
            "LANG",
        ]);
        let env = EnvSettings::default().environment(host.clone());
        assert_eq!(names(&env), ["PATH", "HOME", "LANG"]);
        assert_eq!(EnvSettings::default().withheld(host).len(), 9);
    }

    #[test]
    fn keep_passes_a_name_and_set_adds_or_replaces() {
        let settings = EnvSettings {
            inherit: Inherit::Filtered,
            keep: vec!["CARGO_REGISTRY_TOKEN".into()],
            set: [("PATH".to_string(), "/bin".to_string())].into(),
        };
        let env = settings.environment(vars(&["PATH", "CARGO_REGISTRY_TOKEN", "NPM_TOKEN"]));
        assert_eq!(names(&env), ["CARGO_REGISTRY_TOKEN", "PATH"]);
        assert_eq!(env[1].1, "/bin");
    }

    #[test]
    fn all_passes_everything_but_toolhosts_own_and_none_passes_nothing() {
        let host = vars(&["PATH", "API_KEY", "TOOLHOST_X"]);
        let all = EnvSettings {
            inherit: Inherit::All,
            ..EnvSettings::default()
        };
        assert_eq!(names(&all.environment(host.clone())), ["PATH", "API_KEY"]);
        let none = EnvSettings {
            inherit: Inherit::None,
            ..EnvSettings::default()
        };
        assert!(none.environment(host).is_empty());
    }
}
