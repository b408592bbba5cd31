//! What the instances sharing a store tell each other ([`crate::store`]): the
//! confirmations pending on each, so that a client of any instance (a web console) sees
//! them and answers them, the first answer winning everywhere; and the event stream, so
//! that a console on one instance follows them all.
//!
//! | in the store | what it is |
//! |---|---|
//! | record `pending:ID`, claim `answered:ID`, record `answer:ID` | the request waiting (once it has waited 200 ms), the first answer's claim, that answer |
//! | channel `answers` | an answer given elsewhere, for the instance the request waits on |
//! | channel `events` | every instance's events, while a console watches anywhere |
//! | record `watching:ID` | a console following the events (renewed while it does) |
//! | channel `watching` | a console that starts following them (the others share their events from then on) |
//!
//! Over a store of one process only (the default, [`crate::store::MemoryStore`]) none of this
//! runs: the broker is the whole truth.

use std::sync::{Arc, Weak};

use serde_json::{Value, json};

use crate::confirmation::{Decision, ResolveError};
use crate::engine::Engine;
use crate::first_answer::{ANSWER, PENDING, claim};
use crate::store::{Store, StoreError};

const ANSWERS: &str = "answers";

/// The records of the consoles watching, on any instance (`watching:ID`, each renewed
/// while its console follows the events): while there is one, events are shared.
pub const WATCHING: &str = "watching:";

/// Where a console that starts watching says so at once (its record follows).
pub const WATCH_CHANNEL: &str = "watching";

/// How often an instance looks whether a console watches anywhere.
const WATCH_CHECK: std::time::Duration = std::time::Duration::from_secs(2);
const EVENTS: &str = "events";

/// Starts what an instance over a shared store runs: answers given elsewhere reach the
/// requests waiting here, and this instance's events reach the others. Needs a tokio
/// runtime; without one (a dispatcher built outside any), nothing is shared but what the
/// store's callers share themselves.
pub(crate) fn start(engine: &Arc<Engine>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            "the dispatcher was built outside a tokio runtime: confirmations and events are not shared with other instances"
        );
        return;
    };
    let weak = Arc::downgrade(engine);
    let mut answers = engine.store.subscribe(ANSWERS);
    // Subscribed now, so that a console that comes later misses nothing from the others.
    drop(engine.store.subscribe(EVENTS));
    runtime.spawn(async move {
        while let Some(message) = next(&mut answers).await {
            let Some(engine) = weak.upgrade() else { return };
            let Ok(answer) = serde_json::from_str::<Value>(&message) else {
                continue;
            };
            let (Some(id), Some(decision), Some(client)) = (
                answer["request_id"].as_str(),
                decision_of(&answer["decision"]),
                answer["client"].as_str(),
            ) else {
                continue;
            };
            // The answer claimed the request before it was sent: here it only settles it.
            let _ = engine.broker.settle(id, decision.into(), client);
        }
    });
    // Events go out only while a console watches somewhere: a call costs the store nothing
    // for them otherwise.
    let watched = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (mut told, watched) = (engine.store.subscribe(WATCH_CHANNEL), watched.clone());
        runtime.spawn(async move {
            while next(&mut told).await.is_some() {
                watched.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
    }
    {
        let (weak, watched) = (Arc::downgrade(engine), watched.clone());
        runtime.spawn(async move {
            loop {
                let Some(engine) = weak.upgrade() else { return };
                let now = engine
                    .store
                    .scan(WATCHING)
                    .await
                    .is_ok_and(|w| !w.is_empty());
                drop(engine);
                watched.store(now, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(WATCH_CHECK).await;
            }
        });
    }
    let weak: Weak<Engine> = Arc::downgrade(engine);
    let mut events = engine.events.subscribe();
    let instance = engine.instance.clone();
    runtime.spawn(async move {
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        "{n} events were not shared with the other instances: the store fell behind"
                    );
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            if !watched.load(std::sync::atomic::Ordering::Relaxed) {
                continue;
            }
            let Some(engine) = weak.upgrade() else { return };
            let message = json!({"instance": &*instance, "event": event.to_json()}).to_string();
            if let Err(e) = engine.store.publish(EVENTS, &message).await {
                tracing::debug!("an event was not shared: {e}");
            }
        }
    });
}

async fn next(rx: &mut tokio::sync::broadcast::Receiver<Arc<str>>) -> Option<Arc<str>> {
    loop {
        match rx.recv().await {
            Ok(message) => return Some(message),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(
                    "{n} answers from other instances were missed: this instance fell behind"
                );
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
        }
    }
}

fn decision_of(value: &Value) -> Option<Decision> {
    serde_json::from_value(value.clone()).ok()
}

/// Why a later answer to `id` lost: the first one.
pub(crate) async fn already(store: &Arc<dyn Store>, id: &str) -> ResolveError {
    let first = store
        .get(&format!("{ANSWER}{id}"))
        .await
        .ok()
        .flatten()
        .and_then(|r| serde_json::from_str::<Value>(&r).ok())
        .unwrap_or_default();
    ResolveError::AlreadyResolved {
        request_id: id.to_string(),
        decision: decision_of(&first["decision"])
            .map_or_else(|| "answered".to_string(), |d| d.as_str().to_string()),
        by: first["client"]
            .as_str()
            .unwrap_or("another instance")
            .to_string(),
    }
}

/// The requests pending on every instance (JSON, each with its `instance`), optionally
/// only one session's, oldest first.
pub(crate) async fn pending(
    store: &Arc<dyn Store>,
    session: Option<&str>,
) -> Result<Vec<Value>, StoreError> {
    let mut out: Vec<Value> = store
        .scan(PENDING)
        .await?
        .into_iter()
        .filter_map(|(_, record)| serde_json::from_str::<Value>(&record).ok())
        .filter_map(|record| {
            let mut request = record.get("request")?.clone();
            request["instance"] = record["instance"].clone();
            Some(request)
        })
        .filter(|r| session.is_none_or(|s| r["session_id"] == s))
        .collect();
    out.sort_by(|a, b| a["request_id"].as_str().cmp(&b["request_id"].as_str()));
    Ok(out)
}

/// Answers a request waiting on another instance: taken first here, then sent to it.
pub(crate) async fn answer_elsewhere(
    store: &Arc<dyn Store>,
    id: &str,
    decision: Decision,
    client: &str,
) -> Result<(), ResolveError> {
    let unreachable = |e: StoreError| ResolveError::Unreachable {
        request_id: id.to_string(),
        why: e.to_string(),
    };
    let waiting = store
        .get(&format!("{PENDING}{id}"))
        .await
        .map_err(unreachable)?;
    if waiting.is_none() {
        let answered = store
            .get(&format!("{ANSWER}{id}"))
            .await
            .map_err(unreachable)?;
        return Err(match answered {
            Some(_) => already(store, id).await,
            None => ResolveError::Unknown {
                request_id: id.to_string(),
            },
        });
    }
    if !claim(store, id, decision.as_str(), client)
        .await
        .map_err(unreachable)?
    {
        return Err(already(store, id).await);
    }
    let message = json!({"request_id": id, "decision": decision, "client": client}).to_string();
    store.publish(ANSWERS, &message).await.map_err(unreachable)
}

/// The events of every instance sharing the store: this one's as they happen, the others'
/// as they arrive ([`crate::Dispatcher::subscribe_everywhere`]).
pub struct EventsEverywhere {
    local: tokio::sync::broadcast::Receiver<Arc<crate::events::ToolEvent>>,
    others: Option<tokio::sync::broadcast::Receiver<Arc<str>>>,
    instance: Arc<str>,
}

/// One event of [`EventsEverywhere`].
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// An event (its JSON, as [`crate::ToolEvent::to_json`] renders it), and the instance
    /// it happened on.
    Event {
        /// Its JSON; `type` is its name.
        event: Value,
        /// The instance.
        instance: Arc<str>,
    },
    /// This many events were missed: the reader fell behind.
    Missed(u64),
}

impl EventsEverywhere {
    pub(crate) fn new(engine: &Engine) -> EventsEverywhere {
        EventsEverywhere {
            local: engine.events.subscribe(),
            others: engine.broker.shared().map(|store| store.subscribe(EVENTS)),
            instance: engine.instance.clone(),
        }
    }

    /// The next event; `None` when the dispatcher is gone.
    pub async fn next(&mut self) -> Option<Seen> {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            let from_others = async {
                match self.others.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                local = self.local.recv() => return match local {
                    Ok(event) => Some(Seen::Event { event: event.to_json(), instance: self.instance.clone() }),
                    Err(RecvError::Lagged(n)) => Some(Seen::Missed(n)),
                    Err(RecvError::Closed) => None,
                },
                other = from_others => match other {
                    Ok(message) => {
                        let Ok(mut message) = serde_json::from_str::<Value>(&message) else { continue };
                        let instance = message["instance"].as_str().unwrap_or_default();
                        // This instance's own come straight from here.
                        if instance == &*self.instance {
                            continue;
                        }
                        let instance: Arc<str> = instance.into();
                        return Some(Seen::Event { event: message["event"].take(), instance });
                    }
                    Err(RecvError::Lagged(n)) => return Some(Seen::Missed(n)),
                    Err(RecvError::Closed) => self.others = None,
                },
            }
        }
    }
}
