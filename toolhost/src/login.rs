//! `toolhost mcp login ID`: toolhost logs in to a remote MCP server that requires OAuth,
//! and keeps the login outside every workspace for the entry's `credentials = "login"`.

use std::process::ExitCode;

use crate::error::UsageError;
use crate::host::Sources;

/// Logs in to `server`'s entry; prints the URL to open and what was kept.
pub async fn login(
    sources: &Sources<'_>,
    server: &str,
    client_id: Option<&str>,
) -> Result<ExitCode, UsageError> {
    let file = sources.file.display();
    let entry = sources
        .config
        .mcp_server(server)
        .map_err(|e| UsageError(format!("{file}: {e}")))?;
    let Some(url) = &entry.url else {
        return Err(UsageError(format!(
            "{file}: MCP server '{server}' is started over stdio (`command`): only a server reached over `url` takes a login"
        )));
    };
    let logins = mcp_toolsets::pins::state_file(mcp_toolsets::pins::LOGINS_FILE)
        .map(oauth::logins::Logins::new)
        .ok_or_else(|| {
            UsageError("neither XDG_STATE_HOME nor HOME is set: there is nowhere outside the workspace to keep a login".into())
        })?;
    let (login, _) = oauth::login::log_in(url, client_id, |open| {
        eprintln!(
            "toolhost: to log in to MCP server '{server}', open this in your browser:\n{open}"
        );
    })
    .await
    .map_err(|e| UsageError(format!("MCP server '{server}': cannot log in: {e}")))?;
    let issuer = login.issuer.clone();
    logins
        .put(&entry.pin_key(), login)
        .map_err(|e| UsageError(format!("MCP server '{server}': logged in, but {e}")))?;
    println!(
        "logged in to MCP server '{server}' at {issuer}; the login is kept in {} (set credentials = \"login\" in its entry)",
        logins.path().display()
    );
    if entry.credentials != mcp_toolsets::Credentials::Login {
        eprintln!(
            "toolhost: note: its entry has credentials = \"{}\": set credentials = \"login\" for toolhost to use this login",
            entry.credentials.name()
        );
    }
    Ok(ExitCode::SUCCESS)
}
