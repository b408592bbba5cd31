//! The dispatcher's error vocabulary: the closed [`ErrorClass`] of results, and the errors
//! its API returns to the host ([`RegistrationError`], [`SessionError`]).

use std::fmt;

use serde::{Deserialize, Serialize};
use tool_api::ToolError;

/// Why a call ended in an error result. Closed: these are the only classes a model, an
/// event consumer or a dashboard will ever see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// No tool of that name is visible to the session.
    NotFound,
    /// The input failed the tool's schema (or the tool's own checks).
    ValidationError,
    /// A path escaped the workspace, or the OS refused access.
    PermissionDenied,
    /// The user, a hook or the policy denied the call.
    UserDenied,
    /// The call exceeded its time limit.
    Timeout,
    /// The tool failed, or failed unexpectedly (then the message is redacted).
    ExecutionError,
    /// The call was cancelled.
    Cancelled,
    /// Nobody answered the confirmation request in time.
    ConfirmationTimeout,
    /// The caller's rate limit for the tool was reached (or could not be checked): the
    /// message names the limit and when to retry.
    RateLimited,
}

impl ErrorClass {
    /// The wire name (`"not_found"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::NotFound => "not_found",
            ErrorClass::ValidationError => "validation_error",
            ErrorClass::PermissionDenied => "permission_denied",
            ErrorClass::UserDenied => "user_denied",
            ErrorClass::Timeout => "timeout",
            ErrorClass::ExecutionError => "execution_error",
            ErrorClass::Cancelled => "cancelled",
            ErrorClass::ConfirmationTimeout => "confirmation_timeout",
            ErrorClass::RateLimited => "rate_limited",
        }
    }

    /// The class a tool's own error maps to.
    pub fn of(error: &ToolError) -> ErrorClass {
        match error {
            ToolError::Failed(_) | ToolError::Internal(_) => ErrorClass::ExecutionError,
            ToolError::InvalidInput(_) => ErrorClass::ValidationError,
            ToolError::PermissionDenied(_) => ErrorClass::PermissionDenied,
            ToolError::Cancelled(_) => ErrorClass::Cancelled,
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a call was cancelled, so that nobody mistakes collateral damage for a failure of
/// the call's own. Serialized as `user`, `sibling_error` or `aborted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// The user (through the host) interrupted the session or the call.
    User,
    /// Another `execute` call of the same batch failed and the dispatcher is configured to
    /// `cancel_siblings`; this call did not fail itself.
    SiblingError,
    /// The host aborted or dropped the batch the call belonged to.
    Aborted,
}

impl CancelReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::User => "user",
            CancelReason::SiblingError => "sibling_error",
            CancelReason::Aborted => "aborted",
        }
    }
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A new config the running dispatcher refused, nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconfigureError {
    /// The setting cannot change while the dispatcher runs.
    #[error("`{setting}` cannot change while toolhost runs; restart it to apply the new value")]
    NeedsRestart {
        /// The setting's key.
        setting: String,
    },
}

/// A tool definition (or toolset) the dispatcher refused to register, naming why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// The name is not what model providers accept.
    #[error(
        "tool name '{name}' is invalid: names must match ^[a-zA-Z0-9_-]{{1,64}}$ (letters, digits, '_' and '-', at most 64)"
    )]
    InvalidName {
        /// The refused name.
        name: String,
    },
    /// Another tool already has the name.
    #[error(
        "tool '{name}' from {new_source} clashes with the tool of the same name from {existing_source}: rename one of them"
    )]
    Duplicate {
        /// The clashing name.
        name: String,
        /// Who registered it first.
        existing_source: String,
        /// Who tried to register it again.
        new_source: String,
    },
    /// The schema uses a construct outside the supported subset.
    #[error(
        "tool '{tool}': input_schema uses {construct} at {pointer}, which is outside the supported subset: {hint}"
    )]
    UnsupportedConstruct {
        /// The tool.
        tool: String,
        /// JSON pointer of the construct inside `input_schema`.
        pointer: String,
        /// The keyword or construct.
        construct: String,
        /// What to use instead.
        hint: String,
    },
    /// The schema is malformed (wrong value type for a keyword, bad regex, dangling `$ref`).
    #[error("tool '{tool}': input_schema is invalid at {pointer}: {message}")]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// JSON pointer inside `input_schema`.
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// A toolset could not be registered or refreshed.
    #[error("toolset '{id}': {message}")]
    Toolset {
        /// The toolset id.
        id: String,
        /// What is wrong.
        message: String,
    },
    /// A declared path parameter is not a property of the schema.
    #[error("tool '{tool}': path parameter '{param}' is not a property of input_schema")]
    UnknownPathParam {
        /// The tool.
        tool: String,
        /// The parameter name.
        param: String,
    },
}

/// A session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The workspace root does not exist or cannot be opened.
    #[error("cannot open workspace '{path}': {source}")]
    Workspace {
        /// The root as given.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The session's allowlist names a toolset that is not registered.
    #[error("toolset '{id}' is not registered (registered: {known})")]
    UnknownToolset {
        /// The unknown id.
        id: String,
        /// The registered ids.
        known: String,
    },
    /// A per-session toolset failed to start.
    #[error("toolset '{id}' could not start for this session: {message}")]
    Toolset {
        /// The toolset id.
        id: String,
        /// Why.
        message: String,
    },
    /// A session with this id is open with another workspace.
    #[error(
        "session '{id}' is already open with workspace '{existing}'; close it before reopening it with '{requested}'"
    )]
    WorkspaceMismatch {
        /// Session id.
        id: String,
        /// The workspace it has.
        existing: String,
        /// The workspace requested now.
        requested: String,
    },
}
