//! `[[plugins.sources]]`: plugins installed from OCI registries.
//!
//! ```text
//! toolhost plugin install REF [--update] [--yes]   add REF to the config, install, pin
//! toolhost plugin install                          install what the config and lock name
//! toolhost plugin update [NAME|REF] [--yes]        move within each source's range
//! ```
//!
//! Installed packages are kept in a content-addressed store (`$XDG_DATA_HOME/toolhost/oci`)
//! and pinned in `toolhost.lock` beside the config file. A host loads each source's pinned
//! package as it loads a package from `plugin_dirs`: checked again, signature and trust
//! included. A source the store lacks is installed before the host loads (the lock's digest
//! when it has one); one that cannot be is reported, and the others still load.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use plugin_oci::lock::Lock;
use plugin_oci::{Installer, Mode, Source, Step};

use crate::config::{self, Config};
use crate::error::UsageError;

/// The installer a config describes: the user's store, this host's target, its trust.
pub(crate) fn installer(config: &Config) -> Installer {
    Installer {
        store: plugin_oci::default_store(),
        target: plugin_host::HOST_TARGET.to_string(),
        trusted_keys: config.trusted_keys.clone(),
        require_signatures: config.require_signatures,
    }
}

/// The plugin directories of the sources installed as the lock pins them (no network),
/// and a line for each that is not.
pub(crate) fn installed(config: &Config, file: &Path) -> (Vec<PathBuf>, Vec<String>) {
    let sources = &config.plugins.sources;
    if sources.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let lock_path = Lock::path_beside(file);
    let lock = match Lock::read(&lock_path) {
        Ok(lock) => lock,
        Err(e) => return (Vec::new(), vec![e.to_string()]),
    };
    let installer = installer(config);
    let mut dirs = Vec::new();
    let mut missing = Vec::new();
    for source in sources {
        match lock.get(&source.oci) {
            Some(pin) if installer.is_installed(pin) => dirs.push(installer.plugin_dir(pin)),
            Some(pin) => missing.push(format!(
                "plugin source {}: {} {} ({}) is pinned in {} and not installed here: run `toolhost plugin install`",
                source.oci,
                pin.name,
                pin.version,
                pin.artifact,
                lock_path.display()
            )),
            None => missing.push(format!(
                "plugin source {}: not installed yet: run `toolhost plugin install`",
                source.oci
            )),
        }
    }
    (dirs, missing)
}

/// Installs the sources the store lacks (what the lock pins; a source without a pin
/// resolves its tag and is pinned), so that a host loads them. Returns a line per source
/// that could not be installed.
pub(crate) async fn install_missing(config: &Config, file: &Path) -> Vec<String> {
    let (_, missing) = installed(config, file);
    if missing.is_empty() {
        return Vec::new();
    }
    match install_all(config, file, Mode::Pinned, None, &Ask::Never).await {
        Ok(report) => report.failed,
        Err(e) => vec![e.0],
    }
}

/// How a widened class is confirmed.
enum Ask {
    /// `--yes`: accepted.
    Yes,
    /// Asked on the terminal (refused without one).
    Terminal,
    /// Not asked (a host's start-up installs only what is pinned or new).
    Never,
}

impl Ask {
    fn from_flag(yes: bool) -> Ask {
        if yes { Ask::Yes } else { Ask::Terminal }
    }

    /// Whether the user accepts `question`; without a terminal, an error naming `--yes`.
    fn accepts(&self, question: &str) -> Result<bool, String> {
        match self {
            Ask::Yes | Ask::Never => Ok(true),
            Ask::Terminal if !std::io::stdin().is_terminal() => Err(format!(
                "{question}\nrefused: no terminal to ask on; run again with --yes to accept"
            )),
            Ask::Terminal => Ok(crate::terminal::yes_or_no(&format!(
                "{question}\nInstall it?"
            ))),
        }
    }
}

/// What installing or updating sources did.
#[derive(Default)]
struct Report {
    lines: Vec<String>,
    failed: Vec<String>,
}

/// Installs or updates each source (`only`: the one whose oci or plugin name matches), then
/// writes the lock once.
async fn install_all(
    config: &Config,
    file: &Path,
    mode: Mode,
    only: Option<&str>,
    ask: &Ask,
) -> Result<Report, UsageError> {
    let lock_path = Lock::path_beside(file);
    let mut lock = Lock::read(&lock_path)?;
    let installer = installer(config);
    let mut report = Report::default();
    let mut matched = false;
    for source in &config.plugins.sources {
        let name = lock.get(&source.oci).map(|p| p.name.clone());
        if let Some(only) = only
            && source.oci != only
            && name.as_deref() != Some(only)
        {
            continue;
        }
        matched = true;
        match install_one(&installer, source, &mut lock, mode, ask).await {
            Ok(line) => report.lines.push(line),
            // Most errors name the reference they are about already.
            Err(e) if e.starts_with(&source.oci) => {
                report.failed.push(format!("plugin source {e}"));
            }
            Err(e) => report
                .failed
                .push(format!("plugin source {}: {e}", source.oci)),
        }
    }
    if let Some(only) = only
        && !matched
    {
        let known: Vec<&str> = config
            .plugins
            .sources
            .iter()
            .map(|s| s.oci.as_str())
            .collect();
        return Err(format!(
            "no [[plugins.sources]] entry is '{only}' or installs a plugin of that name (its sources: {})",
            if known.is_empty() { "none".to_string() } else { known.join(", ") }
        )
        .into());
    }
    // The store is shared by every config of this user, each with its own lock: a version
    // this lock moved past may be another's pin, so nothing is removed from it here.
    lock.write(&lock_path)?;
    Ok(report)
}

/// Installs one source; the line says what happened.
async fn install_one(
    installer: &Installer,
    source: &Source,
    lock: &mut Lock,
    mode: Mode,
    ask: &Ask,
) -> Result<String, String> {
    let plan = match installer
        .prepare(source, lock, mode)
        .await
        .map_err(|e| e.to_string())?
    {
        Step::UpToDate(pin) => {
            return Ok(format!(
                "up to date: {} {} from {} ({})",
                pin.name, pin.version, source.oci, pin.digest
            ));
        }
        Step::Pending(plan) => *plan,
    };
    let m = &plan.manifest;
    let what = match &plan.previous {
        Some(old) if old.version != m.version => {
            format!("{} {} -> {}", m.name, old.version, m.version)
        }
        Some(_) => format!(
            "{} {} (new content under the same version)",
            m.name, m.version
        ),
        None => format!("{} {}", m.name, m.version),
    };
    let tag = match plan.locked.tag.as_str() {
        "" => String::new(),
        tag => format!(", tag {tag}"),
    };
    let text = format!(
        "{what} from {} ({}{tag})\n{}",
        source.oci, plan.locked.digest, plan.changes
    );
    if plan.changes.asks(plan.previous.as_ref()) {
        let question =
            format!("{text}a tool's side-effect class widens: it may do more than before");
        if !ask.accepts(&question)? {
            return Err(format!("{what}: not installed (declined)"));
        }
    }
    let name = plan.locked.name.clone();
    let dir = installer.commit(plan, lock).map_err(|e| e.to_string())?;
    let signed = match plugin_host::trust::read_signature(&dir.join(&name)) {
        Ok(Some(sig)) if installer.trusted_keys.contains(&sig.key) => {
            format!("signed by trusted key {}", sig.key.id())
        }
        Ok(Some(sig)) => format!("signed by key {} (not in trusted_keys)", sig.key.id()),
        _ => "unsigned".to_string(),
    };
    Ok(format!("installed {text}  {signed}"))
}

/// `toolhost plugin install [REF] [--update] [--yes]`.
pub(crate) async fn install_command(
    explicit: Option<&Path>,
    reference: Option<&str>,
    update: bool,
    yes: bool,
) -> Result<ExitCode, UsageError> {
    let file = config_file_for_writing(explicit)?;
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", file.display()).into()),
    };
    let (config, new_text) = match reference {
        None => (Config::load(&file)?, None),
        Some(reference) => {
            let current = Config::parse(&file, &text)?;
            if current.plugins.sources.iter().any(|s| s.oci == reference) {
                (Config::load(&file)?, None)
            } else {
                let entry = format!(
                    "\n[[plugins.sources]]\noci = {}\n",
                    toml::Value::String(reference.to_string())
                );
                let new_text = config::appended(&text, &entry);
                let mut config = Config::parse(&file, &new_text)?;
                config.plugins.sources.retain(|s| s.oci == reference);
                (config, Some(new_text))
            }
        }
    };
    if config.plugins.sources.is_empty() {
        return Err(format!(
            "{} lists no [[plugins.sources]]: run `toolhost plugin install REF` (e.g. ghcr.io/acme/grep:0.3.1)",
            file.display()
        )
        .into());
    }
    let mode = match (reference, update) {
        (_, true) => Mode::Update,
        (Some(_), false) => Mode::Recheck,
        (None, false) => Mode::Pinned,
    };
    let report = install_all(&config, &file, mode, reference, &Ask::from_flag(yes)).await?;
    print_report(&report);
    if let Some(new_text) = new_text
        && report.failed.is_empty()
    {
        config::write_atomically(&file, &new_text)?;
        println!(
            "added [[plugins.sources]] oci = \"{}\" to {}",
            reference.unwrap_or_default(),
            file.display()
        );
    }
    if !report.lines.is_empty() {
        println!("pinned in {}", Lock::path_beside(&file).display());
    }
    Ok(if report.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `toolhost plugin update [NAME|REF] [--yes]`.
pub(crate) async fn update_command(
    explicit: Option<&Path>,
    which: Option<&str>,
    yes: bool,
) -> Result<ExitCode, UsageError> {
    let file = config_file_for_writing(explicit)?;
    let config = Config::load(&file)?;
    if config.plugins.sources.is_empty() {
        return Err(format!(
            "{} lists no [[plugins.sources]]: nothing to update",
            file.display()
        )
        .into());
    }
    let report = install_all(&config, &file, Mode::Update, which, &Ask::from_flag(yes)).await?;
    print_report(&report);
    Ok(if report.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_report(report: &Report) {
    for line in &report.lines {
        println!("{line}");
    }
    for line in &report.failed {
        eprintln!("toolhost: {line}");
    }
}

/// The config file a command that edits it writes: the one `--config` names or the one
/// found, else the user's (`$XDG_CONFIG_HOME/toolhost/toolhost.toml`), made when needed.
fn config_file_for_writing(explicit: Option<&Path>) -> Result<PathBuf, UsageError> {
    if let Some(file) = Config::locate(explicit) {
        return Ok(file);
    }
    let home = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .ok_or(
            "neither XDG_CONFIG_HOME nor HOME is set: give the config file with --config FILE",
        )?;
    Ok(home.join("toolhost").join(config::FILE_NAME))
}
