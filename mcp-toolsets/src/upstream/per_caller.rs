//! A server whose entry takes its caller's credentials (`credentials = "caller"` or
//! `"exchange"`): each caller's calls go through a connection of its own that presents
//! that caller's token (passed on only when it is for the server; else one exchanged for
//! it), opened at the caller's first call and again when its token changes. A server
//! started over stdio gets a process of its own per caller, the token in its `token_env`.
//!
//! They are bounded ([`PerCaller`]): at most `max_callers` open at once, the one idle the
//! longest closed first to make room, and each closed after `caller_idle_timeout_secs`
//! with no call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use tool_api::ToolError;

use super::Upstream;
use crate::config::{CallerToken, Credentials};
use crate::relay::Origin;

/// One caller's own connection, and how it is used.
struct Own {
    token: CallerToken,
    connection: Arc<Upstream>,
    use_: Arc<Use>,
}

/// How one caller's connection is used: its calls in flight, and when the last one ended.
#[derive(Default)]
struct Use {
    state: Mutex<UseState>,
}

#[derive(Default)]
struct UseState {
    in_flight: usize,
    /// When it last had no call in flight (`None`: not since it opened).
    idle_since: Option<Instant>,
}

impl Use {
    fn lock(&self) -> std::sync::MutexGuard<'_, UseState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long it has had no call in flight; `None` while one is.
    fn idle_for(&self, now: Instant) -> Option<Duration> {
        let state = self.lock();
        (state.in_flight == 0).then(|| {
            state
                .idle_since
                .map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
        })
    }
}

/// A call's hold on its caller's connection: while one is held, the connection is busy
/// and never closed for being idle or to make room.
pub(crate) struct Lease(Arc<Use>);

impl Lease {
    fn take(use_: &Arc<Use>) -> Lease {
        use_.lock().in_flight += 1;
        Lease(use_.clone())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.in_flight -= 1;
        if state.in_flight == 0 {
            state.idle_since = Some(Instant::now());
        }
    }
}

/// The connection a call goes through, and its lease on it (a caller's own connection).
pub(crate) struct Routed {
    pub(crate) connection: Arc<Upstream>,
    pub(crate) _lease: Option<Lease>,
}

/// The callers' connections of one server: those open, by principal, and how many are
/// being opened (each holds a place under `max_callers` from before it starts).
#[derive(Default)]
struct Slots {
    own: HashMap<String, Own>,
    opening: usize,
}

/// The callers' own connections of one server.
#[derive(Default)]
pub(crate) struct PerCaller {
    slots: Mutex<Slots>,
    /// Closes connections idle too long; started with the first one.
    sweeper: Mutex<Option<tokio::task::AbortHandle>>,
}

/// A place held for a connection being opened, given back when dropped (the opening
/// failed) unless the connection took it ([`Reserved::taken`]).
struct Reserved<'a> {
    per_caller: &'a PerCaller,
    held: bool,
}

impl Reserved<'_> {
    /// The connection is in the map now (under the lock `slots`): the place is its own.
    fn taken(mut self, slots: &mut Slots) {
        if std::mem::take(&mut self.held) {
            slots.opening -= 1;
        }
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if self.held {
            self.per_caller.lock().opening -= 1;
        }
    }
}

impl PerCaller {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `principal`'s connection if it presents `token`, leased for a call.
    fn leased(&self, principal: &str, token: &CallerToken) -> Option<Routed> {
        let slots = self.lock();
        let kept = slots.own.get(principal).filter(|o| o.token == *token)?;
        Some(Routed {
            connection: kept.connection.clone(),
            _lease: Some(Lease::take(&kept.use_)),
        })
    }

    /// How many are open.
    pub(crate) fn len(&self) -> usize {
        self.lock().own.len()
    }

    /// Closes those idle for `idle` or longer.
    fn sweep(&self, id: &str, idle: Duration) {
        let now = Instant::now();
        let closed: Vec<(String, Own)> = {
            let mut slots = self.lock();
            let own = &mut slots.own;
            let expired: Vec<String> = own
                .iter()
                .filter(|(_, o)| o.use_.idle_for(now).is_some_and(|d| d >= idle))
                .map(|(p, _)| p.clone())
                .collect();
            expired
                .into_iter()
                .filter_map(|p| own.remove_entry(&p))
                .collect()
        };
        for (principal, o) in closed {
            tracing::info!(server = %id, %principal, "closed the caller's own connection: no call for {} s (caller_idle_timeout_secs)", idle.as_secs());
            o.connection.stop();
        }
    }

    /// Stops every one (the server is stopping).
    pub(crate) fn stop(&self) {
        if let Some(sweeper) = self
            .sweeper
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            sweeper.abort();
        }
        let own: Vec<Own> = self.lock().own.drain().map(|(_, o)| o).collect();
        for o in own {
            o.connection.stop();
        }
    }
}

impl Upstream {
    /// The connection a call from `origin` goes through: this one, or (for an entry that
    /// takes its caller's credentials) that caller's own, leased for the call.
    pub(crate) async fn for_caller(
        self: &Arc<Self>,
        origin: Option<&Origin>,
    ) -> Result<Routed, ToolError> {
        let mode = self.config.credentials;
        if matches!(mode, Credentials::Static | Credentials::Login)
            || self.config.caller_token.is_some()
        {
            return Ok(Routed {
                connection: self.clone(),
                _lease: None,
            });
        }
        let id = &self.config.id;
        let caller = origin.and_then(|o| o.caller.as_ref()).ok_or_else(|| {
            ToolError::failed(format!(
                "MCP server '{id}' acts with its caller's own credentials (credentials = \"{}\"), and this call has none: \
                 call it through `toolhost serve --http` as a caller who logged in at the identity provider ([http.auth])",
                mode.name()
            ))
        })?;
        let audience = self.config.audience();
        let token = match mode {
            Credentials::Caller if caller.audiences.iter().any(|a| a == audience) => {
                caller.token.clone()
            }
            Credentials::Caller => {
                return Err(ToolError::failed(format!(
                    "MCP server '{id}' takes its caller's own token, and this caller's token is not for it \
                     (it is for {:?}, the server is {audience}): passing it on would hand it to a server it was not issued for; \
                     have the identity provider issue tokens for both, or set credentials = \"exchange\"",
                    caller.audiences
                )));
            }
            _ => {
                let exchange = origin.and_then(|o| o.exchange.as_ref()).ok_or_else(|| {
                    ToolError::failed(format!(
                        "MCP server '{id}' takes a token exchanged for its caller, and this toolhost exchanges none: \
                         add [http.auth.client] (this server's client at the identity provider)"
                    ))
                })?;
                Box::pin(exchange.exchange(&caller.token, audience)).await.map_err(|e| {
                    ToolError::failed(format!(
                        "MCP server '{id}': no token could be obtained for {audience} for this caller: {e}"
                    ))
                })?
            }
        };
        let token = CallerToken(token);
        let per_caller = &self.per_caller;
        if let Some(routed) = per_caller.leased(&caller.principal, &token) {
            return Ok(routed);
        }
        per_caller.sweep(id, self.config.caller_idle_timeout());
        let (reserved, closed) = self.make_room(&caller.principal)?;
        // The connection closed for this one is gone, its process too, before this one's
        // starts: never more processes than `max_callers`.
        if let Some(closed) = closed {
            closed.stop_and_reap().await;
        }
        // Started without holding the map: other callers' calls go on meanwhile.
        let mut config = self.config.clone();
        config.caller_token = Some(token.clone());
        let connection = Box::pin(Upstream::start(
            config,
            self.sandbox.clone(),
            self.pins.clone(),
        ))
        .await
        .map_err(|e| {
            ToolError::failed(format!(
                "MCP server '{id}' could not be reached with this caller's credentials: {e}"
            ))
        })?;
        let (replaced, lease) = {
            let mut slots = per_caller.lock();
            // The same caller's call that started one too, first: use that one.
            if let Some(first) = slots
                .own
                .get(&caller.principal)
                .filter(|o| o.token == token)
            {
                let routed = Routed {
                    connection: first.connection.clone(),
                    _lease: Some(Lease::take(&first.use_)),
                };
                drop(slots);
                drop(reserved);
                connection.stop();
                return Ok(routed);
            }
            reserved.taken(&mut slots);
            let use_ = Arc::new(Use::default());
            let lease = Lease::take(&use_);
            let own = &mut slots.own;
            let replaced = own.insert(
                caller.principal.clone(),
                Own {
                    token,
                    connection: connection.clone(),
                    use_,
                },
            );
            tracing::info!(server = %id, principal = %caller.principal, open = own.len(), "connected with the caller's credentials ({})", mode.name());
            (replaced, lease)
        };
        if let Some(old) = replaced {
            old.connection.stop();
        }
        self.sweep_while_open();
        Ok(Routed {
            connection,
            _lease: Some(lease),
        })
    }

    /// A place for one more caller's connection, held from before it starts (so that the
    /// connections open and opening never pass `max_callers`): none is needed for
    /// `principal`'s own with a new token (it replaces the old); when every place is taken,
    /// the connection idle the longest is closed for it; when each of them has a call in
    /// flight, the refusal naming the key.
    fn make_room(
        &self,
        principal: &str,
    ) -> Result<(Reserved<'_>, Option<Arc<Upstream>>), ToolError> {
        let max = self.config.max_callers;
        let now = Instant::now();
        let per_caller = &self.per_caller;
        let closed = {
            let mut slots = per_caller.lock();
            if slots.own.contains_key(principal) {
                let reserved = Reserved {
                    per_caller,
                    held: false,
                };
                return Ok((reserved, None));
            }
            let closed = if slots.own.len() + slots.opening < max {
                None
            } else {
                let oldest = slots
                    .own
                    .iter()
                    .filter_map(|(p, o)| o.use_.idle_for(now).map(|idle| (idle, p)))
                    .max_by_key(|(idle, _)| *idle)
                    .map(|(_, p)| p.clone());
                match oldest.and_then(|p| slots.own.remove_entry(&p)) {
                    Some(closed) => Some(closed),
                    None => return Err(self.full()),
                }
            };
            slots.opening += 1;
            closed
        };
        let closed = closed.map(|(closed_principal, o)| {
            tracing::info!(server = %self.config.id, principal = %closed_principal, "closed the caller's own connection idle the longest: {max} are open (max_callers)");
            o.connection
        });
        let reserved = Reserved {
            per_caller,
            held: true,
        };
        Ok((reserved, closed))
    }

    /// The refusal of a new caller when every connection open has a call in flight (or is
    /// being opened for another caller).
    fn full(&self) -> ToolError {
        let max = self.config.max_callers;
        ToolError::failed(format!(
            "MCP server '{}' has {max} callers' own connections open or opening, the most its entry allows, and each has a call in flight; \
             try again when one ends, or raise `max_callers` in its [[mcp_servers]] entry",
            self.config.id
        ))
    }

    /// Starts closing callers' connections idle past `caller_idle_timeout_secs`, once:
    /// looks a few times per timeout, for as long as the server is there.
    fn sweep_while_open(self: &Arc<Self>) {
        let mut sweeper = self
            .per_caller
            .sweeper
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if sweeper.is_some() {
            return;
        }
        let idle = self.config.caller_idle_timeout();
        let every = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(60));
        let me: Weak<Upstream> = Arc::downgrade(self);
        let task = self.runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(this) = me.upgrade() else { return };
                this.per_caller.sweep(&this.config.id, idle);
            }
        });
        *sweeper = Some(task.abort_handle());
    }
}
