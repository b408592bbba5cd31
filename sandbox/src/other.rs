//! Platforms without Landlock and seccomp (macOS, the BSDs, Windows): nothing can be
//! enforced, and every confinement says so.

use crate::support::Unenforceable;

fn platform() -> String {
    format!(
        "this platform ({}) has no Landlock: toolhost's sandbox needs Linux 5.13 or later",
        std::env::consts::OS
    )
}

/// Always unavailable here.
pub(crate) fn landlock_abi() -> Result<i32, String> {
    Err(platform())
}

/// Always unavailable here.
pub(crate) fn seccomp_available() -> Result<(), String> {
    Err(format!(
        "this platform ({}) has no seccomp",
        std::env::consts::OS
    ))
}

/// Not asked here.
pub(crate) fn is_root() -> bool {
    false
}

/// Why nothing can be confined here.
pub(crate) fn unsupported() -> Unenforceable {
    Unenforceable {
        missing: vec![platform()],
    }
}

/// Always unavailable here.
pub(crate) fn namespaces() -> Result<crate::NamespaceSupport, String> {
    Err(format!(
        "this platform ({}) has no Linux namespaces",
        std::env::consts::OS
    ))
}

/// Where a confined process's egress listener arrives: never, here.
#[derive(Debug)]
pub struct Attached;

impl Attached {
    /// Nothing: no process is confined here.
    pub fn listener(self) -> std::io::Result<Option<std::net::TcpListener>> {
        Ok(None)
    }

    /// Nothing: no process is confined here.
    pub fn serve(
        self,
        _rules: crate::egress::Rules,
        _on_refusal: Option<crate::egress::OnRefusal>,
    ) -> std::io::Result<Option<crate::egress::Egress>> {
        Ok(None)
    }
}
