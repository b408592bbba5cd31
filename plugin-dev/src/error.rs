//! What a failed step reports: what was being done and why it failed.

/// A failed step: what was being done (`package greeter 0.1.0`) and why it failed, written
/// for the author who runs the command.
#[derive(Debug)]
pub struct Error {
    /// The step.
    pub step: String,
    /// Why it failed.
    pub why: String,
}

impl std::fmt::Display for Error {
    /// One line for a one-line reason; a report of several lines keeps its lines, indented
    /// under the step.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = self.why.trim_end();
        if why.contains('\n') {
            write!(f, "step '{}' failed:", self.step)?;
            for line in why.lines() {
                write!(f, "\n  {line}")?;
            }
            Ok(())
        } else {
            write!(f, "step '{}' failed: {why}", self.step)
        }
    }
}

impl std::error::Error for Error {}

/// The result of a step.
pub type Result<T = ()> = std::result::Result<T, Error>;

/// Makes an [`Error`].
pub fn fail<T>(step: &str, why: impl std::fmt::Display) -> Result<T> {
    Err(Error {
        step: step.into(),
        why: why.to_string(),
    })
}

/// Maps an I/O error into a step error.
pub fn io<T>(step: &str, r: std::io::Result<T>) -> Result<T> {
    r.or_else(|e| fail(step, e))
}

/// Announces a step on stderr (progress for long commands; stdout keeps what a command
/// prints as its answer, such as an archive's path).
pub fn announce(step: &str) {
    eprintln!("\n==> {step}");
}
