//! Secrets in what tools return: found by rules (keys, tokens, passwords; data in
//! `rules.toml`, extended by the user's), redacted or blocked before a result leaves
//! toolhost.
//!
//! ```
//! let scanner = secrets::Scanner::builtin();
//! let (text, found) = scanner
//!     .redact("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n")
//!     .unwrap();
//! assert_eq!(text, "AWS_ACCESS_KEY_ID=[REDACTED aws-access-key-id]\n");
//! assert_eq!(&*found[0].kind, "aws-access-key-id");
//! ```
//!
//! The scan looks for every rule's keywords in one pass and runs a rule's pattern only on
//! the lines around its keywords, so text without any costs one pass. Live output goes
//! through [`Deltas`], which holds back what could be the start of a secret.

mod deltas;
mod scan;
mod settings;

pub use deltas::Deltas;
pub use scan::{Finding, RuleSpec, Scanner, entropy};
pub use settings::{Action, ArgumentsAction, Settings};

/// What can go wrong making a scanner.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// A rule of the config cannot be used.
    #[error("secret rule '{id}' cannot be used: {why} (fix or remove it in [[secrets.rules]])")]
    Rule {
        /// The rule's id.
        id: String,
        /// What is wrong with it.
        why: String,
    },
    /// The built-in rules did not load (a fault of this build).
    #[error("the built-in secret rules did not load: {0}")]
    Builtin(String),
}
