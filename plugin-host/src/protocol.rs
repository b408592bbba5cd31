//! The wire protocol between a host and a plugin worker process (isolation `process`).
//!
//! The host starts the worker with one end of a Unix socketpair as the worker's standard
//! input; the worker moves it to a private descriptor at once and points fd 0 at
//! `/dev/null`, so the protocol never shares a descriptor a tool writes to (the worker's
//! stdout and stderr go to the host's log). Every message is one *frame*: a 4-byte
//! little-endian length, then that many bytes of JSON (one [`ToWorker`] or [`FromWorker`]).
//! A frame longer than [`MAX_FRAME`] is a protocol violation and ends the worker.
//!
//! The conversation:
//!
//! 1. the worker confines itself to the sandbox on its command line, opens the library
//!    named there and sends
//!    [`FromWorker::Ready`] (protocol version and what the library exports) or
//!    [`FromWorker::Refused`];
//! 2. the host sends [`ToWorker::Execute`] per call; while the call runs the worker sends
//!    [`FromWorker::Host`] for each host callback the tool makes (file access, host
//!    extension operations) and waits for [`ToWorker::HostReply`], and sends
//!    [`FromWorker::Log`] and [`FromWorker::Output`] without waiting;
//! 3. the call ends with [`FromWorker::Done`]. [`ToWorker::Cancel`] asks a running call to
//!    stop; [`ToWorker::PluginExt`] asks the plugin an extension question (per-call
//!    concurrency safety).
//!
//! Many calls run at once over one connection; every message names its call.
//!
//! This module holds only the types and the framing: the host side is in `isolated`, the
//! worker side in `worker`.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tool_api::ToolOutput;

use crate::error::Refusal;
use crate::library::Inspection;

/// The protocol version; host and worker must agree exactly (they are one build).
pub const PROTOCOL_VERSION: u32 = 2;

/// The largest frame either side accepts (64 MiB): a file the tool reads or writes through
/// the host must fit in one frame.
pub const MAX_FRAME: usize = 64 << 20;

/// A call's identity as the tool's context shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallIdentity {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// The tool_use block.
    pub tool_use_id: String,
    /// The workspace root.
    pub workspace_root: String,
}

/// An error crossing the protocol: a `tool_api::abi::ERROR_*` code and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    /// One of the `ERROR_*` codes.
    pub code: u8,
    /// The message.
    pub message: String,
}

/// A host callback a tool made (the `HostContext` methods that need the host).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum HostOp {
    /// `fs_read`.
    Read {
        /// Workspace-relative path.
        path: String,
    },
    /// `fs_read_bytes`.
    ReadBytes {
        /// Workspace-relative path.
        path: String,
    },
    /// `fs_write`.
    Write {
        /// Workspace-relative path.
        path: String,
        /// The bytes.
        data: Vec<u8>,
    },
    /// `fs_append`.
    Append {
        /// Workspace-relative path.
        path: String,
        /// The bytes.
        data: Vec<u8>,
    },
    /// `fs_exists`.
    Exists {
        /// Workspace-relative path.
        path: String,
    },
    /// `fs_list`.
    List {
        /// Workspace-relative path.
        path: String,
    },
    /// `fs_delete`.
    Delete {
        /// Workspace-relative path.
        path: String,
    },
    /// `fs_patch`.
    Patch {
        /// Workspace-relative path.
        path: String,
        /// The text to replace.
        old: String,
        /// Its replacement.
        new: String,
    },
    /// A host extension operation (`fs.metadata`, and any added later).
    Extension {
        /// The operation name.
        name: String,
        /// Its JSON payload.
        payload: String,
    },
}

/// What a host callback answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum HostAnswer {
    /// No value (write, append, delete, patch).
    Unit,
    /// Text (read, extension operations).
    Text(String),
    /// Bytes (read_bytes).
    Bytes(Vec<u8>),
    /// A yes/no (exists).
    Bool(bool),
    /// Names (list).
    Names(Vec<String>),
}

/// Host → worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToWorker {
    /// Run a call.
    Execute {
        /// The call's number on this connection.
        call: u64,
        /// The tool.
        tool: String,
        /// Its validated input.
        input: Value,
        /// What the context shows.
        identity: CallIdentity,
        /// The most verbose log level the host records for this call (0 = none).
        log_level: u8,
    },
    /// Ask a running call to stop.
    Cancel {
        /// The call.
        call: u64,
    },
    /// The answer to a [`FromWorker::Host`] request.
    HostReply {
        /// The call.
        call: u64,
        /// The request.
        request: u64,
        /// Its outcome.
        result: Result<HostAnswer, WireError>,
    },
    /// A plugin extension operation (`concurrency_safe`), answered by
    /// [`FromWorker::PluginExtReply`].
    PluginExt {
        /// The request.
        request: u64,
        /// The operation name.
        name: String,
        /// Its payload.
        payload: String,
    },
}

/// Worker → host.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromWorker {
    /// The library is open.
    Ready {
        /// The worker's [`PROTOCOL_VERSION`].
        protocol: u32,
        /// What the library exports.
        inspection: Inspection,
        /// What the worker's sandbox holds, as it checked after applying it before it
        /// opened the library (`None`: started unconfined).
        sandbox: Option<sandbox::Enforcement>,
    },
    /// The library could not be opened (or the worker could not confine itself).
    Refused {
        /// Why.
        refusal: Refusal,
    },
    /// A host callback; the tool waits for [`ToWorker::HostReply`].
    Host {
        /// The call.
        call: u64,
        /// The request's number within the worker.
        request: u64,
        /// The callback.
        op: HostOp,
    },
    /// A log line under the call's span.
    Log {
        /// The call.
        call: u64,
        /// 1 = error … 5 = trace.
        level: u8,
        /// The message.
        message: String,
    },
    /// A chunk of live output.
    Output {
        /// The call.
        call: u64,
        /// The chunk.
        chunk: String,
    },
    /// The call ended.
    Done {
        /// The call.
        call: u64,
        /// What the tool returned.
        result: Result<ToolOutput, WireError>,
    },
    /// The answer to [`ToWorker::PluginExt`].
    PluginExtReply {
        /// The request.
        request: u64,
        /// The plugin's answer.
        result: Result<String, WireError>,
    },
}

/// Serializes `message` into one frame.
pub fn encode<T: Serialize>(message: &T) -> io::Result<Vec<u8>> {
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, message).map_err(io::Error::other)?;
    let len = u32::try_from(frame.len() - 4)
        .ok()
        .filter(|&n| n as usize <= MAX_FRAME)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a message of {} bytes exceeds the frame limit", frame.len()),
            )
        })?;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    Ok(frame)
}

/// Writes one message as a frame (a single `write_all`, so concurrent writers that hold
/// one lock per frame never interleave).
pub fn write_frame<T: Serialize>(out: &mut impl Write, message: &T) -> io::Result<()> {
    out.write_all(&encode(message)?)
}

/// Reads one frame; `Ok(None)` at a clean end of stream (before a frame's first byte).
pub fn read_frame<T: for<'de> Deserialize<'de>>(input: &mut impl Read) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match input.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes exceeds the {MAX_FRAME}-byte limit"),
        ));
    }
    let mut body = vec![0u8; len];
    input.read_exact(&mut body)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad frame: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_end_cleanly() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &ToWorker::Cancel { call: 7 }).unwrap();
        let mut input = buf.as_slice();
        let back: ToWorker = read_frame(&mut input).unwrap().unwrap();
        assert!(matches!(back, ToWorker::Cancel { call: 7 }));
        assert!(read_frame::<ToWorker>(&mut input).unwrap().is_none());
    }

    #[test]
    fn oversized_or_garbage_frames_are_errors_not_allocations() {
        let mut huge = (u32::MAX).to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(read_frame::<ToWorker>(&mut huge.as_slice()).is_err());
        let mut garbage = 5u32.to_le_bytes().to_vec();
        garbage.extend_from_slice(b"hello");
        let err = read_frame::<ToWorker>(&mut garbage.as_slice()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let truncated = [3u8, 0];
        assert!(read_frame::<ToWorker>(&mut truncated.as_slice()).is_err());
    }
}
