//! What goes wrong for the program's user: a usage or configuration problem.

/// A usage or configuration problem (the CLI's exit code 2), in words the user can act on.
#[derive(Debug)]
pub struct UsageError(pub String);

impl<E: std::fmt::Display> From<E> for UsageError {
    fn from(e: E) -> Self {
        UsageError(e.to_string())
    }
}
