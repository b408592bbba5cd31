//! Policy files read and parsed: each policy with its id, its place (file and line), its
//! effect, whether it asks instead of refusing, and the tools its scope names.

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use cedar_policy::{ActionConstraint, Effect, Policy, PolicyId, PolicySet};
use miette::Diagnostic;

use crate::error::{PolicyError, Problem};

/// A file of policies: where to read it, and how messages name it (as the config wrote
/// it, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Where it is read from.
    pub path: PathBuf,
    /// How messages name it.
    pub name: String,
}

impl Source {
    /// A file named as its path is written.
    pub fn file(path: impl Into<PathBuf>) -> Source {
        let path = path.into();
        Source {
            name: path.display().to_string(),
            path,
        }
    }
}

/// Which tools a policy's scope can apply to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `action` unconstrained: every tool.
    Any,
    /// `action == Action::"NAME"` or `action in [...]`: these tools.
    Tools(Vec<String>),
}

impl Scope {
    pub(crate) fn applies_to(&self, tool: &str) -> bool {
        match self {
            Scope::Any => true,
            Scope::Tools(tools) => tools.iter().any(|t| t == tool),
        }
    }
}

/// One policy as loaded.
#[derive(Debug)]
pub(crate) struct Info {
    /// How decisions name it: `policy "no-curl" (policies/shell.cedar:3)`, or
    /// `policy at policies/shell.cedar:3` without an `@id`.
    pub(crate) label: Arc<str>,
    /// Which file (an index into [`Loaded::files`]).
    pub(crate) file: usize,
    pub(crate) line: usize,
    pub(crate) effect: Effect,
    /// A `forbid` marked `@ask`: the calls it matches are asked about, not refused.
    pub(crate) asks: bool,
    pub(crate) scope: Scope,
    /// What it reads of a call's context.
    pub(crate) reads: crate::reads::Reads,
}

/// A file's name and text, for the places errors point at.
#[derive(Debug)]
pub(crate) struct File {
    pub(crate) name: String,
    pub(crate) text: String,
}

impl File {
    /// The line and column (from 1) of byte `offset`.
    pub(crate) fn place(&self, offset: usize) -> (usize, usize) {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before
            .rfind('\n')
            .map_or(before.len(), |n| before.len() - n - 1)
            + 1;
        (line, column)
    }
}

/// Every policy of the files, in order.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) policies: Vec<(Policy, Info)>,
    pub(crate) files: Vec<File>,
    pub(crate) by_id: HashMap<PolicyId, usize>,
}

impl Loaded {
    /// Reads and parses `sources`; every problem found is reported, not only the first.
    pub(crate) fn read(sources: &[Source]) -> Result<Loaded, PolicyError> {
        let mut loaded = Loaded {
            policies: Vec::new(),
            files: Vec::new(),
            by_id: HashMap::new(),
        };
        let mut problems = Vec::new();
        for source in sources {
            let text = std::fs::read_to_string(&source.path).map_err(|e| PolicyError::Read {
                file: source.name.clone(),
                source: e,
            })?;
            loaded.files.push(File {
                name: source.name.clone(),
                text,
            });
            let index = loaded.files.len() - 1;
            loaded.parse(index, &mut problems);
        }
        if problems.is_empty() {
            Ok(loaded)
        } else {
            Err(PolicyError::Invalid(problems))
        }
    }

    fn parse(&mut self, index: usize, problems: &mut Vec<Problem>) {
        let file = &self.files[index];
        let set = match PolicySet::from_str(&file.text) {
            Ok(set) => set,
            Err(errors) => {
                for error in errors.iter() {
                    problems.push(Problem::at(
                        &file.name,
                        file.place(offset_of(error)),
                        error,
                        None,
                    ));
                }
                return;
            }
        };
        if let Some(template) = set.templates().next() {
            let text = template.to_string();
            let offset = file.text.find(text.as_str()).unwrap_or(0);
            let (line, column) = file.place(offset);
            problems.push(Problem {
                file: file.name.clone(),
                line,
                column,
                policy: None,
                message: "a template (a policy with ?principal or ?resource) is not taken here"
                    .into(),
                help: Some("write the principal or resource the policy is for".into()),
            });
        }
        // Policies come in the order of their text: each is found after the one before.
        let mut policies: Vec<&Policy> = set.policies().collect();
        policies.sort_by_key(|p| policy_number(p.id()));
        let mut from = 0;
        for policy in policies {
            let text = policy.to_string();
            let offset = file.text[from..]
                .find(text.as_str())
                .map_or(from, |at| from + at);
            from = offset + text.len();
            let (line, column) = file.place(offset);
            let named = policy.annotation("id").map(str::to_string);
            // Without an @id a policy is named by its place: its line, and its column when
            // another policy starts on the same line.
            let mut place = format!("{}:{line}", file.name);
            if named.is_none() && self.by_id.contains_key(&PolicyId::new(&place)) {
                place = format!("{place}:{column}");
            }
            let id = named.clone().unwrap_or_else(|| place.clone());
            let label: Arc<str> = match &named {
                Some(name) => format!("policy {name:?} ({place})").into(),
                None => format!("policy at {place}").into(),
            };
            let place = |message: String, help: Option<String>| Problem {
                file: file.name.clone(),
                line,
                column,
                policy: named.clone(),
                message,
                help,
            };
            let id = PolicyId::new(id);
            if let Some(first) = self.by_id.get(&id) {
                let (_, other) = &self.policies[*first];
                problems.push(place(
                    format!("the id {id} is already the id of {}", other.label),
                    Some("give each policy its own @id".into()),
                ));
                continue;
            }
            let asks = policy.annotation("ask").is_some();
            if asks && policy.effect() == Effect::Permit {
                problems.push(place(
                    "@ask marks a forbid policy (the calls it matches are asked about instead of refused), not a permit".into(),
                    Some("write `@ask forbid(...)` for calls to ask about".into()),
                ));
                continue;
            }
            let scope = match policy.action_constraint() {
                ActionConstraint::Any => Scope::Any,
                ActionConstraint::Eq(uid) => Scope::Tools(vec![uid.id().unescaped().to_string()]),
                ActionConstraint::In(uids) => Scope::Tools(
                    uids.iter()
                        .map(|u| u.id().unescaped().to_string())
                        .collect(),
                ),
            };
            self.by_id.insert(id.clone(), self.policies.len());
            self.policies.push((
                policy.new_id(id),
                Info {
                    label,
                    file: index,
                    line,
                    effect: policy.effect(),
                    asks,
                    scope,
                    reads: crate::reads::Reads::of(policy),
                },
            ));
        }
    }

    /// The policy of this id.
    pub(crate) fn get(&self, id: &PolicyId) -> Option<&(Policy, Info)> {
        self.by_id.get(id).map(|i| &self.policies[*i])
    }
}

/// `policy12` → 12: the parser numbers a file's policies in order.
fn policy_number(id: &PolicyId) -> usize {
    id.to_string()
        .trim_start_matches("policy")
        .parse()
        .unwrap_or(usize::MAX)
}

/// Where a diagnostic points: its first label's offset (0 without one).
pub(crate) fn offset_of(diagnostic: &dyn Diagnostic) -> usize {
    diagnostic
        .labels()
        .and_then(|mut labels| labels.next())
        .map_or(0, |label| label.offset())
}
