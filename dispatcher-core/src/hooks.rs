//! Hooks: code the host or the user runs around every call ([`PreUseHook`]).

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::call::CallView;
use crate::result::ToolResultBlock;

/// What a hook returns: a boxed future, so hooks may wait (for a process, a service).
pub type HookFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a pre-use hook sees of a call: its identity, its validated input (as rewritten by
/// earlier hooks) and the workspace, borrowed from the call.
pub type HookCall<'a> = CallView<'a>;

/// A pre-use hook's verdict on a call.
#[derive(Debug, Clone, PartialEq)]
pub enum HookDecision {
    /// No objection: the policy decides.
    Continue,
    /// Run without asking if the policy would prompt (never overrides a policy `deny`).
    Allow,
    /// Ask the user even if the policy would not; the reason is shown in the prompt.
    Ask(String),
    /// Refuse the call (`user_denied`); the reason is shown to the model.
    Deny(String),
    /// Run the call with this input instead (validated again), then let the policy decide.
    Rewrite(Value),
}

/// Hooks: code the host or the user runs around every call.
///
/// - A **pre-use hook** ([`PreUseHook`]) sees a validated call before the confirmation
///   policy and may [`allow`](HookDecision::Allow) it (skip the prompt), make the user
///   [`confirm`](HookDecision::Ask) it, [`deny`](HookDecision::Deny) it with a reason the model
///   sees, or [`rewrite`](HookDecision::Rewrite) its input. A rewritten input is validated
///   and scoped to the workspace again, and the call fails as `validation_error` if it no
///   longer fits the schema.
/// - A **post-use hook** ([`PostUseHook`]) sees the result of every call that ran and may
///   [`annotate`](PostDecision::Annotate) it (a note appended for the model) or
///   [`replace`](PostDecision::Replace) it.
///
/// Host applications implement the traits (or wrap a closure with [`pre_use_fn`]); users
/// declare external commands in the config ([`CommandHook`]).
///
/// # How hook verdicts combine with the policy
///
/// Hooks run in the order they were added; each sees the input as rewritten by the ones
/// before it. Then: any `Deny` denies (the first one's reason is shown); else any `Ask`
/// makes the call prompt; else any `Allow` lets a call the policy would `prompt` for run
/// without asking, unless the prompt comes from a rule naming the tool itself
/// (`tool_confirmation.per_tool.NAME = "prompt"`: the user asked to be asked about exactly
/// this tool). **An allow never bypasses a `deny` in the policy config**: the policy says
/// no, the call does not run, whatever a hook said.
///
/// A check that runs after validation and before the confirmation policy, e.g. an
/// organisation's rule that no command may mention `rm -rf /`.
///
/// Hooks are host code and must not panic: inside a [`crate::Batch`] a panic ends the call
/// with `execution_error` (the batch finishes); in a direct [`crate::Dispatcher::dispatch`]
/// it reaches the caller like any other panic of the host.
pub trait PreUseHook: Send + Sync {
    /// The hook's name, for messages and logs.
    fn name(&self) -> &str;
    /// Judges one call.
    fn before_use<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, HookDecision>;
}

/// A [`PreUseHook`] from a name and a synchronous closure.
///
/// ```
/// use dispatcher_core::{HookDecision, pre_use_fn};
/// let no_force_push = pre_use_fn("no-force-push", |call| {
///     if call.input["command"].as_str().is_some_and(|c| c.contains("push --force")) {
///         HookDecision::Deny("force pushes are not allowed here".into())
///     } else {
///         HookDecision::Continue
///     }
/// });
/// # let _ = no_force_push;
/// ```
pub fn pre_use_fn<F>(name: impl Into<String>, f: F) -> Arc<dyn PreUseHook>
where
    F: Fn(&HookCall<'_>) -> HookDecision + Send + Sync + 'static,
{
    Arc::new(FnHook {
        name: name.into(),
        f,
    })
}

struct FnHook<F> {
    name: String,
    f: F,
}

impl<F> PreUseHook for FnHook<F>
where
    F: Fn(&HookCall<'_>) -> HookDecision + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn before_use<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, HookDecision> {
        let decision = (self.f)(call);
        Box::pin(std::future::ready(decision))
    }
}

/// What a post-use hook sees: the call and its result.
#[derive(Debug)]
pub struct PostUseCall<'a> {
    /// The call as the pre-use hooks saw it.
    pub call: HookCall<'a>,
    /// The result the model would get.
    pub result: &'a ToolResultBlock,
}

/// A post-use hook's verdict on a result.
#[derive(Debug, Clone, PartialEq)]
pub enum PostDecision {
    /// Leave the result as it is.
    Keep,
    /// Append a note for the model (`Note from hook '<name>': …`).
    Annotate(String),
    /// Replace the result's content with this text; `is_error` as given.
    Replace {
        /// The new text.
        text: String,
        /// Whether the result is an error.
        is_error: bool,
    },
}

/// A hook that sees results after a call ran (completed, failed, timed out or cancelled),
/// before the size cap applies.
pub trait PostUseHook: Send + Sync {
    /// The hook's name, for notes and logs.
    fn name(&self) -> &str;
    /// Judges one result.
    fn after_use<'a>(&'a self, call: &'a PostUseCall<'a>) -> HookFuture<'a, PostDecision>;
}

/// Which calls a [`CommandHook`] runs for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HookMatcher {
    /// Every call.
    #[default]
    All,
    /// Calls of these tools (published names).
    Tools(Vec<String>),
}

impl HookMatcher {
    /// Whether the hook runs for `tool`.
    pub fn matches(&self, tool: &str) -> bool {
        match self {
            HookMatcher::All => true,
            HookMatcher::Tools(names) => names.iter().any(|n| n == tool),
        }
    }
}

/// An external command as a hook, as users declare it in the config:
///
/// ```toml
/// [[hooks.pre_tool_use]]
/// command = "python3 ~/.config/toolhost/check.py"   # run with /bin/sh -c
/// tools = ["shell"]                                  # optional; default: every tool
/// timeout_secs = 10                                 # optional; default 10
/// ```
///
/// The command runs in the session's workspace root, and gets the call as JSON on stdin
/// (`hook_event`, `session_id`, `tool_use_id`,
/// `tool_name`, `side_effects`, `input`, `workspace`; a post-use hook also gets `result`).
///
/// **Pre-use:** exit 0 lets the call go on (the policy decides); exit 2 denies it, with the
/// command's stderr as the reason the model sees; any other exit code, a crash or a
/// timeout is logged at WARN and lets the call go on, so a broken hook never blocks work
/// (a hook that must block says so with exit 2). On exit 0 the command may print one JSON
/// object to stdout to say more: `{"decision": "allow" | "ask" | "deny", "reason": "…",
/// "input": {…}}` (each field optional; `input` rewrites the call's input, and the policy
/// then decides on the rewritten call: an `allow` next to `input` is not taken).
///
/// **Post-use:** exit 0 may print `{"annotate": "…"}` or `{"replace": "…", "is_error":
/// bool}`; exit 2 annotates the result with stderr; anything else is logged and ignored.
#[derive(Debug, Clone)]
pub struct CommandHook {
    /// The command line (`/bin/sh -c`).
    pub command: String,
    /// Which tools it runs for.
    pub matcher: HookMatcher,
    /// How long it may run before it is killed.
    pub timeout: Duration,
}

/// Default time limit of a [`CommandHook`].
pub const COMMAND_HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// How a command hook ended.
enum Exit {
    Code(i32, String, String),
    /// Could not run, crashed, or timed out: logged, then ignored.
    Broken(String),
}

impl CommandHook {
    /// A hook running `command` for every tool with the default timeout.
    pub fn new(command: impl Into<String>) -> Self {
        CommandHook {
            command: command.into(),
            matcher: HookMatcher::All,
            timeout: COMMAND_HOOK_TIMEOUT,
        }
    }

    async fn run(&self, stdin_json: Value, workspace: &Path) -> Exit {
        let mut child = match tokio::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&self.command)
            .current_dir(workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
        {
            Ok(c) => c,
            Err(e) => return Exit::Broken(format!("could not start /bin/sh: {e}")),
        };
        let input = stdin_json.to_string();
        let stdin = child.stdin.take();
        let group = child
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(i32::try_from(id).unwrap_or(0)));
        let io = async move {
            if let Some(mut stdin) = stdin {
                // A hook that does not read its stdin is fine.
                let _ = stdin.write_all(input.as_bytes()).await;
                drop(stdin);
            }
            child.wait_with_output().await
        };
        // Kills what the hook started in its group if it times out, or if the call is
        // cancelled while it runs (this future is dropped); disarmed once it has exited.
        let mut group_kill = GroupKill(group);
        let finished = tokio::time::timeout(self.timeout, io).await;
        if matches!(finished, Ok(Ok(_))) {
            group_kill.0 = None;
        }
        drop(group_kill);
        match finished {
            Err(_) => Exit::Broken(format!(
                "timed out after {} ms and was killed",
                self.timeout.as_millis()
            )),
            Ok(Err(e)) => Exit::Broken(format!("failed: {e}")),
            Ok(Ok(out)) => match out.status.code() {
                Some(code) => Exit::Code(
                    code,
                    String::from_utf8_lossy(&out.stdout).trim().to_string(),
                    String::from_utf8_lossy(&out.stderr).trim().to_string(),
                ),
                None => Exit::Broken("was killed by a signal".into()),
            },
        }
    }
}

/// Kills a hook's process group when dropped armed. The hook itself is not reaped yet
/// then, so its group id cannot have been reused.
struct GroupKill(Option<rustix::process::Pid>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            // ESRCH: already gone.
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PreAnswer {
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PostAnswer {
    #[serde(default)]
    annotate: Option<String>,
    #[serde(default)]
    replace: Option<String>,
    #[serde(default)]
    is_error: Option<bool>,
}

impl PreUseHook for CommandHook {
    fn name(&self) -> &str {
        &self.command
    }

    fn before_use<'a>(&'a self, call: &'a HookCall<'a>) -> HookFuture<'a, HookDecision> {
        Box::pin(async move {
            if !self.matcher.matches(call.tool_name()) {
                return HookDecision::Continue;
            }
            match self.run(call.to_json("pre_tool_use"), call.workspace).await {
                Exit::Code(0, stdout, _) if stdout.is_empty() => HookDecision::Continue,
                Exit::Code(0, stdout, _) => match serde_json::from_str::<PreAnswer>(&stdout) {
                    Ok(a) => pre_answer(a),
                    Err(e) => {
                        tracing::warn!(hook = %self.command, "pre-use hook printed something that is not a decision ({e}); ignoring it");
                        HookDecision::Continue
                    }
                },
                Exit::Code(2, _, stderr) => HookDecision::Deny(if stderr.is_empty() {
                    format!("the hook `{}` refused it", self.command)
                } else {
                    stderr
                }),
                Exit::Code(code, _, stderr) => {
                    tracing::warn!(hook = %self.command, code, stderr = %stderr, "pre-use hook exited with {code} (only 0 and 2 mean something); letting the call go on");
                    HookDecision::Continue
                }
                Exit::Broken(why) => {
                    tracing::warn!(hook = %self.command, "pre-use hook {why}; letting the call go on");
                    HookDecision::Continue
                }
            }
        })
    }
}

fn pre_answer(a: PreAnswer) -> HookDecision {
    let reason = a.reason.unwrap_or_default();
    match a.decision.as_deref() {
        Some("deny") => HookDecision::Deny(if reason.is_empty() {
            "denied by a pre-use hook".into()
        } else {
            reason
        }),
        Some("ask") => HookDecision::Ask(reason),
        _ if a.input.is_some() => HookDecision::Rewrite(a.input.unwrap_or(Value::Null)),
        Some("allow") => HookDecision::Allow,
        _ => HookDecision::Continue,
    }
}

impl PostUseHook for CommandHook {
    fn name(&self) -> &str {
        &self.command
    }

    fn after_use<'a>(&'a self, call: &'a PostUseCall<'a>) -> HookFuture<'a, PostDecision> {
        Box::pin(async move {
            if !self.matcher.matches(call.call.tool_name()) {
                return PostDecision::Keep;
            }
            let mut payload = call.call.to_json("post_tool_use");
            payload["result"] = call.result.to_json();
            match self.run(payload, call.call.workspace).await {
                Exit::Code(0, stdout, _) if stdout.is_empty() => PostDecision::Keep,
                Exit::Code(0, stdout, _) => match serde_json::from_str::<PostAnswer>(&stdout) {
                    Ok(PostAnswer {
                        replace: Some(text),
                        is_error,
                        ..
                    }) => PostDecision::Replace {
                        text,
                        is_error: is_error.unwrap_or(call.result.is_error()),
                    },
                    Ok(PostAnswer {
                        annotate: Some(note),
                        ..
                    }) => PostDecision::Annotate(note),
                    Ok(_) => PostDecision::Keep,
                    Err(e) => {
                        tracing::warn!(hook = %self.command, "post-use hook printed something that is not a decision ({e}); ignoring it");
                        PostDecision::Keep
                    }
                },
                Exit::Code(2, _, stderr) if !stderr.is_empty() => PostDecision::Annotate(stderr),
                Exit::Code(code, _, stderr) => {
                    if code != 2 {
                        tracing::warn!(hook = %self.command, code, stderr = %stderr, "post-use hook exited with {code}; keeping the result");
                    }
                    PostDecision::Keep
                }
                Exit::Broken(why) => {
                    tracing::warn!(hook = %self.command, "post-use hook {why}; keeping the result");
                    PostDecision::Keep
                }
            }
        })
    }
}
