//! Answering confirmation requests from the command line.

use std::io::{BufRead, IsTerminal, Write};

use dispatcher_core::ConfirmFuture;
use dispatcher_core::{Answer, ConfirmationRequest, Confirmer, Decision};

/// Asks on the terminal: `[y]es / [n]o / [a]lways`.
pub struct TerminalConfirmer;

impl Confirmer for TerminalConfirmer {
    fn name(&self) -> &str {
        "terminal"
    }

    fn confirm(&self, request: ConfirmationRequest) -> ConfirmFuture {
        Box::pin(async move {
            tokio::task::spawn_blocking(move || ask(&request))
                .await
                .unwrap_or(Decision::Deny)
                .into()
        })
    }
}

/// The question the terminal asks, as an embedder shows it to its user too: the tool, its
/// class and the rule that asks, its input, and what it would change.
pub fn question(request: &ConfirmationRequest) -> String {
    let mut q = format!(
        "toolhost: '{}' ({}) asks to run [{}]\n  input: {}",
        request.tool_name(),
        request.side_effects(),
        request.reason,
        request.input_summary
    );
    for m in &request.projected_modifications {
        q.push_str("\n  ");
        q.push_str(m);
    }
    q
}

fn ask(request: &ConfirmationRequest) -> Decision {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "\n{}", question(request));
    let stdin = std::io::stdin();
    loop {
        let _ = write!(err, "Allow? [y]es / [n]o / [a]lways for this session: ");
        let _ = err.flush();
        let mut line = String::new();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => return Decision::Deny,
            Ok(_) => {}
        }
        match line.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => return Decision::Allow,
            "n" | "no" | "" => return Decision::Deny,
            "a" | "always" => return Decision::AlwaysAllow,
            _ => {
                let _ = writeln!(err, "Please answer y, n or a.");
            }
        }
    }
}

/// Answers every request with `allow` (`--yes`).
pub struct YesConfirmer;

impl Confirmer for YesConfirmer {
    fn name(&self) -> &str {
        "--yes"
    }

    fn confirm(&self, _request: ConfirmationRequest) -> ConfirmFuture {
        Box::pin(async { Decision::Allow.into() })
    }
}

/// Denies every request because there is no terminal to ask on: a fallback answer, whose
/// reason (in the call's result and its `tool.confirmation_resolved` event) says so and
/// how to allow the tool.
pub struct NoTerminalConfirmer {
    /// The config file, named in the advice.
    pub config_file: String,
}

impl Confirmer for NoTerminalConfirmer {
    fn name(&self) -> &str {
        "no-terminal"
    }

    fn confirm(&self, request: ConfirmationRequest) -> ConfirmFuture {
        let tool = request.tool_name();
        let why = format!(
            "There is no terminal to ask on (stdin or stderr is not a terminal). Pass --yes to \
             allow this call, or set `{tool} = \"auto\"` under [tool_confirmation.per_tool] in {}.",
            self.config_file
        );
        Box::pin(async move { Answer::fallback(Decision::Deny, why) })
    }
}

/// Whether prompts can be asked: stdin and stderr are both terminals.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Asks `question` on the terminal (stderr) and reads a `y`/`yes` from stdin; anything
/// else, or no answer, is no. The caller checks first that stdin is a terminal.
pub(crate) fn yes_or_no(question: &str) -> bool {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{question} [y/N] ");
    let _ = err.flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}
