//! Confirmations through a Python callback (`on_confirm`): it gets a [`Confirmation`] (the
//! question the terminal asks, and its parts) and answers `"allow"`, `"deny"` or
//! `"always"` (or a `Decision`, or a bool), from a plain function or a coroutine function.
//!
//! The callback runs on a thread of its own, holding the GIL only while it runs. A
//! coroutine runs on the event loop of the `run_async` that asked, else in a loop of its
//! own. A callback that raises, or answers something else, denies the call, and the result
//! says why.

use std::sync::{Arc, Mutex, PoisonError};

use dispatcher_core::ConfirmFuture;
use dispatcher_core::{Answer, ConfirmationRequest, Confirmer, Decision};
use pyo3::prelude::*;
use pyo3::types::PyString;

/// What the user is asked: the call that needs their answer.
#[pyclass(module = "toolhost._native", frozen, skip_from_py_object)]
pub struct Confirmation {
    /// The question, as the terminal asks it.
    #[pyo3(get)]
    question: String,
    /// The tool's name.
    #[pyo3(get)]
    tool: String,
    /// Its side-effect class: `none`, `read`, `write`, `execute` or `network`.
    #[pyo3(get)]
    side_effects: String,
    /// A short rendering of the input.
    #[pyo3(get)]
    input_summary: String,
    /// What the call would change (`will modify src/a.rs`, …).
    #[pyo3(get)]
    modifications: Vec<String>,
    /// The configuration key that asks (`tool_confirmation.default.write`, …).
    #[pyo3(get)]
    reason: String,
    /// The id of the tool call.
    #[pyo3(get)]
    tool_use_id: String,
    /// Asked by the tool while it runs, not by the policy before it starts.
    #[pyo3(get)]
    mid_call: bool,
}

#[pymethods]
impl Confirmation {
    fn __repr__(&self) -> String {
        format!(
            "Confirmation(tool={:?}, side_effects={:?}, input_summary={:?})",
            self.tool, self.side_effects, self.input_summary
        )
    }

    fn __str__(&self) -> String {
        self.question.clone()
    }
}

impl Confirmation {
    fn of(request: &ConfirmationRequest) -> Confirmation {
        Confirmation {
            question: toolhost::confirmation_question(request),
            tool: request.tool_name().to_string(),
            side_effects: request.side_effects().to_string(),
            input_summary: request.input_summary.clone(),
            modifications: request.projected_modifications.clone(),
            reason: request.reason.clone(),
            tool_use_id: request.call.tool_use_id.to_string(),
            mid_call: request.mid_call,
        }
    }
}

/// The callback, and the event loop of the `run_async` in progress, if any.
pub struct PyConfirmer {
    callback: Option<Py<PyAny>>,
    event_loop: Arc<Mutex<Option<Py<PyAny>>>>,
}

impl PyConfirmer {
    /// A confirmer over `callback` (`None`: nobody can be asked, every question is denied
    /// saying so); `event_loop` holds the loop async callbacks run on.
    pub fn new(callback: Option<Py<PyAny>>, event_loop: Arc<Mutex<Option<Py<PyAny>>>>) -> Self {
        PyConfirmer {
            callback,
            event_loop,
        }
    }
}

/// A denial that says why nobody, or nothing sensible, answered.
fn denied(why: String) -> Answer {
    Answer::fallback(Decision::Deny, why)
}

/// The callback's answer as a decision.
fn decision_of(answer: &Bound<'_, PyAny>) -> Result<Decision, String> {
    if let Ok(yes) = answer.extract::<bool>() {
        return Ok(if yes { Decision::Allow } else { Decision::Deny });
    }
    // A str, or an enum whose value is one (toolhost.Decision).
    // The string itself (a str enum's str() is its name, not its value).
    let text = match answer.cast::<PyString>() {
        Ok(s) => s.to_cow().map_err(|e| e.to_string())?.into_owned(),
        Err(_) => answer
            .getattr("value")
            .and_then(|v| v.extract::<String>())
            .map_err(|_| format!("the on_confirm callback answered {answer}, not a decision"))?,
    };
    match text.to_ascii_lowercase().as_str() {
        "allow" | "yes" | "y" => Ok(Decision::Allow),
        "deny" | "no" | "n" => Ok(Decision::Deny),
        "always" | "always_allow" | "a" => Ok(Decision::AlwaysAllow),
        other => Err(format!(
            "the on_confirm callback answered {other:?}; answer \"allow\", \"deny\" or \"always\""
        )),
    }
}

fn ask(
    callback: &Py<PyAny>,
    event_loop: Option<Py<PyAny>>,
    request: &ConfirmationRequest,
) -> Answer {
    Python::attach(|py| {
        let asked = Confirmation::of(request);
        let tool = asked.tool.clone();
        let outcome = (|| -> PyResult<Bound<'_, PyAny>> {
            let mut answer = callback.bind(py).call1((asked,))?;
            let asyncio = py.import("asyncio")?;
            if asyncio
                .call_method1("iscoroutine", (&answer,))?
                .is_truthy()?
            {
                answer = match &event_loop {
                    // The loop of the run_async that asked is running: the coroutine runs
                    // there, and this thread waits for it (the wait lets go of the GIL).
                    Some(event_loop) => asyncio
                        .call_method1("run_coroutine_threadsafe", (&answer, event_loop.bind(py)))?
                        .call_method0("result")?,
                    None => asyncio.call_method1("run", (&answer,))?,
                };
            }
            Ok(answer)
        })();
        match outcome {
            Ok(answer) => match decision_of(&answer) {
                Ok(decision) => decision.into(),
                Err(why) => {
                    tracing::warn!("{why}");
                    denied(format!("'{tool}' was not run: {why}."))
                }
            },
            Err(e) => {
                let why = format!("the on_confirm callback raised {e}");
                tracing::warn!("{why}");
                denied(format!("'{tool}' was not run: {why}."))
            }
        }
    })
}

impl Confirmer for PyConfirmer {
    fn name(&self) -> &str {
        "python"
    }

    fn confirm(&self, request: ConfirmationRequest) -> ConfirmFuture {
        let Some(callback) = Python::attach(|py| self.callback.as_ref().map(|c| c.clone_ref(py)))
        else {
            let why = format!(
                "'{}' was not run: it needs confirmation ({}), and no on_confirm callback was \
                 given to toolhost.Host; pass one, or allow the tool in toolhost.toml \
                 ([tool_confirmation.per_tool] {} = \"auto\")",
                request.tool_name(),
                request.reason,
                request.tool_name()
            );
            return Box::pin(std::future::ready(denied(why)));
        };
        let event_loop = self
            .event_loop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|l| Python::attach(|py| l.clone_ref(py)));
        Box::pin(async move {
            tokio::task::spawn_blocking(move || ask(&callback, event_loop, &request))
                .await
                .unwrap_or_else(|e| denied(format!("the on_confirm callback stopped: {e}")))
        })
    }
}
