//! [`Policies`]: a loaded set of Cedar policies deciding calls ([`CallRules`]), each tool
//! checked against them when first seen and again whenever it changes.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, PoisonError, RwLock};

use cedar_policy::{
    Authorizer, Context, Decision, Entities, Entity, EntityId, EntityTypeName, EntityUid,
    PolicySet, Request, Response, RestrictedExpression,
};
use dispatcher_core::{CallRules, Mode, RuleCall, RuleCaller, RuleTool, RuleVerdict};
use serde_json::Value;

use crate::check::{ASK_BASE, Sets, Unfit, check};
use crate::error::{PolicyError, Problem};
use crate::load::{Loaded, Scope, Source};

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
}

/// A set of Cedar policies in force: what a call may do, checked against each tool's input
/// schema. See the crate's documentation for what a policy sees.
pub struct Policies {
    loaded: Loaded,
    options: Options,
    authorizer: Authorizer,
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

/// A tool known when policies are loaded: its name and input schema.
#[derive(Debug, Clone, Copy)]
pub struct KnownTool<'a> {
    /// Its published name.
    pub name: &'a str,
    /// Its input schema.
    pub input_schema: &'a Value,
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
        tools: &[KnownTool<'_>],
        later: &[String],
    ) -> Result<Policies, PolicyError> {
        let loaded = Loaded::read(sources)?;
        let mut problems: Vec<Problem> = Vec::new();
        for (_, info) in &loaded.policies {
            let Scope::Tools(named) = &info.scope else {
                continue;
            };
            for name in named {
                if !tools.iter().any(|t| t.name == name)
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
        // Each problem with the tools it was found for: one that every tool the policy
        // applies to has is said once, the others name their tools.
        let mut found: Vec<(Problem, Vec<&str>, usize)> = Vec::new();
        for tool in tools {
            let Err(unfit) = check(&loaded, tool.name, tool.input_schema) else {
                continue;
            };
            for u in unfit {
                match found.iter_mut().find(|(p, _, _)| *p == u.problem) {
                    Some((_, names, _)) => names.push(tool.name),
                    None => {
                        let applies = loaded
                            .policies
                            .iter()
                            .find(|(_, info)| info.label == u.label)
                            .map_or(0, |(_, info)| {
                                tools
                                    .iter()
                                    .filter(|t| info.scope.applies_to(t.name))
                                    .count()
                            });
                        found.push((u.problem, vec![tool.name], applies));
                    }
                }
            }
        }
        for (mut problem, names, applies) in found {
            if names.len() < applies || applies == 1 {
                let which = match names.as_slice() {
                    [one] => format!("tool {one:?}"),
                    many => format!("tools {}", many.join(", ")),
                };
                problem.message = format!("for {which}: {}", problem.message);
            }
            problems.push(problem);
        }
        if !problems.is_empty() {
            return Err(PolicyError::Invalid(problems));
        }
        let files: Vec<&str> = loaded.files.iter().map(|f| f.name.as_str()).collect();
        let everything = format!("the policies of {}", files.join(", ")).into();
        Ok(Policies {
            loaded,
            options,
            authorizer: Authorizer::new(),
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

    /// The entities a request is judged with: the caller (its groups as parents, its
    /// claims as tags) and the tool.
    fn entities(
        &self,
        caller: &RuleCaller<'_>,
        tool: &RuleTool<'_>,
    ) -> Option<(EntityUid, EntityUid, Entities)> {
        let principal = uid("Caller", caller.principal)?;
        let resource = uid("Tool", tool.name)?;
        let groups: Vec<EntityUid> = caller
            .facts
            .groups
            .iter()
            .filter_map(|g| uid("Group", g))
            .collect();
        let tags = caller.facts.claims.iter().map(|(name, value)| {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (name.clone(), RestrictedExpression::new_string(text))
        });
        let group_names = caller
            .facts
            .groups
            .iter()
            .map(|g| RestrictedExpression::new_string(g.clone()));
        let caller_entity = Entity::new_with_tags(
            principal.clone(),
            [
                (
                    "name".to_string(),
                    RestrictedExpression::new_string(caller.principal.to_string()),
                ),
                (
                    "groups".to_string(),
                    RestrictedExpression::new_set(group_names),
                ),
            ],
            groups,
            tags,
        )
        .ok()?;
        let string = |s: &str| RestrictedExpression::new_string(s.to_string());
        let tool_entity = Entity::new(
            resource.clone(),
            [
                ("name".to_string(), string(tool.name)),
                ("toolset".to_string(), string(tool.toolset.unwrap_or(""))),
                ("source".to_string(), string(tool.source)),
                (
                    "side_effect".to_string(),
                    string(tool.side_effects.as_str()),
                ),
                ("version".to_string(), string(tool.version.unwrap_or(""))),
                (
                    "pinned".to_string(),
                    RestrictedExpression::new_bool(tool.pinned),
                ),
            ]
            .into_iter()
            .collect(),
            Default::default(),
        )
        .ok()?;
        let entities = Entities::from_entities([caller_entity, tool_entity], None).ok()?;
        Some((principal, resource, entities))
    }

    /// `context.request`: how the call came, and when.
    fn request(&self, call: &RuleCall<'_>) -> RestrictedExpression {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let now = chrono::DateTime::from_timestamp(
            i64::try_from(since_epoch.as_secs()).unwrap_or(0),
            since_epoch.subsec_nanos(),
        )
        .unwrap_or_default();
        let local = now + chrono::Duration::minutes(i64::from(self.options.utc_offset_minutes));
        use chrono::{Datelike, Timelike};
        let (era, transport) = call
            .request
            .map_or(("", "embedded"), |r| (r.era, r.transport));
        let fields = [
            ("era", RestrictedExpression::new_string(era.into())),
            (
                "transport",
                RestrictedExpression::new_string(transport.into()),
            ),
            (
                "time",
                RestrictedExpression::new_datetime(
                    now.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
                ),
            ),
            (
                "hour",
                RestrictedExpression::new_long(i64::from(local.hour())),
            ),
            (
                "minute",
                RestrictedExpression::new_long(i64::from(local.minute())),
            ),
            (
                "weekday",
                RestrictedExpression::new_long(i64::from(local.weekday().number_from_monday())),
            ),
        ];
        RestrictedExpression::new_record(fields.map(|(k, v)| (k.to_string(), v)))
            .unwrap_or_else(|_| RestrictedExpression::new_bool(false))
    }

    fn judge(
        &self,
        set: &PolicySet,
        principal: &EntityUid,
        action: &EntityUid,
        resource: &EntityUid,
        context: Context,
        entities: &Entities,
    ) -> Option<Response> {
        let request = Request::new(
            principal.clone(),
            action.clone(),
            resource.clone(),
            context,
            None,
        )
        .ok()?;
        Some(self.authorizer.is_authorized(&request, set, entities))
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

/// `Type::"id"`.
fn uid(kind: &str, id: &str) -> Option<EntityUid> {
    let kind = EntityTypeName::from_str(kind).ok()?;
    Some(EntityUid::from_type_name_and_id(kind, EntityId::new(id)))
}

/// The tools whose names are most like `name`, for an error.
fn similar(name: &str, tools: &[KnownTool<'_>]) -> String {
    let mut near: Vec<&str> = tools
        .iter()
        .map(|t| t.name)
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
        let Some((principal, resource, entities)) = self.entities(&call.caller, &call.tool) else {
            return self.refuse(
                self.everything.clone(),
                "the caller or the tool could not be described to them".into(),
            );
        };
        let Some(action) = uid("Action", call.tool.name) else {
            return self.refuse(
                self.everything.clone(),
                "the tool's name is not one they take".into(),
            );
        };
        let arguments = match call.arguments {
            Value::Object(object) => sets.arguments.value(object),
            _ => sets.arguments.value(&serde_json::Map::new()),
        };
        let context = || {
            let arguments = arguments.clone()?;
            Context::from_pairs([
                ("arguments".to_string(), arguments),
                ("request".to_string(), self.request(call)),
            ])
            .ok()
        };
        let Some(response) = context()
            .and_then(|c| self.judge(&sets.hard, &principal, &action, &resource, c, &entities))
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
        if let Some(ask) = &sets.ask {
            let Some(response) = context()
                .and_then(|c| self.judge(ask, &principal, &action, &resource, c, &entities))
            else {
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

    fn lists(&self, caller: &RuleCaller<'_>, tool: &RuleTool<'_>) -> bool {
        let checked = self.checked(tool);
        let Ok(sets) = &checked.fit else {
            return false;
        };
        let Some((principal, resource, entities)) = self.entities(caller, tool) else {
            return false;
        };
        let Some(action) = uid("Action", tool.name) else {
            return false;
        };
        // Judged without the call's context: a policy that reads it fails, and so may
        // still match some call (a permit) or not (a forbid).
        let Some(response) = self.judge(
            &sets.hard,
            &principal,
            &action,
            &resource,
            Context::empty(),
            &entities,
        ) else {
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
