//! The access rules a server's sessions are opened with, replaced by a reload and
//! applied again to the sessions already open.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use dispatcher_core::{Dispatcher, Session, SessionSpec};
use mcp_server::Principal;

use crate::config::access::{self, AccessRule};

/// The rules in force, and the sessions opened under them (with whom they act for).
pub(crate) struct Access {
    rules: RwLock<Arc<Vec<AccessRule>>>,
    opened: Mutex<Vec<(Session, Principal)>>,
}

impl Access {
    /// Rules in force from the start.
    pub(crate) fn new(rules: Vec<AccessRule>) -> Arc<Access> {
        Arc::new(Access {
            rules: RwLock::new(Arc::new(rules)),
            opened: Mutex::new(Vec::new()),
        })
    }

    /// `spec` for `caller`, as the rules in force say (see [`access::apply`]).
    pub(crate) fn apply(&self, caller: &Principal, spec: SessionSpec) -> SessionSpec {
        let rules = self
            .rules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        access::apply(&rules, caller, spec)
    }

    /// Remembers a session opened for `caller`, to apply new rules to it. Only who it
    /// is and its groups are kept, never its token.
    pub(crate) fn opened(&self, session: &Session, caller: &Principal) {
        let kept = Principal {
            token: None,
            ..caller.clone()
        };
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((session.clone(), kept));
    }

    /// Puts `rules` in force: the sessions still open see and may call what the new rules
    /// let their callers, from their next request on. How many sessions were changed.
    pub(crate) fn replace(&self, rules: Vec<AccessRule>, dispatcher: &Dispatcher) -> usize {
        *self.rules.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(rules);
        let open = dispatcher.session_ids();
        let mut opened = self.opened.lock().unwrap_or_else(PoisonError::into_inner);
        opened.retain(|(session, _)| open.iter().any(|id| id == session.id()));
        for (session, caller) in opened.iter() {
            let spec = self.apply(caller, SessionSpec::new(session.id(), "."));
            session.set_access(spec.visibility, spec.narrowing);
        }
        opened.len()
    }
}
