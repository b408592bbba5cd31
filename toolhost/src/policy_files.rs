//! `[policies]` put in force: the files read, checked against the dispatcher's tools at that
//! moment, and set as its rules ([`dispatcher_core::Dispatcher::set_rules`]).

use std::path::Path;
#[cfg(feature = "policies")]
use std::path::PathBuf;
#[cfg(feature = "policies")]
use std::sync::Arc;

use dispatcher_core::Dispatcher;
#[cfg(feature = "policies")]
use policies::{Options, Policies, Source};

use crate::config::Config;

/// What a build without the `policies` feature says of `[policies] files`.
#[cfg(not(feature = "policies"))]
pub(crate) fn apply(config: &Config, file: &Path, _dispatcher: &Dispatcher) -> Result<(), String> {
    if config.policies.files.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}: [policies] files are set, but this toolhost was built without its `policies` feature (Cedar); build it with `--features policies` (on by default), or remove [policies] files",
        file.display()
    ))
}

#[cfg(feature = "policies")]
/// The files of `[policies] files`: a file as named, a directory's `*.cedar` files in
/// name order; each resolved against `base` (the config file's directory) and named as the
/// config wrote it.
fn sources(files: &[PathBuf], base: &Path) -> Result<Vec<Source>, String> {
    let mut out = Vec::new();
    for (i, written) in files.iter().enumerate() {
        let path = ::sandbox::resolve(written, base);
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(&path)
                .map_err(|e| format!("[policies] files[{i}]: cannot list {}: {e}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "cedar") && p.is_file())
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(format!(
                    "[policies] files[{i}]: the directory {} holds no .cedar file",
                    written.display()
                ));
            }
            for file in found {
                let name = written.join(file.file_name().unwrap_or_default());
                out.push(Source {
                    path: file,
                    name: name.display().to_string(),
                });
            }
        } else {
            out.push(Source {
                path,
                name: written.display().to_string(),
            });
        }
    }
    Ok(out)
}

#[cfg(feature = "policies")]
/// The policies of `config`, checked against `dispatcher`'s tools now: `None` when it names
/// no files. A tool of a configured server that is not there (one that did not start, or
/// starts per caller) is checked when it arrives.
pub(crate) fn load(
    config: &Config,
    file: &Path,
    dispatcher: &Dispatcher,
) -> Result<Option<Arc<Policies>>, String> {
    if config.policies.files.is_empty() {
        return Ok(None);
    }
    let base = file.parent().unwrap_or(Path::new("."));
    let sources = sources(&config.policies.files, base)?;
    let tools = dispatcher.all_definitions();
    let separator = &dispatcher.config().toolset_separator;
    let later: Vec<String> = config
        .mcp_servers
        .iter()
        .map(|s| format!("{}{separator}", s.prefix))
        .collect();
    let options = Options {
        utc_offset_minutes: config.policies.utc_offset.0,
    };
    let policies = Policies::load(&sources, options, &tools, &later)
        .map_err(|e| format!("{}: [policies] {e}", file.display()))?;
    tracing::info!(
        policies = policies.len(),
        files = sources.len(),
        tools = tools.len(),
        "policies loaded and checked against the tools"
    );
    Ok(Some(Arc::new(policies)))
}

#[cfg(feature = "policies")]
/// Puts `config`'s policies in force on `dispatcher` (or none, when it names no files).
pub(crate) fn apply(config: &Config, file: &Path, dispatcher: &Dispatcher) -> Result<(), String> {
    let rules = load(config, file, dispatcher)?;
    dispatcher.set_rules(rules.map(|p| p as Arc<dyn dispatcher_core::CallRules>));
    Ok(())
}
