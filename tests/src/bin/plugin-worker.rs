//! The plugin worker the integration tests start for isolation `process` (what
//! `toolhost plugin-worker` is in the real binary): any program that calls
//! `plugin_host::worker::run` can be a host's worker.

use std::process::ExitCode;

fn main() -> ExitCode {
    match plugin_host::worker::WorkerArgs::parse(std::env::args_os().skip(1)) {
        Ok(args) => ExitCode::from(u8::try_from(plugin_host::worker::run(args)).unwrap_or(1)),
        Err(e) => {
            eprintln!("plugin-worker: {e}");
            ExitCode::from(2)
        }
    }
}
