//! The one current-thread tokio runtime a fuzz target's async calls run on, made once.

use std::sync::OnceLock;

/// The runtime, made on first use.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}
