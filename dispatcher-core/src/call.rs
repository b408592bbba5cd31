//! What identifies one call, and the borrowed view of it that hooks and runtime policies
//! judge.
//!
//! A call's identity is made once, when the call enters the dispatcher, and shared from
//! there: every event of the call, its confirmation request and the context its tool
//! gets hold the same [`CallHeader`] (one reference count, no copied fields).

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};
use tool_api::{Extensions, SideEffect};

/// The identity of one call: who called which tool, where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallHeader {
    /// The session.
    pub session_id: Arc<str>,
    /// Who the session acts for ([`crate::SessionSpec::principal`]): a console shows a
    /// caller its own calls.
    pub principal: Arc<str>,
    /// The turn.
    pub turn_id: Arc<str>,
    /// The tool_use block.
    pub tool_use_id: Arc<str>,
    /// The tool name as called (the published name, for a toolset's tool).
    pub tool_name: Arc<str>,
    /// The tool's declared class; absent when no such tool was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub side_effects: Option<SideEffect>,
    /// What the host attached to the call when it made it ([`crate::Invocation::extend`]):
    /// the tool reads it from its context ([`tool_api::ToolContext::extension`]), a
    /// [`crate::Confirmer`] from the request's header. Never serialized.
    #[serde(skip)]
    pub extensions: Extensions,
}

/// A validated call as hooks ([`crate::PreUseHook`]) and the runtime policy ([`crate::RuntimePolicy`])
/// see it: its identity, its input and the session's workspace, all borrowed from the call.
#[derive(Debug, Clone, Copy)]
pub struct CallView<'a> {
    /// Who called which tool.
    pub call: &'a CallHeader,
    /// The tool's class (a call that reaches a hook or a policy always has one).
    pub side_effects: SideEffect,
    /// The validated input (for a pre-use hook: as rewritten by the hooks before it).
    pub input: &'a Value,
    /// The session's workspace root.
    pub workspace: &'a Path,
}

impl CallView<'_> {
    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.call.session_id
    }

    /// The tool_use id.
    pub fn tool_use_id(&self) -> &str {
        &self.call.tool_use_id
    }

    /// The tool's published name.
    pub fn tool_name(&self) -> &str {
        &self.call.tool_name
    }

    /// The call as the JSON an external hook gets on stdin, with `hook_event` set to
    /// `event` (`pre_tool_use`, `post_tool_use`).
    pub fn to_json(&self, event: &str) -> Value {
        json!({
            "hook_event": event,
            "session_id": self.call.session_id,
            "tool_use_id": self.call.tool_use_id,
            "tool_name": self.call.tool_name,
            "side_effects": self.side_effects,
            "input": self.input,
            "workspace": self.workspace,
        })
    }
}
