//! [`Policies`]: a loaded set of Cedar policies deciding calls ([`CallRules`]), each tool
//! checked against them when first seen and again whenever it changes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use cedar_policy::{Authorizer, Context, Decision, PolicySet, Request, Response};
use dispatcher_core::{
    CallRules, Mode, RuleCall, RuleCaller, RuleTool, RuleVerdict, ToolDefinition,
};

use crate::check::{ASK_BASE, Sets, Unfit, check};
use crate::error::{PolicyError, Problem};
use crate::load::{Loaded, Scope, Source};
use crate::request::{Kept, Parties, Types};

/// How policies see time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// The offset from UTC, in minutes, of the clock `context.request.hour`, `minute` and
    /// `weekday` are read on (`context.request.time` is the instant itself). Default 0.
    pub utc_offset_minutes: i32,
}

/// A tool as it was last checked.
struct Checked {
    serial: u64,
    fit: Result<Sets, Unfit>,
    /// Its calls' parties, by caller.
    parties: Kept,
}

/// A set of Cedar policies in force: what a call may do, checked against each tool's input
/// schema. See the crate's documentation for what a policy sees.
pub struct Policies {
    loaded: Loaded,
    options: Options,
    authorizer: Authorizer,
    types: Types,
    /// How many verdicts are kept, over every tool and caller ([`ALL_VERDICTS_KEPT`]).
    verdicts_kept: Arc<AtomicUsize>,
    /// Each tool's check, by name, for the registration (serial) it was made for.
    tools: RwLock<HashMap<Arc<str>, Arc<Checked>>>,
    /// What a refusal for want of a permit names: the files.
    everything: Arc<str>,
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies")
            .field("policies", &self.loaded.policies.len())
            .field("options", &self.options)
            .finish()
    }
}

impl Policies {
    /// Reads `sources` and checks every policy against the tools there are now (`tools`):
    /// a policy that does not parse, names a tool that does not exist, or reads an
    /// attribute a tool it applies to does not have is refused, with its file, line and
    /// what exists instead. All problems are reported at once. A tool named with one of the
    /// prefixes `later` (a server that has not started, or starts per caller) may arrive
    /// later: it is checked when it does.
    pub fn load(
        sources: &[Source],
        options: Options,
        tools: &[ToolDefinition],
        later: &[String],
    ) -> Result<Policies, PolicyError> {
        let loaded = Loaded::read(sources)?;
        let mut problems: Vec<Problem> = Vec::new();
        for (_, info) in &loaded.policies {
            let Scope::Tools(named) = &info.scope else {
                continue;
            };
            for name in named {
                if !tools.iter().any(|t| t.name == *name)
                    && !later.iter().any(|prefix| name.starts_with(prefix.as_str()))
                {
                    let file = &loaded.files[info.file];
                    problems.push(Problem {
                        file: file.name.clone(),
                        line: info.line,
                        column: 1,
                        policy: None,
                        message: format!(
                            "{} names the tool {name:?}, which does not exist",
                            info.label
                        ),
                        help: Some(similar(name, tools)),
                    });
                }
            }
        }
        problems.extend(by_tool(&loaded, tools));
        if !problems.is_empty() {
            return Err(PolicyError::Invalid(problems));
        }
        let files: Vec<&str> = loaded.files.iter().map(|f| f.name.as_str()).collect();
        let everything = format!("the policies of {}", files.join(", ")).into();
        Ok(Policies {
            loaded,
            options,
            authorizer: Authorizer::new(),
            verdicts_kept: Arc::default(),
            types: Types::new().ok_or_else(|| {
                PolicyError::Invalid(vec![Problem {
                    file: String::new(),
                    line: 0,
                    column: 0,
                    policy: None,
                    message: "Cedar refused toolhost's entity type names".into(),
                    help: None,
                }])
            })?,
            tools: RwLock::default(),
            everything,
        })
    }

    /// How many policies are in force.
    pub fn len(&self) -> usize {
        self.loaded.policies.len()
    }

    /// Whether there are none (every call is refused: nothing permits it).
    pub fn is_empty(&self) -> bool {
        self.loaded.policies.is_empty()
    }

    /// The tool's check for this registration: made now when the tool is new or changed.
    fn checked(&self, tool: &RuleTool<'_>) -> Arc<Checked> {
        if let Some(checked) = self
            .tools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tool.name)
            .filter(|c| c.serial == tool.serial)
        {
            return checked.clone();
        }
        let fit = check(&self.loaded, tool.name, &tool.definition.input_schema).map_err(|unfit| {
            for u in &unfit {
                tracing::error!(
                    tool = tool.name,
                    "{} no longer fits the tool {:?}: {}; its calls are refused until the policy is changed to fit",
                    u.label,
                    tool.name,
                    u.problem
                );
            }
            unfit.into_iter().next().unwrap_or_else(|| Unfit {
                label: self.everything.clone(),
                problem: Problem {
                    file: String::new(),
                    line: 0,
                    column: 0,
                    policy: None,
                    message: "not checked".into(),
                    help: None,
                },
            })
        });
        let checked = Arc::new(Checked {
            serial: tool.serial,
            fit,
            parties: Kept::default(),
        });
        self.tools
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(tool.name.into(), checked.clone());
        checked
    }

    fn label(&self, id: &cedar_policy::PolicyId) -> Arc<str> {
        match self.loaded.get(id) {
            Some((_, info)) => info.label.clone(),
            None => format!("policy {id}").into(),
        }
    }

    fn judge(&self, set: &PolicySet, parties: &Parties, context: Context) -> Option<Response> {
        let request = Request::new(
            parties.principal.clone(),
            parties.action.clone(),
            parties.resource.clone(),
            context,
            None,
        )
        .ok()?;
        Some(
            self.authorizer
                .is_authorized(&request, set, &parties.entities),
        )
    }

    fn refuse(&self, rule: Arc<str>, advice: String) -> RuleVerdict {
        RuleVerdict {
            mode: Mode::Deny,
            rule,
            advice: advice.into(),
        }
    }

    /// The first policy that failed to evaluate, as a refusal.
    fn failed(&self, response: &Response) -> Option<RuleVerdict> {
        let error = response.diagnostics().errors().next()?;
        Some(self.refuse(
            self.label(failed_policy(error)),
            format!(
                "it could not be evaluated for this call ({error}), and a policy that cannot be evaluated refuses; guard an optional attribute with `has`, or fix the policy"
            ),
        ))
    }
}

/// The policy an evaluation error is in.
fn failed_policy(error: &cedar_policy::AuthorizationError) -> &cedar_policy::PolicyId {
    let cedar_policy::AuthorizationError::PolicyEvaluationError(e) = error;
    e.policy_id()
}

/// A problem found for some tools.
struct Found<'a> {
    problem: Problem,
    tools: Vec<&'a str>,
    /// How many tools its policy applies to.
    applies: usize,
    helps: Vec<Option<String>>,
}

/// Every tool's problems with the policies that apply to it, each said once: for every tool
/// its policy applies to, or naming the tools that have it.
fn by_tool<'a>(loaded: &Loaded, tools: &'a [ToolDefinition]) -> Vec<Problem> {
    let mut found: Vec<Found<'a>> = Vec::new();
    for tool in tools {
        let Err(unfit) = check(loaded, &tool.name, &tool.input_schema) else {
            continue;
        };
        for u in unfit {
            let mut problem = u.problem;
            // Cedar names the action; the tools are said below.
            problem.message = problem
                .message
                .replace(&format!(" for Action::{:?}", tool.name), "");
            let help = problem.help.take();
            match found.iter_mut().find(|f| f.problem == problem) {
                Some(f) => {
                    f.tools.push(&tool.name);
                    f.helps.push(help);
                }
                None => {
                    let applies = loaded
                        .policies
                        .iter()
                        .find(|(_, info)| info.label == u.label)
                        .map_or(0, |(_, info)| {
                            tools
                                .iter()
                                .filter(|t| info.scope.applies_to(&t.name))
                                .count()
                        });
                    found.push(Found {
                        problem,
                        tools: vec![&tool.name],
                        applies,
                        helps: vec![help],
                    });
                }
            }
        }
    }
    found
        .into_iter()
        .map(|f| {
            let mut problem = f.problem;
            let which = match f.tools.as_slice() {
                [one] => format!("tool {one:?}"),
                _ if f.tools.len() == f.applies => "every tool it applies to".to_string(),
                many => format!("tools {}", many.join(", ")),
            };
            problem.message = format!("for {which}: {}", problem.message);
            problem.help = common_help(&f.helps);
            problem
        })
        .collect()
}

/// The help the tools' problems share: a list of one tool's arguments is left out where
/// the tools differ.
fn common_help(helps: &[Option<String>]) -> Option<String> {
    let first = helps.first()?.clone();
    if helps.iter().all(|h| *h == first) {
        return first;
    }
    let without_arguments = |h: &Option<String>| {
        h.as_ref().map(|h| {
            h.split("; ")
                .filter(|part| {
                    !part.starts_with("context.arguments has")
                        && !part.contains("is not readable by policies")
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
    };
    let first = without_arguments(&helps[0]);
    helps
        .iter()
        .all(|h| without_arguments(h) == first)
        .then_some(first)
        .flatten()
}

/// The tools whose names are most like `name`, for an error.
fn similar(name: &str, tools: &[ToolDefinition]) -> String {
    let mut near: Vec<&str> = tools
        .iter()
        .map(|t| t.name.as_str())
        .filter(|t| {
            let (a, b) = (t.to_ascii_lowercase(), name.to_ascii_lowercase());
            a.contains(&b) || b.contains(&a) || common_prefix(&a, &b) >= 3
        })
        .collect();
    near.sort_unstable();
    near.truncate(8);
    if near.is_empty() {
        format!(
            "there are {} tools; `toolhost tools` lists them",
            tools.len()
        )
    } else {
        format!("tools with a similar name: {}", near.join(", "))
    }
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

impl Policies {
    /// The verdict on a call whose parties and context are known.
    fn verdict(&self, parties: &Parties, context: Option<Context>) -> RuleVerdict {
        let Some(response) = context
            .clone()
            .and_then(|c| self.judge(&parties.hard, parties, c))
        else {
            return self.refuse(
                self.everything.clone(),
                "the call's arguments could not be described to them".into(),
            );
        };
        if let Some(failed) = self.failed(&response) {
            return failed;
        }
        if response.decision() == Decision::Deny {
            return match response.diagnostics().reason().next() {
                Some(forbid) => self.refuse(
                    self.label(forbid),
                    "it forbids this call; change or remove that policy to allow it".into(),
                ),
                None => self.refuse(
                    self.everything.clone(),
                    "no permit policy matches this call; add one that does to allow it".into(),
                ),
            };
        }
        let permitted_by = response
            .diagnostics()
            .reason()
            .next()
            .map_or_else(|| self.everything.clone(), |id| self.label(id));
        if let Some(ask) = &parties.ask {
            let Some(response) = context.and_then(|c| self.judge(ask, parties, c)) else {
                return self.refuse(
                    self.everything.clone(),
                    "the call's arguments could not be described to them".into(),
                );
            };
            if let Some(failed) = self.failed(&response) {
                return failed;
            }
            if let Some(asking) = response
                .diagnostics()
                .reason()
                .find(|id| AsRef::<str>::as_ref(*id) != ASK_BASE)
                .filter(|_| response.decision() == Decision::Deny)
            {
                return RuleVerdict {
                    mode: Mode::Prompt,
                    rule: self.label(asking),
                    advice: "it asks about this call".into(),
                };
            }
        }
        RuleVerdict {
            mode: Mode::Auto,
            rule: permitted_by,
            advice: "".into(),
        }
    }
}

/// How many verdicts one caller's calls of one tool keep.
const VERDICTS_KEPT: usize = 256;

/// How many verdicts a set of policies keeps in all (with keys of at most [`KEY_MAX`]
/// bytes: some 40 MB at most, whatever callers send); past it, calls are judged each time.
const ALL_VERDICTS_KEPT: usize = 65_536;

/// The longest key a verdict is kept under (longer arguments are judged each time).
const KEY_MAX: usize = 512;

/// What the policies read of a call, exactly, as text: the key its verdict is kept under
/// (the same parties and the same values always get the same verdict).
fn read_key(call: &RuleCall<'_>, sets: &Sets, request: Option<&str>) -> Option<String> {
    let mut key = String::new();
    if sets.reads.any_arguments() {
        for (name, _, _) in &sets.arguments.attributes {
            if sets.reads.argument(name) {
                key.push_str(name);
                key.push('\u{1}');
                if let Some(value) = call.arguments.get(name) {
                    key.push_str(&value.to_string());
                }
                key.push('\u{2}');
            }
        }
    }
    if let Some(request) = request {
        key.push_str(request);
    }
    (key.len() <= KEY_MAX).then_some(key)
}

impl CallRules for Policies {
    fn decide(&self, call: &RuleCall<'_>) -> RuleVerdict {
        let checked = self.checked(&call.tool);
        let sets = match &checked.fit {
            Ok(sets) => sets,
            Err(unfit) => {
                return self.refuse(
                    unfit.label.clone(),
                    format!(
                        "it no longer fits the tool ({}), and the tool's calls are refused until the policy is changed to fit",
                        unfit.problem
                    ),
                );
            }
        };
        let Some(parties) = checked.parties.get(
            &self.types,
            &call.caller,
            &call.tool,
            sets,
            &self.verdicts_kept,
        ) else {
            return self.refuse(
                self.everything.clone(),
                "the caller or the tool could not be described to them".into(),
            );
        };
        let reads = &sets.reads;
        let request = reads.request.then(|| crate::request::Now::of(call));
        let key = read_key(call, sets, request.as_ref().map(|r| r.key.as_str()));
        let verdicts = || {
            parties
                .verdicts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        if let Some(kept) = key.as_ref().and_then(|k| verdicts().get(k).cloned()) {
            return kept;
        }
        // The context holds what the policies read, only.
        let mut pairs = Vec::with_capacity(2);
        if reads.any_arguments() {
            let empty = serde_json::Map::new();
            let object = call.arguments.as_object().unwrap_or(&empty);
            if let Some(arguments) = sets.arguments.value_of(object, |n| reads.argument(n)) {
                pairs.push(("arguments".to_string(), arguments));
            }
        }
        if let Some(request) = request {
            pairs.push((
                "request".to_string(),
                request.value(self.options.utc_offset_minutes),
            ));
        }
        let context = if pairs.is_empty() {
            Some(Context::empty())
        } else {
            Context::from_pairs(pairs).ok()
        };
        let verdict = self.verdict(&parties, context);
        if let Some(key) = key {
            let mut kept = verdicts();
            if kept.len() >= VERDICTS_KEPT {
                self.verdicts_kept.fetch_sub(kept.len(), Ordering::Relaxed);
                kept.clear();
            }
            if self.verdicts_kept.fetch_add(1, Ordering::Relaxed) < ALL_VERDICTS_KEPT {
                kept.insert(key, verdict.clone());
            } else {
                self.verdicts_kept.fetch_sub(1, Ordering::Relaxed);
            }
        }
        verdict
    }

    fn lists(&self, caller: &RuleCaller<'_>, tool: &RuleTool<'_>) -> bool {
        let checked = self.checked(tool);
        let Ok(sets) = &checked.fit else {
            return false;
        };
        let Some(parties) =
            checked
                .parties
                .get(&self.types, caller, tool, sets, &self.verdicts_kept)
        else {
            return false;
        };
        // Judged without the call's context: a policy that reads it fails, and so may
        // still match some call (a permit) or not (a forbid).
        let Some(response) = self.judge(&parties.hard, &parties, Context::empty()) else {
            return false;
        };
        match response.decision() {
            Decision::Allow => true,
            // A forbid that matched on the caller and the tool alone refuses every call.
            Decision::Deny if response.diagnostics().reason().next().is_some() => false,
            // No permit matched: one that needs the call's context may.
            Decision::Deny => response.diagnostics().errors().any(|e| {
                self.loaded
                    .get(failed_policy(e))
                    .is_some_and(|(_, info)| crate::check::permits(info.effect))
            }),
        }
    }
}
