//! # toolhost-py: toolhost for Python
//!
//! The native module of the `toolhost` wheel (`toolhost._native`; the Python package in
//! `python/toolhost` is the API its users import). It builds the host a toolhost
//! configuration describes, as the CLI does ([`toolhost::build_host`]), runs batches of a
//! model's tool calls without the GIL, asks a Python callback before side effects, and
//! streams the session's events.
//!
//! Built with maturin (`pyproject.toml`), for CPython 3.9 and later (one abi3 wheel per
//! platform). Plugin workers (isolation `process`) are this module too:
//! `python -m toolhost._worker`, which calls its `plugin_worker`; so is the wheel's
//! `toolhost` command (`toolhost._cli`, which calls its `cli`).

mod confirm;
mod convert;
mod host;

use pyo3::prelude::*;

pyo3::create_exception!(
    _native,
    ToolhostError,
    pyo3::exceptions::PyException,
    "Misuse of the toolhost API (a tool's failure is a result, never this)."
);
pyo3::create_exception!(
    _native,
    ConfigError,
    ToolhostError,
    "The configuration, workspace or plugin directories cannot make a host (the message says what to change)."
);
pyo3::create_exception!(
    _native,
    HostClosedError,
    ToolhostError,
    "The host was closed (after `with` or `close()`); make a new one."
);

/// Serves one plugin's calls as a worker process (isolation `process`), with the worker's
/// arguments; does not return: the process exits with the worker's status, without
/// Python's shutdown, which its sandbox may no longer allow.
#[pyfunction]
fn plugin_worker(py: Python<'_>, args: Vec<String>) -> PyResult<()> {
    init_logging();
    let args = plugin_host::worker::WorkerArgs::parse(args.into_iter().map(Into::into))
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("plugin-worker: {e}")))?;
    let code = py.detach(|| plugin_host::worker::run(args));
    std::process::exit(code)
}

/// The `toolhost` command (`toolhost._cli`, the wheel's console script): the CLI of the
/// `toolhost` binary, every subcommand, with `args` (the command's name first); plugin
/// workers are started with `worker` (`python -m toolhost._worker`), and the command
/// itself, for the child of an author's `plugin package` or `verify`, with `this`
/// (`python -m toolhost`). Does not return: the process exits with the command's status
/// (0, 1 a call's error result, 2 bad usage), as the binary's does, without Python's
/// shutdown.
#[pyfunction]
fn cli(
    py: Python<'_>,
    args: Vec<std::ffi::OsString>,
    worker: Vec<String>,
    this: Vec<String>,
) -> PyResult<()> {
    let started_as = worker_command(&worker)
        .zip(worker_command(&this))
        .map(|(worker, cli)| toolhost::cli::StartedAs { worker, cli });
    let code = py.detach(|| toolhost::cli::run_command(args, started_as));
    std::process::exit(i32::from(code))
}

/// A program and the arguments that come first, from Python's list of them
/// (`[sys.executable, "-m", "toolhost._worker"]`); an empty list: none given.
fn worker_command(worker: &[String]) -> Option<(std::path::PathBuf, Vec<std::ffi::OsString>)> {
    worker
        .split_first()
        .map(|(program, args)| (program.into(), args.iter().map(Into::into).collect()))
}

/// Logs (a tool's, toolhost's) go to stderr, filtered by `TOOLHOST_LOG` (default `warn`),
/// unless the program set up its own `tracing` subscriber. Set up by the first host (or
/// plugin worker), not on import: the `toolhost` command sets up the CLI's own.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOOLHOST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,rmcp::service=error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<host::NativeHost>()?;
    m.add_class::<host::NativeBatch>()?;
    m.add_class::<host::NativeEvents>()?;
    m.add_class::<confirm::Confirmation>()?;
    m.add("ToolhostError", py.get_type::<ToolhostError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("HostClosedError", py.get_type::<HostClosedError>())?;
    m.add_function(wrap_pyfunction!(plugin_worker, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
