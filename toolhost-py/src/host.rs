//! The host a Python program holds: built from a toolhost configuration as the CLI builds
//! it, with one session over the workspace; its batches run on a tokio runtime of its own,
//! without the GIL.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dispatcher_core::provider::{self, Parsed};
use dispatcher_core::{Dispatcher, Session, ToolResultBlock};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use serde_json::Value;

use crate::confirm::PyConfirmer;
use crate::convert::{to_json, to_py};
use crate::{ConfigError, HostClosedError};

/// What a host holds until it is closed.
struct Open {
    host: toolhost::Host,
    session: Session,
}

/// The native side of `toolhost.Host`.
#[pyclass(module = "toolhost._native")]
pub struct NativeHost {
    runtime: Arc<HostRuntime>,
    open: Mutex<Option<Open>>,
    /// The event loop of the `run_async` in progress, for async confirmation callbacks.
    event_loop: Arc<Mutex<Option<Py<PyAny>>>>,
    /// One line per plugin package and MCP server.
    report: Vec<String>,
}

/// The dispatcher and session of an open host, or the error of a closed one.
fn opened(open: &Mutex<Option<Open>>) -> PyResult<(Dispatcher, Session)> {
    match &*open.lock().unwrap_or_else(PoisonError::into_inner) {
        Some(o) => Ok((o.host.dispatcher.clone(), o.session.clone())),
        None => Err(HostClosedError::new_err(
            "this toolhost.Host is closed; make a new one",
        )),
    }
}

/// A batch's blocks read, with GIL.
fn read_blocks(blocks: &Bound<'_, PyAny>) -> PyResult<Vec<Parsed>> {
    if blocks.is_instance_of::<PyString>() || blocks.cast::<pyo3::types::PyDict>().is_ok() {
        return Err(PyTypeError::new_err(
            "run() takes a list of tool call blocks (a model's tool_use blocks or tool calls), not one block",
        ));
    }
    let mut parsed = Vec::new();
    for (i, block) in blocks.try_iter()?.enumerate() {
        let block = block?;
        // A block that is not JSON becomes a result saying so, like any malformed block.
        let value =
            to_json(&block, &format!("block {i}")).unwrap_or_else(|e| Value::String(e.to_string()));
        if !provider::is_other_content(&value) {
            parsed.push(provider::parse(&value, i));
        }
    }
    Ok(parsed)
}

/// The results, in the order of the blocks.
fn results<'py>(
    py: Python<'py>,
    parsed: &[Parsed],
    mut done: std::vec::IntoIter<ToolResultBlock>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for p in parsed {
        let value = match &p.call {
            Ok(_) => match done.next() {
                Some(block) => provider::result(p.shape, &block),
                None => provider::refused(p.shape, &p.id, "the call was not run"),
            },
            Err(problem) => provider::refused(p.shape, &p.id, problem),
        };
        out.append(to_py(py, &value)?)?;
    }
    Ok(out)
}

/// The calls to make, in order.
fn calls(parsed: &[Parsed]) -> Vec<dispatcher_core::ToolUse> {
    parsed
        .iter()
        .filter_map(|p| p.call.as_ref().ok().cloned())
        .collect()
}

#[pymethods]
impl NativeHost {
    #[new]
    #[pyo3(signature = (workspace, config, plugins, on_confirm, session, worker))]
    fn new(
        py: Python<'_>,
        workspace: PathBuf,
        config: Option<PathBuf>,
        plugins: Vec<PathBuf>,
        on_confirm: Option<Py<PyAny>>,
        session: String,
        worker: Vec<String>,
    ) -> PyResult<NativeHost> {
        crate::init_logging();
        if !workspace.is_dir() {
            return Err(ConfigError::new_err(format!(
                "the workspace {} is not a directory; make it, or give one that exists",
                workspace.display()
            )));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("toolhost")
            .enable_all()
            .build()
            .map_err(|e| ConfigError::new_err(format!("cannot start the async runtime: {e}")))?;
        let event_loop = Arc::new(Mutex::new(None));
        let confirmer: Arc<dyn dispatcher_core::Confirmer> =
            Arc::new(PyConfirmer::new(on_confirm, event_loop.clone()));
        let worker = crate::worker_command(&worker);
        // Built without the GIL: starting MCP servers and plugin workers takes a while, and
        // Python threads go on meanwhile.
        let built = py.detach(|| {
            runtime.block_on(async {
                let (config, file) = toolhost::load_config(config.as_deref())?;
                let sources = toolhost::Sources {
                    config: &config,
                    file: &file,
                    extra_plugin_dirs: &plugins,
                    worker,
                };
                let host = toolhost::build_host(&sources, &workspace, Some(confirmer)).await?;
                let session = host.open_session_in(&session, &workspace)?;
                Ok::<_, toolhost::UsageError>((host, session))
            })
        });
        let (host, session) = built.map_err(|e| ConfigError::new_err(e.0))?;
        Ok(NativeHost {
            report: host.report_lines(),
            runtime: Arc::new(HostRuntime(Some(runtime))),
            open: Mutex::new(Some(Open { host, session })),
            event_loop,
        })
    }

    /// One line per plugin package and MCP server: loaded (with its tools) or refused
    /// (with why).
    #[getter]
    fn report(&self) -> Vec<String> {
        self.report.clone()
    }

    /// The session's tools in `format`.
    fn tools<'py>(&self, py: Python<'py>, format: &str) -> PyResult<Bound<'py, PyList>> {
        let (dispatcher, session) = opened(&self.open)?;
        if !provider::FORMATS.contains(&format) {
            return Err(PyValueError::new_err(format!(
                "unknown format {format:?}; use one of {}",
                provider::FORMATS.join(", ")
            )));
        }
        let out = PyList::empty(py);
        for listing in dispatcher.listing_for_session(&session) {
            if let Some(d) = provider::definition(format, &listing) {
                out.append(to_py(py, &d)?)?;
            }
        }
        Ok(out)
    }

    /// The session's tools ranked for `query`, best first, at most `limit`, in `format`.
    fn search_tools<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        limit: usize,
        format: &str,
    ) -> PyResult<Bound<'py, PyList>> {
        let (dispatcher, session) = opened(&self.open)?;
        if !provider::FORMATS.contains(&format) {
            return Err(PyValueError::new_err(format!(
                "unknown format {format:?}; use one of {}",
                provider::FORMATS.join(", ")
            )));
        }
        if limit == 0 {
            return Err(PyValueError::new_err(
                "limit must be at least 1: how many tools to return",
            ));
        }
        let out = PyList::empty(py);
        for found in dispatcher.search_tools(&session, query, limit) {
            if let Some(d) = provider::definition(format, &found.listing) {
                out.append(to_py(py, &d)?)?;
            }
        }
        Ok(out)
    }

    /// Runs a batch, without the GIL, and returns its results in order.
    fn run<'py>(
        &self,
        py: Python<'py>,
        blocks: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let (dispatcher, session) = opened(&self.open)?;
        let parsed = read_blocks(blocks)?;
        let calls = calls(&parsed);
        let runtime = self.runtime.clone();
        let done = py.detach(move || runtime.block_on(dispatcher.dispatch_batch(calls, &session)));
        results(py, &parsed, done.into_iter())
    }

    /// Starts a batch; its results go to `future` (an asyncio future of `event_loop`)
    /// through `resolve(future, results)` called on that loop.
    fn start(
        &self,
        blocks: &Bound<'_, PyAny>,
        event_loop: Py<PyAny>,
        future: Py<PyAny>,
        resolve: Py<PyAny>,
    ) -> PyResult<NativeBatch> {
        let (dispatcher, session) = opened(&self.open)?;
        let parsed = read_blocks(blocks)?;
        let calls = calls(&parsed);
        let ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
        *self
            .event_loop
            .lock()
            .unwrap_or_else(PoisonError::into_inner) =
            Some(Python::attach(|py| event_loop.clone_ref(py)));
        let batch = NativeBatch {
            dispatcher: dispatcher.clone(),
            session: session.id().to_string(),
            ids,
        };
        self.runtime.spawn(async move {
            let done = dispatcher.dispatch_batch(calls, &session).await;
            Python::attach(|py| {
                // The results, or the error that kept them from Python.
                let answer = match results(py, &parsed, done.into_iter()) {
                    Ok(list) => list.into_any(),
                    Err(e) => e.into_value(py).into_bound(py).into_any(),
                };
                // A closed loop has nobody waiting.
                let _ = event_loop.bind(py).call_method1(
                    "call_soon_threadsafe",
                    (resolve.bind(py), future.bind(py), answer),
                );
            });
        });
        Ok(batch)
    }

    /// Cancels every call of the session that is running.
    fn cancel(&self, py: Python<'_>) -> PyResult<usize> {
        let (dispatcher, session) = opened(&self.open)?;
        let runtime = self.runtime.clone();
        Ok(py.detach(move || runtime.block_on(dispatcher.cancel_session_tools(session.id()))))
    }

    /// The session's events from now on.
    fn events(&self) -> PyResult<NativeEvents> {
        let (_, session) = opened(&self.open)?;
        Ok(NativeEvents {
            rx: tokio::sync::Mutex::new(session.subscribe()),
            closed: Default::default(),
            runtime: self.runtime.clone(),
        })
    }

    /// Closes the session, stops the plugin workers and MCP servers; idempotent.
    fn close(&self, py: Python<'_>) {
        let open = self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(open) = open {
            let runtime = self.runtime.clone();
            py.detach(move || {
                runtime.block_on(async {
                    open.host.dispatcher.close_session(open.session.id()).await;
                    drop(open);
                });
            });
        }
    }
}

/// The host's tokio runtime, shut down in the background when its last holder goes.
///
/// The last holder is a Python object, dropped on whatever thread holds the GIL then (the
/// event loop's, say). A runtime dropped the ordinary way waits for its worker threads,
/// and one of them may be waiting for the GIL to hand a result to Python: the two would
/// wait for each other forever (seen here: pytest hung in `cargo xtask test`). Shut down
/// in the background, the workers end once they can.
pub struct HostRuntime(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for HostRuntime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        match &self.0 {
            Some(runtime) => runtime,
            // Taken only by `drop`, after which nothing derefs it.
            None => unreachable!("the runtime is taken only when it is dropped"),
        }
    }
}

impl Drop for HostRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for NativeHost {
    fn drop(&mut self) {
        // Its workers and servers never outlive it.
        let open = self
            .open
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(open);
    }
}

/// A batch started by `NativeHost.start`.
#[pyclass(module = "toolhost._native")]
pub struct NativeBatch {
    dispatcher: Dispatcher,
    session: String,
    ids: Vec<String>,
}

#[pymethods]
impl NativeBatch {
    /// Cancels its calls (those still running stop; their results say `cancelled`).
    fn cancel(&self) {
        for id in &self.ids {
            self.dispatcher.request_cancel(&self.session, id);
        }
    }
}

/// The session's events, as they come.
#[pyclass(module = "toolhost._native")]
pub struct NativeEvents {
    rx: tokio::sync::Mutex<tokio::sync::broadcast::Receiver<Arc<dispatcher_core::ToolEvent>>>,
    closed: std::sync::atomic::AtomicBool,
    runtime: Arc<HostRuntime>,
}

/// What waiting for an event gave.
enum Next {
    Event(Value),
    Quiet,
    Ended,
}

#[pymethods]
impl NativeEvents {
    /// The next event as a dict, waiting at most `timeout` seconds without the GIL:
    /// `None` when none came, and `StopIteration` once the host or this stream is closed.
    fn next<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Option<Bound<'py, PyAny>>> {
        use std::sync::atomic::Ordering;
        let ended = || Err(pyo3::exceptions::PyStopIteration::new_err(()));
        if self.closed.load(Ordering::Acquire) {
            return ended();
        }
        let wait = Duration::from_secs_f64(timeout.clamp(0.0, 3600.0));
        let next = py.detach(|| {
            self.runtime.block_on(async {
                let mut rx = self.rx.lock().await;
                loop {
                    match tokio::time::timeout(wait, rx.recv()).await {
                        Err(_) => return Next::Quiet,
                        Ok(Ok(event)) => {
                            return Next::Event(serde_json::to_value(&*event).unwrap_or_default());
                        }
                        Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(n))) => {
                            tracing::warn!("{n} events were dropped: the reader fell behind");
                        }
                        Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => {
                            return Next::Ended;
                        }
                    }
                }
            })
        });
        match next {
            _ if self.closed.load(Ordering::Acquire) => ended(),
            Next::Event(event) => to_py(py, &event).map(Some),
            Next::Quiet => Ok(None),
            Next::Ended => {
                self.closed.store(true, Ordering::Release);
                ended()
            }
        }
    }

    /// Stops following the events.
    fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
    }
}
