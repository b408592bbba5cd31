//! The audit trail: one [`AuditEntry`] per call that ended, whatever ended it, handed to
//! the dispatcher's [`AuditSink`] before the caller gets the result. What was decided and by
//! whom (the policy rule, a hook, an "always" grant, a user through which client, the
//! fallback, the timeout) and what came of it (the result class, the files modified, the
//! command run), with who called: the principal, the session, this instance.
//!
//! The arguments are not kept, only their SHA-256 (of their JSON with keys in order): a
//! trail that is safe to ship to a log store can still prove which arguments a call had.
//!
//! Without a sink (the default) nothing of this runs.

use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::confirmation::DecidedBy;
use crate::events::EventKind;
use crate::result::ToolResultBlock;

/// Where audit entries go (toolhost appends them to a JSON-lines file). Called on the
/// call's task when it ends: keep it short and never block for long.
pub trait AuditSink: Send + Sync {
    /// Records one ended call.
    fn record(&self, entry: &AuditEntry);
    /// Whether it reads [`AuditEntry::arguments_sha256`] (else, when no sink does, the
    /// digest is not computed and left empty). Default: it does.
    fn reads_digest(&self) -> bool {
        true
    }
}

/// The span each call runs in, made by the host: toolhost's is an OpenTelemetry span whose
/// parent is the caller's trace context. Without one, a call runs in a plain `tool_call`
/// span.
pub trait CallSpans: Send + Sync {
    /// The span of a call that starts now; `trace_parent` is the caller's W3C trace
    /// context ([`crate::Invocation::trace_parent`]), unchecked.
    fn open(&self, call: &crate::CallHeader, trace_parent: Option<&str>) -> tracing::Span;
    /// The call ended as `entry` says: what its span records before it closes.
    fn close(&self, span: &tracing::Span, entry: &AuditEntry);
}

/// One ended call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    /// When it ended, in milliseconds since the epoch.
    pub time_ms: u64,
    /// The instance that ran it ([`crate::Dispatcher::instance`]).
    pub instance: Arc<str>,
    /// Who it was called for ([`crate::SessionSpec::principal`]).
    pub principal: Arc<str>,
    /// The session.
    pub session: Arc<str>,
    /// The tool name as called.
    pub tool: Arc<str>,
    /// The tool_use id.
    pub tool_use_id: Arc<str>,
    /// The tool's class (`none` … `network`); absent for a tool that was not found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<tool_api::SideEffect>,
    /// SHA-256 of the arguments as the model sent them, hex (empty when no sink reads it).
    pub arguments_sha256: String,
    /// What was decided: `allow`, `always`, `deny`, `timeout` or `cancelled`; absent when
    /// the call ended before anything was decided (not found, invalid, rate limited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Who or what decided it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<DecidedBy>,
    /// `ok`, or the error class of the result.
    pub outcome: &'static str,
    /// What the tool reports it modified.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files_modified: Vec<String>,
    /// The command it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_executed: Option<String>,
    /// Secrets found in its result or its arguments, and what was done about them
    /// (`redact`, `block`, `refuse`, `ask`): each one's kind and place, never its value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secrets: Option<SecretsTrail>,
    /// From the call's start to its result, in milliseconds.
    pub duration_ms: f64,
    /// When the call started, in milliseconds since the epoch.
    #[serde(skip)]
    pub started_ms: u64,
    /// The caller's W3C trace context, when the host passed one on
    /// ([`crate::Invocation::trace_parent`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<Arc<str>>,
}

/// The secrets of one call, for its audit entry and its span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretsTrail {
    /// What was done about them.
    pub action: String,
    /// Each one found.
    pub found: Vec<crate::SecretSeen>,
}

/// A W3C `traceparent` (`00-TRACEID-PARENTID-FLAGS`), checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace id (not all zero).
    pub trace_id: [u8; 16],
    /// The parent span's id (not all zero).
    pub parent_id: [u8; 8],
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// `text` as a version-00 `traceparent` (or a later version's first four fields, as the
    /// recommendation says); `None` when it is not one.
    pub fn parse(text: &str) -> Option<TraceParent> {
        let mut parts = text.trim().split('-');
        let (version, trace, parent, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let version = u8::from_str_radix(version, 16).ok()?;
        if version == 0xff || (version == 0 && parts.next().is_some()) {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut parent_id = [0u8; 8];
        hex_into(trace, &mut trace_id)?;
        hex_into(parent, &mut parent_id)?;
        let mut flag = [0u8; 1];
        hex_into(flags, &mut flag)?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags: flag[0],
        })
    }
}

/// Lowercase hex `text` of exactly `out.len()` bytes into `out`.
fn hex_into(text: &str, out: &mut [u8]) -> Option<()> {
    if text.len() != out.len() * 2 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        let pair = text.get(2 * i..2 * i + 2)?;
        if pair.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(())
}

/// SHA-256 of `arguments` (their canonical JSON: [`canonical_json`]), hex.
pub fn digest(arguments: &Value) -> String {
    Sha256::digest(canonical_json(arguments))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `value` as JSON with every object's keys in sorted order and no spaces: the same bytes
/// however its keys were written, what a digest of arguments is taken over.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Value::String(k.clone()).to_string().as_bytes());
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

/// What a call in flight has learnt for its entry, from its events and its denials.
#[derive(Debug, Default)]
pub(crate) struct Trail {
    decided: Mutex<Option<(String, DecidedBy)>>,
    secrets: Mutex<Option<SecretsTrail>>,
}

impl Trail {
    /// Takes what an event of the call says about its decision.
    pub(crate) fn observe(&self, kind: &EventKind) {
        match kind {
            EventKind::ConfirmationResolved {
                decision,
                decided_by,
                ..
            } => self.decided(decision, decided_by.clone()),
            EventKind::SecretsFound { action, secrets } => {
                let mut trail = self.secrets.lock().unwrap_or_else(PoisonError::into_inner);
                match trail.as_mut() {
                    // Found in the arguments (asked about) and again in the result.
                    Some(t) => {
                        t.action = action.clone();
                        t.found.extend(secrets.iter().cloned());
                    }
                    None => {
                        *trail = Some(SecretsTrail {
                            action: action.clone(),
                            found: secrets.clone(),
                        })
                    }
                }
            }
            EventKind::Called { authorized_by, .. } => {
                let mut decided = self.lock();
                // A confirmation said more ("always"); else the call's own authorization.
                if decided.is_none() {
                    *decided = Some(("allow".into(), authorized_by.clone()));
                }
            }
            _ => {}
        }
    }

    /// Records a decision no event reports (a denial by the policy or a hook).
    pub(crate) fn decided(&self, decision: &str, by: DecidedBy) {
        let decision = match decision {
            "always_allow" => "always",
            other => other,
        };
        *self.lock() = Some((decision.to_string(), by));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(String, DecidedBy)>> {
        self.decided.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry of the call that ended with `block`.
    pub(crate) fn entry(&self, call: Called, block: &ToolResultBlock) -> AuditEntry {
        let decided = self.lock().take();
        let (decision, decided_by) = match decided {
            Some((d, by)) => (Some(d), Some(by)),
            None => (None, None),
        };
        AuditEntry {
            time_ms: crate::events::now_ms(),
            instance: call.instance,
            principal: call.principal,
            session: call.header.session_id.clone(),
            tool: call.header.tool_name.clone(),
            tool_use_id: call.header.tool_use_id.clone(),
            class: call.header.side_effects,
            arguments_sha256: call.arguments_sha256,
            decision,
            decided_by,
            outcome: block.error_class.map_or("ok", |c| c.as_str()),
            files_modified: block.record.files_modified.clone(),
            command_executed: block.record.command_executed.clone(),
            secrets: self
                .secrets
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
            duration_ms: call.started.elapsed().as_secs_f64() * 1000.0,
            started_ms: call.started_ms,
            trace_parent: call.trace_parent,
        }
    }
}

/// What an audited call carries for its entry, from its start to its end.
pub(crate) struct Audited {
    /// Who called what, as it started.
    pub(crate) called: Called,
    /// What it learns as it runs.
    pub(crate) trail: Trail,
}

/// Who called what, taken when the call starts.
pub(crate) struct Called {
    pub(crate) instance: Arc<str>,
    pub(crate) principal: Arc<str>,
    pub(crate) header: Arc<crate::call::CallHeader>,
    pub(crate) arguments_sha256: String,
    pub(crate) started: std::time::Instant,
    pub(crate) started_ms: u64,
    pub(crate) trace_parent: Option<Arc<str>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_and_a_malformed_one_refused() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let p = TraceParent::parse(good).unwrap_or_else(|| panic!("{good}"));
        assert_eq!(p.trace_id[0], 0x4b);
        assert_eq!(p.parent_id[7], 0xb7);
        assert_eq!(p.flags, 1);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
        // A later version may carry more fields.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
                .is_some()
        );
    }
}
