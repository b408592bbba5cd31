//! Where and within which limits a call runs: [`RuntimePolicy`] and its [`Grant`].

use std::time::Duration;

use crate::call::CallView;

use tool_api::SandboxMode;

/// The modes this host provides: `host`, and the OS sandboxes `read-only` and
/// `workspace-write` (enforced on Linux by the `sandbox` crate where the call's programs
/// start). `container`, `microvm`, `wasm` and `remote` are refused with a message that
/// names what exists.
pub const SUPPORTED: [SandboxMode; 3] = [
    SandboxMode::Host,
    SandboxMode::ReadOnly,
    SandboxMode::WorkspaceWrite,
];

/// Refuses a mode this host cannot provide, with the message users see.
pub fn check_supported(mode: SandboxMode) -> Result<(), String> {
    if SUPPORTED.contains(&mode) {
        Ok(())
    } else {
        Err(format!(
            "sandbox mode '{mode}' is not supported by this host (supported: host, read-only, workspace-write); tools are never run outside the sandbox they were granted"
        ))
    }
}

/// Where calls granted [`SandboxMode::Remote`] run: another host that executes a tool by
/// name (toolhost: another toolhost over MCP). The call's instance comes from here instead
/// of the tool's factory, and runs like any other: under the grant's timeout, cancelled
/// through [`tool_api::Tool::cancel`], its live output and its errors coming back.
pub trait RemoteHost: Send + Sync {
    /// Which host, for messages and listings (a URL).
    fn describe(&self) -> String;
    /// An instance of `tool` that runs there; `Err` when it cannot (not offered there, the
    /// host not reached), said to the model as the call's error.
    fn instance(&self, tool: &str) -> Result<Box<dyn tool_api::Tool>, tool_api::ToolError>;
}

/// Refuses a mode this host cannot provide, knowing whether a [`RemoteHost`] is set.
pub(crate) fn check_granted(mode: SandboxMode, remote: bool) -> Result<(), String> {
    if mode == SandboxMode::Remote {
        return if remote {
            Ok(())
        } else {
            Err("sandbox mode 'remote' needs a remote host, and none is set (toolhost: a [remote] table with its url)".into())
        };
    }
    check_supported(mode)
}

/// What a call is granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Where it runs: for the programs it starts, the OS sandbox they run in; under
    /// `read-only`, its context refuses writes too.
    pub sandbox: SandboxMode,
    /// Whether the programs it starts may use the network (under `read-only` and
    /// `workspace-write`).
    pub network: bool,
    /// How long it may run.
    pub timeout: Duration,
    /// How many characters of text the model gets before the rest is spooled to a file.
    pub max_result_chars: usize,
}

/// What the runtime policy sees of a call: the same view pre-use hooks get, with the input
/// the call will run with.
pub type GrantRequest<'a> = CallView<'a>;

/// The runtime policy: for each call that may run, a [`Grant`] that says where it runs and
/// within which limits.
///
/// The dispatcher computes a base grant from its config (the tool's timeout, its result
/// size cap, the configured sandbox) and hands it to the [`RuntimePolicy`], if the host set
/// one, which may tighten or loosen it, or refuse the call. The dispatch engine is the same
/// whatever the policy: it only reads the grant.
///
/// The modes provided are [`SUPPORTED`]: `host`, `read-only` and `workspace-write` (the
/// default), and `remote` when the host set a [`RemoteHost`] (the call runs there; its
/// validation, policy, confirmation and events stay here). A grant (or a config) that asks
/// for another is refused with a clear error (`permission_denied`, the call does not run),
/// never silently run on the host. A tool
/// learns its call's mode through its context
/// ([`tool_api::ToolContext::process_sandbox`]); under `read-only` the context refuses
/// writes.
///
/// ```
/// use std::time::Duration;
/// use dispatcher_core::{Grant, GrantRequest, RuntimePolicy};
///
/// /// Tools of a CI bot get at most 30 s and 20 000 characters.
/// struct Strict;
/// impl RuntimePolicy for Strict {
///     fn grant(&self, _call: &GrantRequest<'_>, base: Grant) -> Result<Grant, String> {
///         Ok(Grant {
///             timeout: base.timeout.min(Duration::from_secs(30)),
///             max_result_chars: base.max_result_chars.min(20_000),
///             ..base
///         })
///     }
/// }
/// # let _ = dispatcher_core::Dispatcher::builder().runtime(std::sync::Arc::new(Strict)).build();
/// ```
///
/// Decides each call's [`Grant`]. Runs on the async worker after confirmation: keep it quick.
pub trait RuntimePolicy: Send + Sync {
    /// The grant for one call, from the config's `base` grant; `Err(reason)` refuses the
    /// call (`permission_denied`, with the reason shown to the model).
    fn grant(&self, call: &GrantRequest<'_>, base: Grant) -> Result<Grant, String>;
}
