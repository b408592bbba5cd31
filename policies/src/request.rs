//! What a request is judged with: the parties (the caller and its groups, the tool, the
//! call's action) as Cedar entities, made once per caller and tool and kept; and
//! `context.request`, made per call.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cedar_policy::{
    Entities, Entity, EntityId, EntityTypeName, EntityUid, Policy, PolicyId, PolicySet,
    PrincipalConstraint, ResourceConstraint, RestrictedExpression,
};

use crate::check::{ASK_BASE, Sets};
use dispatcher_core::{RuleCall, RuleCaller, RuleTool};
use serde_json::Value;

/// The entity types, parsed once (Cedar parses a name each time it is made from text).
pub(crate) struct Types {
    caller: EntityTypeName,
    group: EntityTypeName,
    tool: EntityTypeName,
    action: EntityTypeName,
}

impl Types {
    pub(crate) fn new() -> Option<Types> {
        let name = |n: &str| EntityTypeName::from_str(n).ok();
        Some(Types {
            caller: name("Caller")?,
            group: name("Group")?,
            tool: name("Tool")?,
            action: name("Action")?,
        })
    }

    fn uid(kind: &EntityTypeName, id: &str) -> EntityUid {
        EntityUid::from_type_name_and_id(kind.clone(), EntityId::new(id))
    }

    pub(crate) fn action(&self, tool: &str) -> EntityUid {
        Self::uid(&self.action, tool)
    }
}

/// Who calls which tool, as Cedar entities, and the policies whose scope can match them.
pub(crate) struct Parties {
    pub(crate) principal: EntityUid,
    pub(crate) action: EntityUid,
    pub(crate) resource: EntityUid,
    pub(crate) entities: Entities,
    /// The tool's permits and refusing forbids whose principal and resource can be these.
    pub(crate) hard: PolicySet,
    /// Its `@ask` forbids likewise, with a permit of everything; `None` without any.
    pub(crate) ask: Option<PolicySet>,
    /// Verdicts already reached, by exactly what the policies read of a call.
    pub(crate) verdicts: Mutex<HashMap<String, dispatcher_core::RuleVerdict>>,
    /// The count of verdicts kept over every tool and caller: this one's leave it when
    /// they go.
    kept: Arc<AtomicUsize>,
}

impl Drop for Parties {
    fn drop(&mut self) {
        let mine = self.verdicts.get_mut().map_or(0, |v| v.len());
        self.kept.fetch_sub(mine, Ordering::Relaxed);
    }
}

/// Whether `policy`'s scope can match a request of `principal` (a member of `groups`) on
/// `resource`: a policy that cannot is never satisfied and never fails (Cedar checks the
/// scope first), so leaving it out changes no decision.
fn in_scope(
    policy: &Policy,
    principal: &EntityUid,
    groups: &[EntityUid],
    resource: &EntityUid,
) -> bool {
    let member = |uid: &EntityUid| uid == principal || groups.contains(uid);
    let principal_ok = match policy.principal_constraint() {
        PrincipalConstraint::Any => true,
        PrincipalConstraint::Eq(uid) => &uid == principal,
        PrincipalConstraint::In(uid) => member(&uid),
        PrincipalConstraint::Is(kind) => &kind == principal.type_name(),
        PrincipalConstraint::IsIn(kind, uid) => &kind == principal.type_name() && member(&uid),
    };
    // Tools have no parents: `in` a tool is being it.
    let resource_ok = match policy.resource_constraint() {
        ResourceConstraint::Any => true,
        ResourceConstraint::Eq(uid) | ResourceConstraint::In(uid) => &uid == resource,
        ResourceConstraint::Is(kind) => &kind == resource.type_name(),
        ResourceConstraint::IsIn(kind, uid) => &kind == resource.type_name() && &uid == resource,
    };
    principal_ok && resource_ok
}

fn set_of<'a>(policies: impl Iterator<Item = &'a Policy>) -> PolicySet {
    let mut set = PolicySet::new();
    for policy in policies {
        // Ids are unique across the files: adding cannot clash.
        let _ = set.add(policy.clone());
    }
    set
}

impl Parties {
    /// The caller (its groups as parents, its claims as tags: strings as they are, other
    /// values as their JSON) and the tool (its attributes, always present).
    fn of(
        types: &Types,
        caller: &RuleCaller<'_>,
        tool: &RuleTool<'_>,
        sets: &Sets,
        kept: &Arc<AtomicUsize>,
    ) -> Option<Parties> {
        let principal = Types::uid(&types.caller, caller.principal);
        let resource = Types::uid(&types.tool, tool.name);
        let group_uids: Vec<EntityUid> = caller
            .facts
            .groups
            .iter()
            .map(|g| Types::uid(&types.group, g))
            .collect();
        let scoped = |p: &&Policy| in_scope(p, &principal, &group_uids, &resource);
        let hard = set_of(sets.hard.iter().filter(scoped));
        let asking: Vec<&Policy> = sets.ask.iter().filter(scoped).collect();
        let ask = (!asking.is_empty()).then(|| {
            let mut set = set_of(asking.into_iter());
            if let Ok(base) = Policy::parse(
                Some(PolicyId::new(ASK_BASE)),
                "permit(principal, action, resource);",
            ) {
                let _ = set.add(base);
            }
            set
        });
        let string = |s: &str| RestrictedExpression::new_string(s.to_string());
        let tags = caller.facts.claims.iter().map(|(name, value)| {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (name.clone(), RestrictedExpression::new_string(text))
        });
        let caller_entity = Entity::new_with_tags(
            principal.clone(),
            [
                ("name".to_string(), string(caller.principal)),
                (
                    "groups".to_string(),
                    RestrictedExpression::new_set(caller.facts.groups.iter().map(|g| string(g))),
                ),
            ],
            group_uids,
            tags,
        )
        .ok()?;
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
        Some(Parties {
            principal,
            action: types.action(tool.name),
            resource,
            entities: Entities::from_entities([caller_entity, tool_entity], None).ok()?,
            hard,
            ask,
            verdicts: Mutex::default(),
            kept: kept.clone(),
        })
    }
}

/// How many callers' parties one tool keeps.
const KEPT: usize = 256;

/// The parties of one tool's calls, by caller: made at a caller's first call (its groups
/// and claims are part of the key, so a caller whose token changes gets new ones).
#[derive(Default)]
pub(crate) struct Kept {
    by_caller: Mutex<HashMap<u64, Arc<Parties>>>,
    hasher: std::collections::hash_map::RandomState,
}

impl Kept {
    pub(crate) fn get(
        &self,
        types: &Types,
        caller: &RuleCaller<'_>,
        tool: &RuleTool<'_>,
        sets: &Sets,
        kept_verdicts: &Arc<AtomicUsize>,
    ) -> Option<Arc<Parties>> {
        let key = self.key(caller);
        let mut kept = self
            .by_caller
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(parties) = kept.get(&key) {
            return Some(parties.clone());
        }
        let parties = Arc::new(Parties::of(types, caller, tool, sets, kept_verdicts)?);
        if kept.len() >= KEPT {
            kept.clear();
        }
        kept.insert(key, parties.clone());
        Some(parties)
    }

    fn key(&self, caller: &RuleCaller<'_>) -> u64 {
        let mut h = self.hasher.build_hasher();
        caller.principal.hash(&mut h);
        caller.facts.groups.hash(&mut h);
        for (name, value) in &caller.facts.claims {
            name.hash(&mut h);
            hash_value(value, &mut h);
        }
        h.finish()
    }
}

fn hash_value(value: &Value, h: &mut impl Hasher) {
    match value {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => b.hash(h),
        Value::Number(n) => n.to_string().hash(h),
        Value::String(s) => s.hash(h),
        Value::Array(items) => {
            items.len().hash(h);
            items.iter().for_each(|i| hash_value(i, h));
        }
        Value::Object(map) => {
            map.len().hash(h);
            for (k, v) in map {
                k.hash(h);
                hash_value(v, h);
            }
        }
    }
}

thread_local! {
    /// The last second's `datetime`: Cedar parses the extension's name each time it makes
    /// one (some 10 µs); calls in the same second share it.
    static SECOND: std::cell::RefCell<Option<(i64, RestrictedExpression)>> =
        const { std::cell::RefCell::new(None) };
}

/// The instant `unix` (seconds) as a Cedar `datetime`, in UTC.
fn datetime(unix: i64) -> RestrictedExpression {
    SECOND.with_borrow_mut(|kept| match kept {
        Some((second, made)) if *second == unix => made.clone(),
        _ => {
            let utc = chrono::DateTime::from_timestamp(unix, 0).unwrap_or_default();
            let made =
                RestrictedExpression::new_datetime(utc.format("%Y-%m-%dT%H:%M:%SZ").to_string());
            *kept = Some((unix, made.clone()));
            made
        }
    })
}

/// How and when one call came: what `context.request` is made of, and the text of it a
/// kept verdict is found by (made first: the record itself is made only for a call whose
/// verdict is not kept).
pub(crate) struct Now {
    era: &'static str,
    transport: &'static str,
    unix: i64,
    pub(crate) key: String,
}

impl Now {
    /// The call's era and transport (`embedded` when the host did not say), and the second.
    pub(crate) fn of(call: &RuleCall<'_>) -> Now {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
        let (era, transport) = call
            .request
            .map_or(("", "embedded"), |r| (r.era, r.transport));
        Now {
            era,
            transport,
            unix,
            key: format!("{era}\u{1}{transport}\u{1}{unix}"),
        }
    }

    /// `context.request`: `era`, `transport`, `time` (a `datetime`), `unix` (seconds), and
    /// on the clock `utc_offset_minutes` from UTC, `date` (`YYYY-MM-DD`), `hour`, `minute`,
    /// `weekday` (1 is Monday).
    pub(crate) fn value(&self, utc_offset_minutes: i32) -> RestrictedExpression {
        use chrono::{Datelike, Timelike};
        let unix = self.unix;
        let local = chrono::DateTime::from_timestamp(unix + i64::from(utc_offset_minutes) * 60, 0)
            .unwrap_or_default();
        let fields = [
            ("time", datetime(unix)),
            ("era", RestrictedExpression::new_string(self.era.into())),
            (
                "transport",
                RestrictedExpression::new_string(self.transport.into()),
            ),
            ("unix", RestrictedExpression::new_long(unix)),
            (
                "date",
                RestrictedExpression::new_string(local.format("%Y-%m-%d").to_string()),
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
}
