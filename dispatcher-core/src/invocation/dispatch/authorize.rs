//! Step 4 of the pipeline: pre-use hooks, the policy, session approvals and the
//! confirmation round trip.

use serde_json::Value;
use tool_api::SideEffect;

use super::{format_duration, path_args};
use crate::confirmation::{DecidedBy, Decision, Resolution};
use crate::error::ErrorClass;
use crate::events::EventKind;
use crate::hooks::HookDecision;
use crate::invocation::Invocation;
use crate::policy::{Mode, PolicyDecision};
use crate::registry::Registered;
use crate::result::ToolResultBlock;
use secrets::ArgumentsAction;

impl Invocation {
    /// Records a decision that no event reports (a denial), for the audit entry.
    fn audit_decided(&self, decision: &str, by: impl FnOnce() -> DecidedBy) {
        if let Some(audited) = &self.audited {
            audited.trail.decided(decision, by());
        }
    }

    /// Step 4: hooks, policy (its `decision` for this tool), session approvals and, if
    /// needed, the confirmation round trip. Returns the input the call runs with (a hook
    /// may have rewritten it) and what let it run.
    pub(super) async fn authorize(
        &mut self,
        tool: &Registered,
        mut input: Value,
        mut decision: PolicyDecision,
    ) -> Result<(Value, DecidedBy), ToolResultBlock> {
        let engine = self.engine.clone();
        let state = self.session.state.clone();
        let from_rules = decision.from_rules.clone();
        let policy_denied = |call: &Self, rule: &str| {
            call.audit_decided("deny", || DecidedBy::Policy {
                rule: rule.to_string().into(),
            });
            let message = if let Some(advice) = &from_rules {
                format!("Tool '{}' was refused by {rule}: {advice}.", tool.name)
            } else {
                format!(
                    "Tool '{}' is denied by policy ({rule} = \"deny\"); change that setting to allow it.",
                    tool.name
                )
            };
            call.fail(ErrorClass::UserDenied, message)
        };
        if decision.mode == Mode::Deny {
            // Nothing a hook or an approval says can let it run: the hooks are not asked.
            return Err(policy_denied(self, &decision.rule));
        }
        let mut allowed_by: Option<String> = None;
        let mut asked: Option<String> = None;
        // A hook may take a while (an external command): the call can be cancelled meanwhile.
        let entry = (!engine.settings.hooks.is_empty()).then(|| self.register().clone());
        for hook in &engine.settings.hooks {
            let verdict = {
                let view = self.view(tool, &input);
                let judged = hook.before_use(&view);
                match &entry {
                    Some(entry) => tokio::select! {
                        biased;
                        _ = entry.cancelled_here() => None,
                        v = judged => Some(v),
                    },
                    None => Some(judged.await),
                }
            };
            let Some(verdict) = verdict else {
                return Err(self.not_started());
            };
            match verdict {
                HookDecision::Continue => {}
                HookDecision::Allow => {
                    allowed_by.get_or_insert_with(|| hook.name().to_string());
                }
                HookDecision::Ask(reason) => {
                    asked
                        .get_or_insert_with(|| format!("pre-use hook '{}': {reason}", hook.name()));
                }
                HookDecision::Deny(reason) => {
                    self.audit_decided("deny", || DecidedBy::Hook {
                        name: hook.name().to_string(),
                    });
                    let message = format!(
                        "Tool '{}' was denied by pre-use hook '{}': {reason}",
                        tool.name,
                        hook.name()
                    );
                    return Err(self.fail(ErrorClass::UserDenied, message));
                }
                HookDecision::Rewrite(new_input) => {
                    self.validate(tool, &new_input, Some(hook.name()))?;
                    self.scope(tool, &new_input, false)?;
                    tracing::debug!(hook = hook.name(), "pre-use hook rewrote the input");
                    input = new_input;
                }
            }
        }
        // Secrets in the arguments (`[secrets] arguments`): refused, or asked about.
        let arguments = self.config.secrets.settings().arguments;
        if arguments != ArgumentsAction::Off {
            let seen = self.config.secrets.in_arguments(&input);
            if !seen.is_empty() {
                let what = crate::redaction::summary(&seen);
                self.emit(EventKind::SecretsFound {
                    action: match arguments {
                        ArgumentsAction::Refuse => "refuse".into(),
                        _ => "ask".into(),
                    },
                    secrets: seen,
                });
                if arguments == ArgumentsAction::Refuse {
                    self.audit_decided("deny", || DecidedBy::Policy {
                        rule: "[secrets] arguments".into(),
                    });
                    let message = format!(
                        "Tool '{}' was not run: its arguments carry a secret ({what}). Secrets in arguments are refused by [secrets] arguments = \"refuse\"; set it to \"ask\" to be asked instead, or \"off\".",
                        tool.name
                    );
                    return Err(self.fail(ErrorClass::UserDenied, message));
                }
                asked.get_or_insert_with(|| {
                    format!("[secrets] arguments = \"ask\": its arguments carry a secret ({what})")
                });
            }
        }
        let hook_asked = asked.is_some();
        if let Some(reason) = asked {
            decision.mode = Mode::Prompt;
            decision.rule = reason.into();
        } else if let (Some(hook), Mode::Prompt) = (allowed_by, decision.mode) {
            if !decision.explicit {
                tracing::debug!(hook = %hook, rule = %decision.rule, "a pre-use hook allowed the call without a prompt");
                return Ok((input, DecidedBy::Hook { name: hook }));
            }
            // The user asked to be asked about exactly this tool: a hook does not answer
            // for them.
            tracing::debug!(hook = %hook, rule = %decision.rule, "a pre-use hook allowed the call, but a per-tool rule asks for a prompt");
        }
        match decision.mode {
            Mode::Auto => Ok((
                input,
                DecidedBy::Policy {
                    rule: decision.rule,
                },
            )),
            Mode::Deny => Err(policy_denied(self, &decision.rule)),
            Mode::Prompt
                if !hook_asked
                    && from_rules.is_none()
                    && !engine
                        .settings
                        .confirmers
                        .iter()
                        .any(|c| c.answers_at_once(&self.header))
                    && crate::session::granted(&engine.store, &state, &tool.name).await =>
            {
                Ok((input, DecidedBy::Approval))
            }
            Mode::Prompt => {
                let by = self
                    .confirm(tool, &input, decision.rule.into_owned())
                    .await?;
                Ok((input, by))
            }
        }
    }

    /// What a write call would change, for the prompt.
    fn projected_modifications(&self, tool: &Registered, input: &Value) -> Vec<String> {
        if tool.side_effects != SideEffect::Write {
            return Vec::new();
        }
        let workspace = &self.session.state.workspace;
        path_args(&tool.definition().path_params, input)
            .map(|p| match workspace.exists(p) {
                Ok(true) => format!("will modify {p}"),
                _ => format!("will create {p}"),
            })
            .collect()
    }

    /// Step 4, end: asks the user through the broker and the wired-in confirmers.
    async fn confirm(
        &mut self,
        tool: &Registered,
        input: &Value,
        rule: String,
    ) -> Result<DecidedBy, ToolResultBlock> {
        let engine = self.engine.clone();
        let question = (
            summarize(input),
            self.projected_modifications(tool, input),
            rule,
        );
        let entry = self.register().clone();
        let timeout = self.config.timeouts.confirmation;
        let resolution = crate::engine::ask(
            &engine,
            &self.header,
            &|kind| self.emit(kind),
            question,
            false,
            timeout,
            entry.cancelled_here(),
        )
        .await;
        match resolution {
            Resolution::Answered(Decision::Allow, by) => Ok(by),
            Resolution::Answered(Decision::AlwaysAllow, by) => {
                crate::session::grant(&engine.store, &self.session.state, &tool.name).await;
                Ok(by)
            }
            Resolution::Answered(Decision::Deny, DecidedBy::Fallback { reason, .. }) => {
                let message = format!(
                    "Tool '{}' was not run: nobody could be asked to confirm it. {reason}",
                    tool.name
                );
                Err(self.fail(ErrorClass::UserDenied, message))
            }
            Resolution::Answered(Decision::Deny, _) => Err(self.fail(
                ErrorClass::UserDenied,
                "User denied this operation.".to_string(),
            )),
            Resolution::Cancelled => {
                let message = format!(
                    "Tool '{}' was cancelled while waiting for confirmation.",
                    tool.name
                );
                Err(self.fail(ErrorClass::Cancelled, message))
            }
            Resolution::TimedOut => {
                let message = format!(
                    "Nobody answered the confirmation request for tool '{}' within {}; the call was not run.",
                    tool.name,
                    format_duration(timeout)
                );
                Err(self.fail(ErrorClass::ConfirmationTimeout, message))
            }
        }
    }
}

/// A short, single-line rendering of an input for confirmation prompts.
fn summarize(input: &Value) -> String {
    const MAX: usize = 200;
    let text = input.to_string();
    if text.chars().count() <= MAX {
        text
    } else {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}…")
    }
}
