//! A configuration that mounts toolhost on itself: `[[mcp_servers]] command = "toolhost"`
//! started with the same `toolhost.toml` would start itself again and again (until
//! `TOOLHOST_NESTING` stops it, with a copy of every tool at each level). Each toolhost
//! tells the stdio servers it starts which configuration files are already running above
//! them; a toolhost that finds its own file among them refuses to start, saying which
//! entry mounts it, and the toolhost above reports that the server exited before it
//! answered.

use std::path::Path;

use crate::error::UsageError;

/// The configuration files of the toolhosts above, as `device:inode`, comma-separated.
pub const CHAIN_ENV: &str = "TOOLHOST_MOUNTING_CONFIGS";
/// The id of the `[[mcp_servers]]` entry that started this process.
pub const MOUNTED_AS_ENV: &str = "TOOLHOST_MOUNTED_AS";

/// A file's identity, whatever path names it (a symlink, `./`, an absolute path).
fn identity(file: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(file).ok()?;
    Some(format!("{}:{}", meta.dev(), meta.ino()))
}

fn chain_above() -> Vec<String> {
    std::env::var(CHAIN_ENV)
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Refuses to run over `file` when a toolhost above already runs over it.
pub fn check(file: &Path) -> Result<(), UsageError> {
    let Some(me) = identity(file) else {
        return Ok(());
    };
    if !chain_above().contains(&me) {
        return Ok(());
    }
    let file = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    let entry = std::env::var(MOUNTED_AS_ENV)
        .map(|id| format!("its [[mcp_servers]] entry '{id}'"))
        .unwrap_or_else(|_| "one of its [[mcp_servers]] entries".into());
    Err(UsageError(format!(
        "refused to start: {} mounts toolhost on this same configuration ({entry} started this \
         toolhost, which loaded {} again and would start itself again and again). Give the \
         mounted toolhost a configuration of its own (args = [\"--config\", \"other.toml\", \
         \"serve\", \"--mcp\"]), or remove that entry.",
        file.display(),
        file.display()
    )))
}

/// What a stdio server started by a toolhost over `file` is told: the chain above, with
/// `file`, and the entry's id.
pub fn env_for_server(file: &Path, id: &str) -> Vec<(String, String)> {
    let mut chain = chain_above();
    if let Some(me) = identity(file) {
        chain.push(me);
    }
    vec![
        (CHAIN_ENV.to_string(), chain.join(",")),
        (MOUNTED_AS_ENV.to_string(), id.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_the_same_under_every_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("toolhost.toml");
        std::fs::write(&file, "").unwrap();
        std::os::unix::fs::symlink(&file, dir.path().join("link.toml")).unwrap();
        assert_eq!(identity(&file), identity(&dir.path().join("link.toml")));
        assert_eq!(
            identity(&file),
            identity(&dir.path().join(".").join("toolhost.toml"))
        );
        assert_eq!(identity(&dir.path().join("missing.toml")), None);
    }
}
