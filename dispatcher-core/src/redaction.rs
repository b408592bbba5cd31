//! Secrets in what a call returns, and in what it is given ([`Secrets`]): the `[secrets]`
//! settings with their scanner, applied to each result before it leaves the dispatcher
//! (after the post-use hooks, before the result is cut for size) and to each call's
//! arguments before it is authorized.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde::Serialize;
use serde_json::Value;
use tool_api::Content;

use crate::error::ErrorClass;
use crate::result::ToolResultBlock;
use secrets::{Action, Deltas, Scanner, Settings};

/// The `[secrets]` settings and the scanner made from them (cheap to clone). The scanner
/// is made ahead on a thread of its own when a dispatcher takes the settings
/// ([`Secrets::make_ahead`]: compiling the rules takes about 14 ms, which no start and no
/// call should wait for), else when it is first needed; the built-in one is shared by
/// every dispatcher.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    settings: Settings,
    scanner: OnceLock<Arc<Scanner>>,
}

/// One secret found: its kind and where (`content[0] line 3`, a JSON pointer into the
/// metadata or the arguments). Never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretSeen {
    /// The rule that found it (`aws-secret-access-key`, …).
    pub kind: String,
    /// Where it was.
    pub location: String,
}

impl Secrets {
    /// `settings` with their rules compiled (the built-in ones and the user's); a rule
    /// that cannot be used is refused, naming it.
    pub fn new(settings: Settings) -> Result<Secrets, secrets::SecretsError> {
        Scanner::check(&settings.rules)?;
        Ok(Secrets {
            inner: Arc::new(Inner {
                settings,
                scanner: OnceLock::new(),
            }),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Starts making the scanner on a thread of its own, unless it is made or nothing is
    /// scanned (no tool's results, no arguments); what needs it first meanwhile waits for
    /// that thread.
    pub fn make_ahead(&self) {
        let settings = self.settings();
        let scanned = settings.action != Action::Off
            || settings.per_tool.values().any(|a| *a != Action::Off)
            || settings.arguments != secrets::ArgumentsAction::Off;
        if !scanned || self.inner.scanner.get().is_some() {
            return;
        }
        let secrets = self.clone();
        let made = std::thread::Builder::new()
            .name("secret-rules".into())
            .spawn(move || {
                secrets.scanner();
            });
        if let Err(e) = made {
            tracing::debug!("the secret rules will be compiled when first needed: {e}");
        }
    }

    /// The scanner (made now if it was not yet).
    pub fn scanner(&self) -> &Arc<Scanner> {
        let settings = &self.inner.settings;
        self.inner.scanner.get_or_init(|| {
            if settings.rules.is_empty() {
                Scanner::shared()
            } else {
                // Checked by `new`: the same rules compile.
                Scanner::with(&settings.rules).map_or_else(
                    |e| {
                        tracing::error!("{e}; the built-in rules are used");
                        Scanner::shared()
                    },
                    Arc::new,
                )
            }
        })
    }

    /// What happens to `tool`'s results, and the key that says so.
    pub fn action_for(&self, tool: &str) -> (Action, std::borrow::Cow<'static, str>) {
        self.inner.settings.action_for(tool, crate::glob_matches)
    }

    /// `block` (a result of `tool`) with its secrets redacted, or withheld under `block`,
    /// and what was found (empty: nothing, or the tool is not scanned).
    pub(crate) fn in_result(
        &self,
        tool: &str,
        mut block: ToolResultBlock,
    ) -> (ToolResultBlock, Action, Vec<SecretSeen>) {
        let (action, key) = self.action_for(tool);
        if action == Action::Off {
            return (block, action, Vec::new());
        }
        let mut seen = Vec::new();
        for (i, content) in block.content.iter_mut().enumerate() {
            if let Content::Text { text } = content
                && let Some((redacted, found)) = self.scanner().redact(text)
            {
                seen.extend(found.iter().map(|f| SecretSeen {
                    kind: f.kind.to_string(),
                    location: format!("content[{i}] line {}", f.line(text)),
                }));
                *text = redacted;
            }
        }
        self.in_json(
            &mut block.metadata,
            &|out: &mut String| out.push_str("metadata"),
            &mut seen,
        );
        // What the tool reports it ran goes to the user, the audit log and the trace.
        if let Some(command) = block.record.command_executed.as_mut()
            && let Some((redacted, found)) = self.scanner().redact(command)
        {
            seen.extend(found.iter().map(|f| SecretSeen {
                kind: f.kind.to_string(),
                location: "command_executed".into(),
            }));
            *command = redacted;
        }
        if seen.is_empty() || action == Action::Redact {
            return (block, action, seen);
        }
        let message = format!(
            "The result of '{tool}' was withheld: it carries {} ({}). Secrets never reach the model under {key} = \"block\"; set it to \"redact\" to pass the result on with each secret replaced, or \"off\" for a tool whose job is to return one.",
            plural(seen.len()),
            summary(&seen)
        );
        let withheld =
            ToolResultBlock::error(&block.tool_use_id, ErrorClass::ExecutionError, message)
                .with_record(block.record);
        (withheld, action, seen)
    }

    /// `text` (of `tool`'s) with its secrets redacted, unless the tool is not scanned (a
    /// failure's message in its event and the log).
    pub(crate) fn redacted_text(&self, tool: &str, text: String) -> String {
        if self.action_for(tool).0 == Action::Off {
            return text;
        }
        match self.scanner().redact(&text) {
            Some((redacted, _)) => redacted,
            None => text,
        }
    }

    /// The secrets in a call's arguments (their string values), by JSON pointer.
    pub(crate) fn in_arguments(&self, input: &Value) -> Vec<SecretSeen> {
        let mut seen = Vec::new();
        let mut copy = input.clone();
        self.in_json(&mut copy, &|_: &mut String| {}, &mut seen);
        seen
    }

    /// Redacts every string in `value`, recording where: `at` writes the JSON pointer of
    /// `value`, called only for a secret found (a result's metadata is scanned on every
    /// call, and building each value's pointer ahead cost more than the scan).
    fn in_json(&self, value: &mut Value, at: &dyn Fn(&mut String), seen: &mut Vec<SecretSeen>) {
        match value {
            Value::String(text) => {
                if let Some((redacted, found)) = self.scanner().redact(text) {
                    let mut location = String::new();
                    at(&mut location);
                    if location.is_empty() {
                        location.push('/');
                    }
                    seen.extend(found.iter().map(|f| SecretSeen {
                        kind: f.kind.to_string(),
                        location: location.clone(),
                    }));
                    *text = redacted;
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    let at = |out: &mut String| {
                        at(out);
                        out.push('/');
                        out.push_str(&i.to_string());
                    };
                    self.in_json(item, &at, seen);
                }
            }
            Value::Object(map) => {
                for (key, item) in map.iter_mut() {
                    let at = |out: &mut String| {
                        at(out);
                        out.push('/');
                        out.push_str(&key.replace('~', "~0").replace('/', "~1"));
                    };
                    self.in_json(item, &at, seen);
                }
            }
            _ => {}
        }
    }

    /// The live output of one call of `tool`, redacted as it streams; `None` when the
    /// tool's results are not scanned. The scanner is taken at the first chunk: a call
    /// that streams nothing never waits for it before it starts.
    pub(crate) fn live(&self, tool: &str) -> Option<Arc<LiveOutput>> {
        (self.action_for(tool).0 != Action::Off).then(|| {
            Arc::new(LiveOutput {
                secrets: self.clone(),
                deltas: Mutex::default(),
            })
        })
    }
}

/// One call's live output on its way to the event stream.
#[derive(Debug)]
pub(crate) struct LiveOutput {
    secrets: Secrets,
    deltas: Mutex<Deltas>,
}

impl LiveOutput {
    /// What of `chunk` (and what was held before it) may be shown now.
    pub(crate) fn push(&self, chunk: &str) -> String {
        let mut deltas = self.deltas.lock().unwrap_or_else(PoisonError::into_inner);
        deltas.push(self.secrets.scanner(), chunk).0
    }

    /// The call ended: the rest.
    pub(crate) fn finish(&self) -> String {
        let mut deltas = self.deltas.lock().unwrap_or_else(PoisonError::into_inner);
        if deltas.is_empty() {
            return String::new();
        }
        deltas.finish(self.secrets.scanner()).0
    }
}

/// "a secret" or "3 secrets".
fn plural(n: usize) -> String {
    if n == 1 {
        "a secret".into()
    } else {
        format!("{n} secrets")
    }
}

/// `aws-secret-access-key at content[0] line 3, …` (the first five).
pub(crate) fn summary(seen: &[SecretSeen]) -> String {
    let mut parts: Vec<String> = seen
        .iter()
        .take(5)
        .map(|s| format!("{} at {}", s.kind, s.location))
        .collect();
    if seen.len() > 5 {
        parts.push(format!("and {} more", seen.len() - 5));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings with a rule of the user's, so the scanner is this value's own (the
    /// built-in one is shared by the process and may be made already).
    fn with_own_rule() -> Secrets {
        let settings: Settings = toml::from_str(
            r#"
            [[rules]]
            id = "test-token"
            keywords = ["tok_"]
            pattern = "tok_[a-z0-9]{12}"
            "#,
        )
        .unwrap();
        Secrets::new(settings).unwrap()
    }

    #[test]
    fn a_call_that_streams_nothing_never_makes_the_scanner() {
        let secrets = with_own_rule();
        let live = secrets.live("any").unwrap();
        assert_eq!(live.finish(), "");
        assert!(secrets.inner.scanner.get().is_none());
    }

    #[test]
    fn live_output_makes_the_scanner_at_its_first_chunk_and_redacts() {
        let secrets = with_own_rule();
        let live = secrets.live("any").unwrap();
        assert!(secrets.inner.scanner.get().is_none());
        assert_eq!(
            live.push("key tok_abcdef012345\n"),
            "key [REDACTED test-token]\n"
        );
        assert!(secrets.inner.scanner.get().is_some());
    }

    #[test]
    fn a_secret_in_json_is_named_by_its_pointer_and_only_strings_with_one_change() {
        let secrets = with_own_rule();
        let token = "tok_abcdef012345";
        let mut value = serde_json::json!({
            "plain": "nothing here",
            "nested": {"a/b": [1, "x", {"k~y": format!("is {token}")}]},
            "list": [token],
        });
        let mut seen = Vec::new();
        secrets.in_json(
            &mut value,
            &|out: &mut String| out.push_str("metadata"),
            &mut seen,
        );
        let locations: Vec<&str> = seen.iter().map(|s| s.location.as_str()).collect();
        assert_eq!(
            locations,
            ["metadata/nested/a~1b/2/k~0y", "metadata/list/0"],
            "{seen:?}"
        );
        assert_eq!(value["nested"]["a/b"][2]["k~y"], "is [REDACTED test-token]");
        assert_eq!(value["list"][0], "[REDACTED test-token]");
        assert_eq!(value["plain"], "nothing here");
        // A string at the top is at "/", an argument's pointer starts with it.
        let mut top = serde_json::json!(token);
        let mut seen = Vec::new();
        secrets.in_json(&mut top, &|_: &mut String| {}, &mut seen);
        assert_eq!(seen[0].location, "/");
        let seen = secrets.in_arguments(&serde_json::json!({"command": token}));
        assert_eq!(seen[0].location, "/command");
    }

    #[test]
    fn made_ahead_the_scanner_is_ready_for_the_first_result() {
        let secrets = with_own_rule();
        secrets.make_ahead();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while secrets.inner.scanner.get().is_none() {
            assert!(std::time::Instant::now() < deadline, "never made");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
