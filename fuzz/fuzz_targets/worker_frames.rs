//! The host side of the plugin worker protocol: the frames a worker the host no longer
//! trusts may send. Every byte string must decode to frames or to an error (never a panic,
//! never an allocation past the frame limit); a `Ready` frame's tool definitions go
//! through the checks and the registration the host gives them, and a `Done` frame's
//! output through the conversion a result gets.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

use std::io::Cursor;

use plugin_host::protocol::{FromWorker, read_frame};

fuzz_target!(|data: &[u8]| {
    let mut input = Cursor::new(data);
    // A worker sends many frames on one stream; the host reads until the end or the first
    // violation, which ends the worker.
    while let Ok(Some(frame)) = read_frame::<FromWorker>(&mut input) {
        match frame {
            FromWorker::Ready { inspection, .. } => {
                let problems = tool_api::testing::definition_problems(&inspection.tools);
                if problems.is_empty() {
                    let dispatcher = dispatcher_core::Dispatcher::new();
                    for definition in inspection.tools {
                        // A refusal is an answer; only a panic is a finding.
                        let _ = dispatcher.register(tool_api::testing::noop(definition));
                    }
                }
            }
            FromWorker::Done {
                result: Ok(output), ..
            } => {
                let _ = output.text_content();
            }
            FromWorker::Log { level, .. } => {
                let _ = tool_api::Level::from_code(level);
            }
            _ => {}
        }
    }
});
