//! The one sandbox settings record ([`Settings`], the `[sandbox]` table) that config,
//! the dispatcher, plugin workers, MCP servers and the built-ins share, and what it makes of
//! a command: its [`Confinement`].
//!
//! A command under `read-only` or `workspace-write` reads and runs the whole filesystem,
//! the user's home included, except the secret locations of the deny list
//! ([`DEFAULT_DENY_READ`], `deny_read`, minus `allow_read`), which are hidden from it. It
//! writes its private temporary directory and, under `workspace-write`, the workspace,
//! `writable_roots` and the per-user caches a build writes (`writable_caches`, default
//! [`DEFAULT_CACHES`]). With network it goes out only through the egress proxy, to the
//! hosts `[sandbox.network] allow` names.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::SandboxError;
use crate::env::EnvSettings;
use crate::hosts::HostList;
use crate::policy::{CommandMode, Confinement, Network};

/// Where a tool's calls run, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// With the user's rights: no OS sandbox.
    Host,
    /// Reads everything but the deny list; writes only a private temporary directory.
    ReadOnly,
    /// Reads everything but the deny list; writes the workspace, a private temporary
    /// directory, the writable roots and caches (the default).
    WorkspaceWrite,
    /// On another host (per tool only; the host application routes it there).
    Remote,
}

impl Mode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Host => "host",
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::Remote => "remote",
        }
    }

    /// The command mode of an OS sandbox, or `None` for `host` and `remote`.
    pub fn command(self) -> Option<CommandMode> {
        match self {
            Mode::ReadOnly => Some(CommandMode::ReadOnly),
            Mode::WorkspaceWrite => Some(CommandMode::WorkspaceWrite),
            Mode::Host | Mode::Remote => None,
        }
    }

    /// Reads a mode's name: one of the three this host provides, or `remote` where
    /// `remote` is true.
    pub fn parse(text: &str, remote: bool) -> Result<Mode, String> {
        let mode = match text {
            "host" => Mode::Host,
            "read-only" => Mode::ReadOnly,
            "workspace-write" => Mode::WorkspaceWrite,
            "remote" if remote => Mode::Remote,
            "remote" => {
                return Err("sandbox mode 'remote' is for one tool only ([sandbox.per_tool] NAME = \"remote\", with a [remote] table)".into());
            }
            "container" | "microvm" | "wasm" => {
                return Err(format!(
                    "sandbox mode '{text}' is not supported by this host (supported: host, read-only, workspace-write); tools are never run outside the sandbox they were granted"
                ));
            }
            other => {
                return Err(format!(
                    "unknown sandbox mode '{other}': expected one of host, read-only, workspace-write{}",
                    if remote { ", remote" } else { "" }
                ));
            }
        };
        Ok(mode)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Mode {
    /// One of the three modes this host provides (`remote` only in `per_tool`).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Mode::parse(&text, false).map_err(de::Error::custom)
    }
}

/// A per-tool mode: as [`Mode`], `remote` included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct ToolMode(pub Mode);

impl<'de> Deserialize<'de> for ToolMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Mode::parse(&text, true)
            .map(ToolMode)
            .map_err(de::Error::custom)
    }
}

/// Secret locations no command reads, lists or stats (`~` is the home directory): keys
/// and cloud credentials, token files, password stores and keyrings, browser profiles,
/// shell histories, and the system's own secrets.
pub const DEFAULT_DENY_READ: &[&str] = &[
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.kube",
    "~/.docker/config.json",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/git/credentials",
    "~/.config/gh",
    "~/.config/hub",
    "~/.npmrc",
    "~/.yarnrc.yml",
    "~/.pypirc",
    "~/.cargo/credentials.toml",
    "~/.cargo/credentials",
    "~/.gem/credentials",
    "~/.m2/settings-security.xml",
    "~/.config/containers/auth.json",
    "~/.vault-token",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.pgpass",
    "~/.my.cnf",
    "~/.s3cfg",
    "~/.boto",
    "~/.oci",
    "~/.config/doctl",
    "~/.config/rclone",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.gnome2/keyrings",
    "~/.local/share/kwalletd",
    "~/.config/op",
    "~/.pki",
    "~/.mozilla",
    "~/.config/google-chrome",
    "~/.config/chromium",
    "~/.config/BraveSoftware",
    "~/.config/microsoft-edge",
    "~/.config/vivaldi",
    "~/snap/firefox",
    "~/snap/chromium",
    "~/.bash_history",
    "~/.zsh_history",
    "~/.zhistory",
    "~/.histfile",
    "~/.sh_history",
    "~/.local/share/fish/fish_history",
    "~/.python_history",
    "~/.node_repl_history",
    "~/.psql_history",
    "~/.mysql_history",
    "~/.sqlite_history",
    "~/.rediscli_history",
    "~/.lesshst",
    "~/.local/state/toolhost",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssh/ssh_host_dsa_key",
    "/run/secrets",
];

/// Per-user caches a build writes, writable under `workspace-write` by default: cargo's
/// registry and git checkouts, npm's cache, pip's and uv's caches, Go's build cache. A
/// trade-off: what a command writes there outlives the call (`writable_caches = []` is the
/// strict setting).
pub const DEFAULT_CACHES: &[&str] = &[
    "~/.cargo/registry",
    "~/.cargo/git",
    "~/.npm",
    "~/.cache/pip",
    "~/.cache/uv",
    "~/.cache/go-build",
];

/// The hosts a command with network may reach by default: the package registries a build
/// downloads from.
pub const DEFAULT_ALLOW: &[&str] = &[
    "crates.io",
    "index.crates.io",
    "static.crates.io",
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "pypi.org",
    "files.pythonhosted.org",
    "proxy.golang.org",
    "sum.golang.org",
];

/// `[sandbox.network]`: whether commands may use the network, and where it goes (through
/// the egress proxy). `network = true` is the short form of `enabled = true`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkSettings {
    /// Whether commands and stdio MCP servers may open connections (default no); a
    /// `network` plugin worker may, whatever this says.
    pub enabled: bool,
    /// The hosts they may reach (default [`DEFAULT_ALLOW`]; `[]`: none).
    pub allow: HostList,
    /// Hosts refused even when `allow` lists them.
    pub deny: HostList,
}

impl Default for NetworkSettings {
    fn default() -> Self {
        NetworkSettings {
            enabled: false,
            allow: default_allow(),
            deny: HostList::none(),
        }
    }
}

fn default_allow() -> HostList {
    HostList::new(DEFAULT_ALLOW).unwrap_or_default()
}

impl NetworkSettings {
    /// These settings, enabled or not.
    pub fn enabled(mut self, on: bool) -> Self {
        self.enabled = on;
        self
    }
}

impl<'de> Deserialize<'de> for NetworkSettings {
    /// `true`/`false`, or a table `{ enabled, allow, deny }` ([`NetworkEntry`] over the
    /// defaults).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(NetworkEntry::deserialize(d)?.over(&NetworkSettings::default()))
    }
}

/// A network setting as written: `network = true`/`false`, or a table `{ enabled, allow,
/// deny }`. Over settings it stands on (the defaults for `[sandbox.network]`, the host's
/// for a server's entry), a bool turns them on or off with their lists; a table turns them
/// on (unless `enabled = false`), brings its own allow list if it has one, and adds its
/// deny list to theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkEntry {
    /// `true` or `false`.
    Enabled(bool),
    /// A table.
    Own {
        /// Whether it may go out (default: yes).
        enabled: bool,
        /// Its allow list instead of the one beneath, if given.
        allow: Option<HostList>,
        /// Refused besides what the deny list beneath refuses.
        deny: HostList,
    },
}

impl NetworkEntry {
    /// `base` as this entry changes it.
    pub fn over(&self, base: &NetworkSettings) -> NetworkSettings {
        match self {
            NetworkEntry::Enabled(on) => base.clone().enabled(*on),
            NetworkEntry::Own {
                enabled,
                allow,
                deny,
            } => NetworkSettings {
                enabled: *enabled,
                allow: allow.clone().unwrap_or_else(|| base.allow.clone()),
                deny: base.deny.clone().and(deny),
            },
        }
    }
}

impl<'de> Deserialize<'de> for NetworkEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            #[serde(default)]
            enabled: Option<bool>,
            #[serde(default)]
            allow: Option<HostList>,
            #[serde(default)]
            deny: HostList,
        }
        struct EntryVisitor;
        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = NetworkEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false, or a table with `enabled`, `allow` and `deny`")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<NetworkEntry, E> {
                Ok(NetworkEntry::Enabled(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<NetworkEntry, A::Error> {
                let t = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(NetworkEntry::Own {
                    // A table that lists hosts means to reach them.
                    enabled: t.enabled.unwrap_or(true),
                    allow: t.allow,
                    deny: t.deny,
                })
            }
        }
        d.deserialize_any(EntryVisitor)
    }
}

/// The sandbox settings (`[sandbox]`): where calls run and how the programs they start
/// (commands, stdio MCP servers, an `execute` worker's programs) are confined.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// The mode of every call and stdio MCP server (default `workspace-write`).
    pub mode: Mode,
    /// Per-tool modes; win over `mode` (`remote` among them).
    pub per_tool: BTreeMap<String, Mode>,
    /// The network and where it may go.
    pub network: NetworkSettings,
    /// Paths hidden besides [`DEFAULT_DENY_READ`]; an entry with `*` is a pattern matched in
    /// the workspace (`**/.env`).
    pub deny_read: Vec<PathBuf>,
    /// The most entries of the workspace searched for `deny_read`'s patterns (default
    /// [`crate::DENY_READ_LIMIT`]); a workspace with more refuses its commands rather than
    /// run them with part of the deny list found.
    pub deny_read_limit: usize,
    /// Paths re-opened: a deny entry equal to or beneath one is not hidden.
    pub allow_read: Vec<PathBuf>,
    /// More directories writable under `workspace-write`.
    pub writable_roots: Vec<PathBuf>,
    /// Per-user caches writable under `workspace-write` (default [`DEFAULT_CACHES`]).
    pub writable_caches: Vec<PathBuf>,
    /// What commands get of the host's environment.
    pub env: EnvSettings,
    /// Where a sandbox cannot be enforced, run unconfined (logged) instead of refusing.
    pub allow_unsandboxed: bool,
    /// The host application's own state (pins, key rings, tokens, the trust store), hidden
    /// like the deny list. Set by the host application (`host_state` in the file adds to
    /// it, as `deny_read` does).
    pub host_state: Vec<PathBuf>,
}

impl Default for Settings {
    /// `workspace-write`, no network, the default deny list and caches, the filtered
    /// environment, never unconfined.
    fn default() -> Self {
        Settings {
            mode: Mode::WorkspaceWrite,
            per_tool: BTreeMap::new(),
            network: NetworkSettings::default(),
            deny_read: Vec::new(),
            deny_read_limit: crate::glob::WALK_LIMIT,
            allow_read: Vec::new(),
            writable_roots: Vec::new(),
            writable_caches: DEFAULT_CACHES.iter().map(PathBuf::from).collect(),
            env: EnvSettings::default(),
            allow_unsandboxed: false,
            host_state: Vec::new(),
        }
    }
}

impl<'de> Deserialize<'de> for Settings {
    /// A table, or a string for the mode alone (`sandbox = "host"`).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            #[serde(default)]
            mode: Option<Mode>,
            #[serde(default)]
            per_tool: BTreeMap<String, ToolMode>,
            #[serde(default)]
            network: Option<NetworkSettings>,
            #[serde(default)]
            deny_read: Vec<PathBuf>,
            #[serde(default)]
            deny_read_limit: Option<usize>,
            #[serde(default, alias = "readable_roots")]
            allow_read: Vec<PathBuf>,
            #[serde(default)]
            writable_roots: Vec<PathBuf>,
            #[serde(default)]
            writable_caches: Option<Vec<PathBuf>>,
            #[serde(default)]
            env: EnvSettings,
            #[serde(default)]
            allow_unsandboxed: bool,
            #[serde(default)]
            host_state: Vec<PathBuf>,
        }
        struct SettingsVisitor;
        impl<'de> Visitor<'de> for SettingsVisitor {
            type Value = Settings;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a [sandbox] table, or a mode: \"host\", \"read-only\" or \"workspace-write\"",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Settings, E> {
                Ok(Settings {
                    mode: Mode::parse(v, false).map_err(E::custom)?,
                    ..Settings::default()
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Settings, A::Error> {
                let t = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                for pattern in t.deny_read.iter().filter(|p| is_pattern(p)) {
                    crate::glob::check_pattern(&pattern.to_string_lossy())
                        .map_err(de::Error::custom)?;
                }
                if t.deny_read_limit == Some(0) {
                    return Err(de::Error::custom(
                        "deny_read_limit = 0 would refuse every command whose deny list has a pattern; give the most entries of a workspace to search (default 1000000)",
                    ));
                }
                let d = Settings::default();
                Ok(Settings {
                    mode: t.mode.unwrap_or(d.mode),
                    per_tool: t.per_tool.into_iter().map(|(k, v)| (k, v.0)).collect(),
                    network: t.network.unwrap_or(d.network),
                    deny_read: t.deny_read,
                    deny_read_limit: t.deny_read_limit.unwrap_or(d.deny_read_limit),
                    allow_read: t.allow_read,
                    writable_roots: t.writable_roots,
                    writable_caches: t.writable_caches.unwrap_or(d.writable_caches),
                    env: t.env,
                    allow_unsandboxed: t.allow_unsandboxed,
                    host_state: t.host_state,
                })
            }
        }
        d.deserialize_any(SettingsVisitor)
    }
}

/// What one command is granted: its mode and whether it may use the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommandGrant {
    /// Read-only or workspace-write.
    pub mode: CommandMode,
    /// Whether it goes out (through the egress proxy).
    pub network: bool,
}

/// The home directory, from `HOME`.
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// `~/…` under `home`; `None` for a `~` path without a home.
pub fn expand(path: &Path, home: Option<&Path>) -> Option<PathBuf> {
    match path.strip_prefix("~") {
        Ok(rest) => home.map(|h| h.join(rest)),
        Err(_) => Some(path.to_path_buf()),
    }
}

/// `path` with `~` expanded and, when relative, under `base`.
pub fn resolve(path: &Path, base: &Path) -> PathBuf {
    let expanded = expand(path, home().as_deref()).unwrap_or_else(|| path.to_path_buf());
    let joined = if expanded.is_absolute() {
        expanded
    } else {
        base.join(expanded)
    };
    // As the kernel will find it (symbolic links followed) where it exists; else without
    // its `.` and `..`: a deny-list entry written `../home/.ssh` must match the paths a
    // program reports under it.
    std::fs::canonicalize(&joined).unwrap_or_else(|_| lexically_normal(&joined))
}

/// `path` without `.` components and with each `..` taking away the component before it.
pub fn lexically_normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    out.push(part);
                }
            }
            other => out.push(other),
        }
    }
    out
}

fn is_pattern(path: &Path) -> bool {
    path.to_string_lossy().contains(['*', '?'])
}

impl Settings {
    /// The mode of a call of `tool`.
    pub fn mode_of(&self, tool: &str) -> Mode {
        self.per_tool.get(tool).copied().unwrap_or(self.mode)
    }

    /// Its paths with `~` expanded and relative ones made absolute under `base` (the config
    /// file's directory); patterns stay as written (they match in the workspace).
    pub fn resolve_paths(&mut self, base: &Path) {
        for path in self
            .allow_read
            .iter_mut()
            .chain(self.writable_roots.iter_mut())
            .chain(self.writable_caches.iter_mut())
            .chain(self.deny_read.iter_mut().filter(|p| !is_pattern(p)))
        {
            *path = resolve(path, base);
        }
    }

    /// The paths a command in `workspace` cannot read, list or stat: the default deny list,
    /// `deny_read` (its patterns matched in the workspace), the host's own state; minus what
    /// `allow_read` re-opens and anything that holds the workspace. Only paths that exist.
    pub fn hidden(&self, workspace: &Path) -> Hidden {
        let home = home();
        let mut paths = Vec::new();
        let mut patterns = Vec::new();
        let listed = DEFAULT_DENY_READ
            .iter()
            .map(PathBuf::from)
            .chain(self.deny_read.iter().cloned())
            .chain(self.host_state.iter().cloned());
        for entry in listed {
            if is_pattern(&entry) {
                patterns.push(entry.to_string_lossy().into_owned());
                continue;
            }
            let Some(path) = expand(&entry, home.as_deref()) else {
                continue;
            };
            let path = if path.is_relative() {
                workspace.join(path)
            } else {
                path
            };
            paths.push(path);
        }
        let mut cut = None;
        if !patterns.is_empty() {
            match crate::glob::Patterns::new(&patterns) {
                Ok(compiled) => {
                    let found = crate::glob::find(workspace, &compiled, self.deny_read_limit);
                    paths.extend(found.matches);
                    cut = found.cut.map(|limit| {
                        format!(
                            "{} holds more than {limit} entries, the most searched for the deny_read patterns ({}); raise deny_read_limit in [sandbox], or write the patterns under a folder (`config/**/.env` rather than `**/.env`)",
                            workspace.display(),
                            patterns.join(", ")
                        )
                    });
                }
                // Checked when the settings were read; set in code, it is still refused.
                Err(e) => cut = Some(e),
            }
        }
        let allow: Vec<PathBuf> = self
            .allow_read
            .iter()
            .filter_map(|p| expand(p, home.as_deref()))
            .collect();
        paths.retain(|p| {
            !allow.iter().any(|a| p.starts_with(a))
                && !workspace.starts_with(p)
                && std::fs::symlink_metadata(p).is_ok()
        });
        paths.sort();
        paths.dedup();
        Hidden { paths, cut }
    }

    /// The writable caches that exist, `~` expanded.
    pub fn caches(&self) -> Vec<PathBuf> {
        let home = home();
        self.writable_caches
            .iter()
            .filter_map(|p| expand(p, home.as_deref()))
            .filter(|p| p.is_dir())
            .collect()
    }

    /// Makes each missing writable cache whose parent directory exists (mode 0700), as the
    /// tool that owns it would on its first run (`~/.npm` for npx, say).
    pub fn create_caches(&self) {
        let home = home();
        for cache in self
            .writable_caches
            .iter()
            .filter_map(|p| expand(p, home.as_deref()))
        {
            if !cache.exists() && cache.parent().is_some_and(Path::is_dir) {
                let mut builder = std::fs::DirBuilder::new();
                #[cfg(unix)]
                std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
                let _ = builder.create(&cache);
            }
        }
    }

    /// What a command granted `grant` may write: its temporary directory `tmp`; under
    /// `workspace-write` also the workspace, the writable roots and the existing caches.
    pub fn writable(&self, grant: CommandGrant, workspace: &Path, tmp: &Path) -> Vec<PathBuf> {
        let mut write = vec![tmp.to_path_buf()];
        if grant.mode == CommandMode::WorkspaceWrite {
            write.push(workspace.to_path_buf());
            write.extend(self.writable_roots.iter().cloned());
            write.extend(self.caches());
        }
        write
    }

    /// The confinement of a command granted `grant` in `workspace` whose private temporary
    /// directory is `tmp`: it reads and runs everything but [`Settings::hidden`], writes
    /// [`Settings::writable`], and with network has a network of its own whose one way out
    /// is the egress proxy.
    ///
    /// Refused ([`SandboxError::DenyReadLimit`]) when the search for `deny_read`'s patterns
    /// could not cover the workspace: a command never runs with part of its deny list.
    pub fn confinement(
        &self,
        grant: CommandGrant,
        workspace: &Path,
        tmp: &Path,
    ) -> Result<Confinement, SandboxError> {
        let hidden = self.hidden(workspace);
        if let Some(why) = hidden.cut {
            return Err(SandboxError::DenyReadLimit(why));
        }
        let mut c = Confinement::nothing()
            .reading([PathBuf::from("/")])
            .writing(self.writable(grant, workspace, tmp))
            .with_devices();
        c.hide = hidden.paths;
        c.exec = true;
        c.network = if grant.network {
            Network::Proxied
        } else {
            Network::None
        };
        Ok(c)
    }

    /// The shape of [`Settings::confinement`] without touching the filesystem (no path is
    /// checked, no pattern searched): what a report needs to ask the kernel whether it can
    /// be enforced ([`crate::expected`]), cheap enough for every listing of tools.
    pub fn shape(&self, grant: CommandGrant, workspace: &Path, tmp: &Path) -> Confinement {
        let home = home();
        let mut write = vec![tmp.to_path_buf()];
        if grant.mode == CommandMode::WorkspaceWrite {
            write.push(workspace.to_path_buf());
            write.extend(self.writable_roots.iter().cloned());
        }
        let mut c = Confinement::nothing()
            .reading([PathBuf::from("/")])
            .writing(write)
            .with_devices();
        c.hide = DEFAULT_DENY_READ
            .iter()
            .map(PathBuf::from)
            .chain(self.deny_read.iter().filter(|p| !is_pattern(p)).cloned())
            .filter_map(|p| expand(&p, home.as_deref()))
            .collect();
        c.exec = true;
        c.network = if grant.network {
            Network::Proxied
        } else {
            Network::None
        };
        c
    }
}

/// The paths a command cannot see, and whether the search for patterns was cut short.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hidden {
    /// Existing paths, sorted.
    pub paths: Vec<PathBuf>,
    /// Why the patterns could not be matched in the whole workspace (it holds more
    /// entries than `deny_read_limit`): `paths` is then only part of the deny list, and
    /// [`Settings::confinement`] refuses.
    pub cut: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Doc {
        sandbox: Settings,
    }

    fn sandbox(text: &str) -> Result<Settings, String> {
        toml::from_str::<Doc>(text)
            .map(|d| d.sandbox)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_mode_alone_is_the_short_form_of_the_table() {
        let s = sandbox("sandbox = \"host\"").unwrap();
        assert_eq!(s.mode, Mode::Host);
        assert!(!s.network.enabled);
        let t = sandbox(
            "[sandbox]\nmode = \"read-only\"\nnetwork = true\n[sandbox.per_tool]\nshell = \"remote\"\n",
        )
        .unwrap();
        assert_eq!(t.mode, Mode::ReadOnly);
        assert!(t.network.enabled);
        assert_eq!(t.per_tool["shell"], Mode::Remote);
        assert_eq!(sandbox("[sandbox]\n").unwrap(), Settings::default());
    }

    #[test]
    fn modes_not_provided_and_unknown_keys_are_refused_by_name() {
        let e = sandbox("sandbox = \"container\"").unwrap_err();
        assert!(
            e.contains("not supported") && e.contains("host, read-only, workspace-write"),
            "{e}"
        );
        let e = sandbox("[sandbox.per_tool]\nshell = \"microvm\"\n").unwrap_err();
        assert!(e.contains("'microvm' is not supported"), "{e}");
        let e = sandbox("sandbox = \"remote\"").unwrap_err();
        assert!(e.contains("per_tool"), "{e}");
        let e = sandbox("[sandbox]\nnetwrok = true\n").unwrap_err();
        assert!(e.contains("netwrok"), "{e}");
    }

    #[test]
    fn the_network_table_lists_hosts_and_turns_the_network_on() {
        let s = sandbox("[sandbox.network]\nallow = [\"crates.io\"]\ndeny = [\"evil.example\"]\n")
            .unwrap();
        assert!(s.network.enabled);
        assert_eq!(s.network.allow.entries(), ["crates.io"]);
        assert_eq!(s.network.deny.entries(), ["evil.example"]);
        let off = sandbox("[sandbox.network]\nenabled = false\n").unwrap();
        assert!(!off.network.enabled);
        assert!(off.network.allow.matches("registry.npmjs.org", 443, &[443]));
        let e = sandbox("[sandbox.network]\nallow = [\"https://x.example\"]\n").unwrap_err();
        assert!(e.contains("without a scheme"), "{e}");
    }

    #[test]
    fn caches_default_to_the_build_caches_and_an_empty_list_is_strict() {
        assert_eq!(
            Settings::default().writable_caches.len(),
            DEFAULT_CACHES.len()
        );
        let strict = sandbox("[sandbox]\nwritable_caches = []\n").unwrap();
        assert!(strict.writable_caches.is_empty());
    }

    #[test]
    fn readable_roots_is_read_as_allow_read() {
        let s = sandbox("[sandbox]\nreadable_roots = [\"~/.aws\"]\n").unwrap();
        assert_eq!(s.allow_read, [PathBuf::from("~/.aws")]);
    }

    #[test]
    fn allow_read_reopens_a_deny_entry_and_the_workspace_is_never_hidden() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        for dir in [".ssh", ".aws", "work/.env-dir"] {
            std::fs::create_dir_all(h.join(dir)).unwrap();
        }
        std::fs::write(h.join("work/.env"), "K=V").unwrap();
        std::fs::write(h.join("work/sub.env"), "").unwrap();
        let settings = Settings {
            deny_read: vec![h.join(".aws"), "**/.env".into(), h.join("work")],
            allow_read: vec![h.join(".aws")],
            ..Settings::default()
        };
        let hidden = settings.hidden(&h.join("work"));
        assert!(hidden.paths.contains(&h.join("work/.env")), "{hidden:?}");
        assert!(
            !hidden.paths.contains(&h.join("work/sub.env")),
            "{hidden:?}"
        );
        assert!(!hidden.paths.contains(&h.join(".aws")), "{hidden:?}");
        assert!(!hidden.paths.contains(&h.join("work")), "{hidden:?}");
    }

    #[test]
    fn workspace_write_writes_the_workspace_the_temp_dir_roots_and_caches() {
        let settings = Settings {
            writable_roots: vec!["/x".into()],
            writable_caches: Vec::new(),
            ..Settings::default()
        };
        let grant = |mode| CommandGrant {
            mode,
            network: false,
        };
        let confined = |grant| {
            settings
                .confinement(grant, Path::new("/w"), Path::new("/t"))
                .unwrap()
        };
        let ww = confined(grant(CommandMode::WorkspaceWrite));
        assert_eq!(ww.write, [PathBuf::from("/t"), "/w".into(), "/x".into()]);
        assert_eq!(ww.read, [PathBuf::from("/")]);
        assert!(ww.exec);
        assert_eq!(ww.network, Network::None);
        let ro = confined(grant(CommandMode::ReadOnly));
        assert_eq!(ro.write, [PathBuf::from("/t")]);
        let net = confined(CommandGrant {
            mode: CommandMode::ReadOnly,
            network: true,
        });
        assert_eq!(net.network, Network::Proxied);
    }

    #[test]
    fn the_shape_of_a_confinement_asks_for_what_the_confinement_does_without_looking() {
        let settings = Settings {
            deny_read: vec!["**/.env".into()],
            ..Settings::default()
        };
        let grant = CommandGrant {
            mode: CommandMode::WorkspaceWrite,
            network: true,
        };
        let shape = settings.shape(grant, Path::new("/nonexistent-w"), Path::new("/t"));
        let real = settings
            .confinement(grant, Path::new("/nonexistent-w"), Path::new("/t"))
            .unwrap();
        assert_eq!(
            (shape.read, shape.exec, shape.network),
            (real.read, real.exec, real.network)
        );
        assert!(shape.hide.contains(&PathBuf::from("/etc/shadow")));
        assert!(!shape.hide.iter().any(|p| p.to_string_lossy().contains('*')));
    }

    #[test]
    fn settings_cross_a_boundary_as_json() {
        let s = Settings::default();
        let v = serde_json::to_value(&s).unwrap();
        let back: Settings = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }
}
