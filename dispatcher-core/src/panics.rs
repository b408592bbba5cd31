//! A tool's panic, contained, with the backtrace of where it happened for the host log.
//!
//! The first time a call runs, the dispatcher adds a panic hook (once per process) that
//! records the backtrace of each panic on its own thread and then runs whatever hook was
//! there before, so a host's own hook keeps working. A host that sets its hook later
//! replaces this one: panics are still contained, only without a backtrace.

use std::backtrace::Backtrace;
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    static LAST: RefCell<Option<Backtrace>> = const { RefCell::new(None) };
}

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            LAST.with(|last| *last.borrow_mut() = Some(Backtrace::force_capture()));
            previous(info);
        }));
    });
}

/// A contained panic.
#[derive(Debug)]
pub(crate) struct Caught {
    /// The panic message.
    pub(crate) message: String,
    /// Where it happened, if the hook saw it.
    pub(crate) backtrace: Option<String>,
}

/// Runs `f`, containing a panic.
pub(crate) fn contain<R>(f: impl FnOnce() -> R) -> Result<R, Caught> {
    install();
    LAST.with(|last| last.borrow_mut().take());
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| Caught {
        message: tool_api::abi::panic_message(&*payload),
        backtrace: LAST
            .with(|last| last.borrow_mut().take())
            .map(|b| b.to_string()),
    })
}
