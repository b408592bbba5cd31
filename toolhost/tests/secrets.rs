//! A mounted server that returns its own token (server-everything's `get-env` prints the
//! environment it was given) has it redacted before it reaches the model, through the
//! CLI and through `serve --mcp`; a setting that turns it off for the server's tools
//! passes it on.
#![cfg(target_os = "linux")]
#![cfg(test)]

mod common;

use std::path::Path;
use std::process::Output;

const TOKEN: &str = "ghp_Zq8RfT2vLm4NcX7bYp1WsKd9HjGe3Ua6Io0E";

/// server-everything mounted as `ev` with a GitHub token in its environment, `extra`
/// before its entry; `None` when the run does not have the server.
fn mount(dir: &Path, extra: &str) -> Option<()> {
    let node = toolhost_tests::peer("TOOLHOST_TEST_NODE")?;
    let server = toolhost_tests::peer("TOOLHOST_TEST_SERVER_EVERYTHING")?;
    let modules = server.ancestors().nth(4)?.to_path_buf();
    std::fs::write(
        dir.join("toolhost.toml"),
        format!(
            "{extra}\n[[mcp_servers]]\nid = \"ev\"\nprefix = \"ev\"\ncommand = \"{}\"\nargs = [\"{}\", \"stdio\"]\nreadable_roots = [\"{}\"]\nenv = {{ GITHUB_TOKEN = \"{TOKEN}\" }}\n",
            node.display(),
            server.display(),
            modules.display()
        ),
    )
    .ok()?;
    Some(())
}

fn call(dir: &Path, tool: &str) -> Output {
    common::command(
        dir,
        &["--config", "toolhost.toml", "call", tool, "--input", "{}"],
    )
    .output()
    .unwrap()
}

fn all(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_mounted_servers_own_token_in_its_result_is_redacted() {
    let dir = tempfile::tempdir().unwrap();
    if mount(dir.path(), "").is_none() {
        return;
    }
    let o = call(dir.path(), "ev__get-env");
    let text = all(&o);
    assert!(o.status.success(), "{text}");
    assert!(!text.contains(TOKEN), "{text}");
    assert!(text.contains("[REDACTED github-token]"), "{text}");
    // The log names what was found and where, never the value.
    assert!(
        text.contains("secrets found in the result: github-token at content[0]"),
        "{text}"
    );
}

#[test]
fn with_secrets_off_for_the_servers_tools_the_token_is_passed_on() {
    let dir = tempfile::tempdir().unwrap();
    if mount(dir.path(), "[secrets.per_tool]\n\"ev__*\" = \"off\"\n").is_none() {
        return;
    }
    let o = call(dir.path(), "ev__get-env");
    assert!(all(&o).contains(TOKEN), "{}", all(&o));
}

#[test]
fn under_block_the_servers_result_is_withheld() {
    let dir = tempfile::tempdir().unwrap();
    if mount(dir.path(), "[secrets]\naction = \"block\"\n").is_none() {
        return;
    }
    let o = call(dir.path(), "ev__get-env");
    let text = all(&o);
    assert!(!o.status.success(), "{text}");
    assert!(!text.contains(TOKEN), "{text}");
    assert!(
        text.contains("The result of 'ev__get-env' was withheld"),
        "{text}"
    );
}
