//! What can be wrong with a set of policies: [`PolicyError`], each problem at its file and
//! line ([`Problem`]).

use miette::Diagnostic;

/// A set of policies that cannot be put in force.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A file could not be read.
    #[error("cannot read the policy file {file}: {source}")]
    Read {
        /// The file, as the config names it.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// Policies that do not parse, or do not fit the tools they are about.
    #[error("{}", list(.0))]
    Invalid(Vec<Problem>),
}

impl PolicyError {
    /// The problems, one per policy and place (empty for a file that could not be read).
    pub fn problems(&self) -> &[Problem] {
        match self {
            PolicyError::Invalid(problems) => problems,
            PolicyError::Read { .. } => &[],
        }
    }
}

fn list(problems: &[Problem]) -> String {
    let mut out = match problems.len() {
        1 => "a policy is not valid:".to_string(),
        n => format!("{n} problems in the policies:"),
    };
    for problem in problems {
        out.push_str("\n  ");
        out.push_str(&problem.to_string());
    }
    out
}

/// One problem, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file, as the config names it.
    pub file: String,
    /// Its line (from 1).
    pub line: usize,
    /// Its column (from 1).
    pub column: usize,
    /// The policy's `@id`, when it has one.
    pub policy: Option<String>,
    /// What is wrong.
    pub message: String,
    /// What to do, or what exists instead.
    pub help: Option<String>,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if let Some(id) = &self.policy {
            write!(f, "policy {id:?}: ")?;
        }
        write!(f, "{}", self.message)?;
        if let Some(help) = &self.help {
            write!(f, " ({help})")?;
        }
        Ok(())
    }
}

impl Problem {
    /// A diagnostic of Cedar's at `(line, column)` of `file`.
    pub(crate) fn at(
        file: &str,
        (line, column): (usize, usize),
        diagnostic: &dyn Diagnostic,
        policy: Option<String>,
    ) -> Problem {
        Problem {
            file: file.to_string(),
            line,
            column,
            policy,
            message: diagnostic.to_string(),
            help: diagnostic.help().map(|h| h.to_string()),
        }
    }
}
