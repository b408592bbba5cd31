//! Stateless confirmations (MCP 2026-07-28): the sealed `requestState` a client carries
//! between a `tools/call` that got `input_required` and its retry, and the key ring that
//! seals it.
//!
//! A pending confirmation lives in the client's hands, not in this process: its state is
//! an HMAC-SHA256-sealed token ([`RequestStateCodec`], format `rs2` with a key id) whose
//! associated data binds it to the principal, the tool and a digest of the arguments, and
//! which expires after the confirmation timeout. Any instance holding the same key ring can
//! open it, so a retry may land on another instance behind a load balancer. Each token has
//! a nonce, taken once in the shared state store (`[store]`) until the token expires: a
//! replay is refused by every instance sharing the store, also when it is sent to several
//! at once, and a retry whose nonce cannot be checked (the store is down) is refused
//! saying so, never run.
//!
//! A store that lost its data (a Redis restarted without persistence, flushed) forgot
//! the nonces it took. So each token also records the store's generation
//! ([`Generations`](dispatcher_core::store::Generations)) it was sealed under, and a retry is refused when the store's
//! generation is another now: a replay after the loss runs nothing, and the user is asked
//! anew.
//!
//! ## The key ring
//!
//! `[mcp] request_state_keys = "FILE"` (relative to the config file) or the environment
//! variable `TOOLHOST_REQUEST_STATE_KEYS` (which wins) holds one key per line:
//!
//! ```text
//! # KEY-ID  SECRET (base64 of at least 32 random bytes)
//! k2 0sD1c5WZ3k2m9Xl0pQ2yF8sT4vB6nJ7rA1eH3gK5uM0=
//! k1 8aQf2Jx6Vt0wL4cN9bR3zY7pE1sU5mH2kD6gT0iO4lA=
//! ```
//!
//! The first key seals; every key opens. Rotation: add the new key on a second line
//! everywhere, then move it first everywhere, then drop the old line once the
//! confirmation timeout has passed. With no key ring, each process makes a random key of
//! its own at start-up: fine for one instance, not for several.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use dispatcher_core::store::{Store, StoreError};
use rmcp::model::{RequestStateCodec, RequestStateError, SealOptions};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The environment variable that holds a key ring (wins over the config file's).
pub const KEYS_ENV: &str = "TOOLHOST_REQUEST_STATE_KEYS";

/// A key ring that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KeyRingError {
    /// The file could not be read.
    #[error("cannot read the request-state key ring {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// A line is not `KEY-ID SECRET`, or a secret is not base64 of 32 bytes or more.
    #[error("request-state key ring {source_name}, line {line}: {problem}")]
    Line {
        /// The file or the environment variable.
        source_name: String,
        /// 1-based.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// No key at all.
    #[error("request-state key ring {0} holds no key; add a line `KEY-ID SECRET`")]
    Empty(String),
}

/// Reads the key ring: from `TOOLHOST_REQUEST_STATE_KEYS` if set, else from `file` if
/// given, else a random key for this process only (`None` returned as the second value
/// then: nothing to report).
pub fn load_codec(
    file: Option<&Path>,
) -> Result<(RequestStateCodec, Option<String>), KeyRingError> {
    let (text, source_name) = if let Ok(text) = std::env::var(KEYS_ENV) {
        (text, KEYS_ENV.to_string())
    } else if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|error| KeyRingError::Read {
            path: path.display().to_string(),
            error,
        })?;
        (text, path.display().to_string())
    } else {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| KeyRingError::Read {
            path: "the system's random source".into(),
            error: std::io::Error::other(e.to_string()),
        })?;
        let codec = RequestStateCodec::new_with_keyring("local", [("local", key.to_vec())])
            .map_err(|e| KeyRingError::Empty(e.to_string()))?;
        return Ok((codec, None));
    };
    parse_ring(&text, &source_name).map(|c| (c, Some(source_name)))
}

/// Parses `KEY-ID SECRET` lines (also `;`-separated, for an environment variable).
pub fn parse_ring(text: &str, source_name: &str) -> Result<RequestStateCodec, KeyRingError> {
    let mut keys: Vec<(String, Vec<u8>)> = Vec::new();
    let bad = |line: usize, problem: String| KeyRingError::Line {
        source_name: source_name.to_string(),
        line,
        problem,
    };
    for (i, raw) in text.split(['\n', ';']).enumerate() {
        let entry = raw.trim();
        if entry.is_empty() || entry.starts_with('#') {
            continue;
        }
        let mut parts = entry.split_whitespace();
        let (Some(kid), Some(secret), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad(i + 1, "expected `KEY-ID SECRET`".into()));
        };
        let secret = base64::engine::general_purpose::STANDARD
            .decode(secret)
            .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(secret))
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(secret))
            .map_err(|_| bad(i + 1, format!("the secret of key '{kid}' is not base64")))?;
        if secret.len() < RequestStateCodec::MIN_KEY_LENGTH {
            return Err(bad(
                i + 1,
                format!(
                    "the secret of key '{kid}' is {} bytes; use at least {} random bytes \
                     (e.g. `head -c 32 /dev/urandom | base64`)",
                    secret.len(),
                    RequestStateCodec::MIN_KEY_LENGTH
                ),
            ));
        }
        if keys.iter().any(|(k, _)| k == kid) {
            return Err(bad(i + 1, format!("key id '{kid}' appears twice")));
        }
        keys.push((kid.to_string(), secret));
    }
    let Some(active) = keys.first().map(|(k, _)| k.clone()) else {
        return Err(KeyRingError::Empty(source_name.to_string()));
    };
    RequestStateCodec::new_with_keyring(active, keys)
        .map_err(|e| bad(0, format!("not a usable key ring: {e}")))
}

/// What a sealed confirmation carries (readable by the client: nothing secret).
#[derive(Debug, Serialize, Deserialize)]
struct Sealed {
    /// The tool it confirms (also bound through the associated data).
    tool: String,
    /// A random value: one retry per token on an instance.
    nonce: String,
    /// The store's generation when it was sealed.
    generation: String,
    /// Present when the round relayed a mounted server's own `input_required`: the
    /// server's `requestState` of that round (opaque to toolhost, sealed by the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    relay: Option<RelayRound>,
}

/// A relayed round of a mounted server.
#[derive(Debug, Serialize, Deserialize)]
struct RelayRound {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state: Option<String>,
}

/// What an opened `requestState` was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// toolhost's own confirmation question.
    Confirmation,
    /// A mounted server's `input_required` round, relayed; its `requestState`.
    Relay {
        /// The server's `requestState` of that round.
        state: Option<String>,
    },
}

/// Why a `requestState` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateRefused {
    /// Not a token this server made, or made for another principal, tool or arguments.
    #[error(
        "requestState refused: it failed verification (altered, sealed by a key this server does not hold, \
         or made for another caller, tool or arguments). Call the tool again without requestState to be asked anew."
    )]
    Invalid,
    /// Older than the confirmation timeout.
    #[error(
        "requestState refused: the confirmation expired (it is valid for {0} s). Call the tool again without requestState to be asked anew."
    )]
    Expired(u64),
    /// A call already ran with it (on any instance sharing the store).
    #[error(
        "requestState refused: this confirmation was already used. Call the tool again without requestState to be asked anew."
    )]
    Replayed,
    /// Whether it was used cannot be checked: the shared state store is unreachable.
    #[error(
        "requestState refused: whether this confirmation was already used cannot be checked ({0}). Nothing ran; retry once the store is back."
    )]
    Unchecked(String),
    /// The store lost its data since the token was sealed: whether it was used is not known.
    #[error(
        "requestState refused: the shared state store ({0}) lost its data since this confirmation was asked \
         (its generation changed), so whether it was already used cannot be known. Nothing ran; call the tool \
         again without requestState to be asked anew."
    )]
    StoreForgot(String),
}

/// Seals and opens stateless confirmations.
pub struct Confirmations {
    codec: RequestStateCodec,
    ttl: Duration,
    /// Where the nonces accepted are kept, until their tokens expire: every instance
    /// sharing the store refuses a nonce any of them accepted.
    store: Arc<dyn Store>,
}

impl Confirmations {
    /// Confirmations sealed with `codec`, valid for `ttl` (the confirmation timeout), their
    /// nonces remembered in `store`.
    pub fn new(codec: RequestStateCodec, ttl: Duration, store: Arc<dyn Store>) -> Self {
        Confirmations { codec, ttl, store }
    }

    /// A token for `principal` calling `tool` with `arguments`, or why the store could
    /// not give its generation (one round trip to a shared store).
    pub async fn seal(
        &self,
        principal: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<String, StoreError> {
        self.seal_round(principal, tool, arguments, None).await
    }

    /// A token for `principal` calling `tool` with `arguments` whose round relayed a
    /// mounted server's `input_required`, carrying the server's `state`.
    pub async fn seal_relay(
        &self,
        principal: &str,
        tool: &str,
        arguments: &Value,
        state: Option<String>,
    ) -> Result<String, StoreError> {
        self.seal_round(principal, tool, arguments, Some(RelayRound { state }))
            .await
    }

    async fn seal_round(
        &self,
        principal: &str,
        tool: &str,
        arguments: &Value,
        relay: Option<RelayRound>,
    ) -> Result<String, StoreError> {
        let sealed = Sealed {
            tool: tool.to_string(),
            nonce: dispatcher_core::store::random_id(),
            generation: self.store.generation().await?,
            relay,
        };
        let ad = associated_data(principal, tool, arguments);
        let options = SealOptions::new().associated_data(&ad).ttl(self.ttl);
        // A plain struct always serializes.
        Ok(self
            .codec
            .seal_json_with(&sealed, &options)
            .unwrap_or_default())
    }

    /// Opens a token for `principal` calling `tool` with `arguments`, once.
    pub async fn open(
        &self,
        token: &str,
        principal: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<Opened, StateRefused> {
        let ad = associated_data(principal, tool, arguments);
        let sealed: Sealed = self.codec.open_json_with(token, &ad).map_err(|e| match e {
            RequestStateError::Expired => StateRefused::Expired(self.ttl.as_secs()),
            _ => StateRefused::Invalid,
        })?;
        if sealed.tool != tool {
            return Err(StateRefused::Invalid);
        }
        // Both at once (one round trip on a pipelined connection): taken once, across
        // every instance sharing the store, and in the life of its data the token was
        // sealed in.
        let nonce = format!("state:{}", sealed.nonce);
        let (claimed, generation) =
            tokio::join!(self.store.claim(&nonce, self.ttl), self.store.generation());
        match generation {
            Ok(now) if now == sealed.generation => {}
            Ok(_) => return Err(StateRefused::StoreForgot(self.store.describe())),
            Err(e) => return Err(StateRefused::Unchecked(e.to_string())),
        }
        match claimed {
            Ok(true) => {}
            Ok(false) => return Err(StateRefused::Replayed),
            Err(e) => return Err(StateRefused::Unchecked(e.to_string())),
        }
        Ok(match sealed.relay {
            None => Opened::Confirmation,
            Some(round) => Opened::Relay { state: round.state },
        })
    }
}

/// What binds a token: principal, tool and the SHA-256 of the arguments' canonical JSON
/// (keys sorted), so a key order change is not a different call.
fn associated_data(principal: &str, tool: &str, arguments: &Value) -> Vec<u8> {
    let canonical = dispatcher_core::audit::canonical_json(arguments);
    let digest = Sha256::digest(&canonical);
    let mut ad = Vec::new();
    for part in [principal.as_bytes(), b"\0", tool.as_bytes(), b"\0"] {
        ad.extend_from_slice(part);
    }
    ad.extend_from_slice(&digest);
    ad
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RING: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n";

    fn confirmations(ttl: Duration) -> Confirmations {
        Confirmations::new(
            parse_ring(RING, "test").unwrap(),
            ttl,
            dispatcher_core::store::MemoryStore::new(),
        )
    }

    #[tokio::test]
    async fn a_relayed_round_carries_the_servers_own_state_back() {
        let c = confirmations(Duration::from_secs(60));
        let args = json!({"q": 1});
        let token = c
            .seal_relay("alice", "fx__ask", &args, Some("server-state".into()))
            .await
            .unwrap();
        assert_eq!(
            c.open(&token, "alice", "fx__ask", &args).await,
            Ok(Opened::Relay {
                state: Some("server-state".into())
            })
        );
        let token = c
            .seal_relay("alice", "fx__ask", &args, Some("server-state".into()))
            .await
            .unwrap();
        assert_eq!(
            c.open(&token, "bob", "fx__ask", &args).await,
            Err(StateRefused::Invalid)
        );
    }

    #[tokio::test]
    async fn a_token_opens_once_for_the_same_principal_tool_and_arguments() {
        let c = confirmations(Duration::from_secs(60));
        let args = json!({"path": "a.txt", "content": "x"});
        let token = c.seal("alice", "write_file", &args).await.unwrap();
        let reordered = json!({"content": "x", "path": "a.txt"});
        assert_eq!(
            c.open(&token, "alice", "write_file", &reordered).await,
            Ok(Opened::Confirmation)
        );
        assert_eq!(
            c.open(&token, "alice", "write_file", &args).await,
            Err(StateRefused::Replayed)
        );
    }

    #[tokio::test]
    async fn other_arguments_principal_tool_or_a_tampered_token_are_refused() {
        let c = confirmations(Duration::from_secs(60));
        let args = json!({"path": "a.txt"});
        let token = c.seal("alice", "write_file", &args).await.unwrap();
        let other = json!({"path": "b.txt"});
        assert_eq!(
            c.open(&token, "alice", "write_file", &other).await,
            Err(StateRefused::Invalid)
        );
        assert_eq!(
            c.open(&token, "bob", "write_file", &args).await,
            Err(StateRefused::Invalid)
        );
        assert_eq!(
            c.open(&token, "alice", "shell", &args).await,
            Err(StateRefused::Invalid)
        );
        let mut tampered = token.clone().into_bytes();
        let last = tampered.len() - 2;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        assert_eq!(
            c.open(&tampered, "alice", "write_file", &args).await,
            Err(StateRefused::Invalid)
        );
        assert_eq!(
            c.open(&token, "alice", "write_file", &args).await,
            Ok(Opened::Confirmation)
        );
    }

    #[tokio::test]
    async fn an_expired_token_is_refused_as_expired() {
        let c = confirmations(Duration::from_millis(1));
        let args = json!({});
        let token = c.seal("alice", "shell", &args).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(matches!(
            c.open(&token, "alice", "shell", &args).await,
            Err(StateRefused::Expired(_))
        ));
    }

    #[tokio::test]
    async fn a_token_sealed_before_the_store_lost_its_data_is_refused_saying_so() {
        let store = dispatcher_core::store::MemoryStore::new();
        let c = Confirmations::new(
            parse_ring(RING, "test").unwrap(),
            Duration::from_secs(60),
            store.clone(),
        );
        let args = json!({"command": "echo ran"});
        let token = c.seal("alice", "shell", &args).await.unwrap();
        let kept = c.seal("alice", "shell", &args).await.unwrap();
        assert_eq!(
            c.open(&kept, "alice", "shell", &args).await,
            Ok(Opened::Confirmation)
        );
        store.wipe();
        let refused = c.open(&token, "alice", "shell", &args).await;
        assert_eq!(refused, Err(StateRefused::StoreForgot("memory".into())));
        let said = refused.unwrap_err().to_string();
        assert!(
            said.contains("lost its data") && said.contains("asked anew"),
            "{said}"
        );
        // The replay of one used before the loss is refused too, not run.
        assert_eq!(
            c.open(&kept, "alice", "shell", &args).await,
            Err(StateRefused::StoreForgot("memory".into()))
        );
        let fresh = c.seal("alice", "shell", &args).await.unwrap();
        assert_eq!(
            c.open(&fresh, "alice", "shell", &args).await,
            Ok(Opened::Confirmation)
        );
    }

    #[tokio::test]
    async fn a_rotated_ring_opens_tokens_of_the_old_key() {
        let store = dispatcher_core::store::MemoryStore::new();
        let old = Confirmations::new(
            parse_ring(RING, "old").unwrap(),
            Duration::from_secs(60),
            store.clone(),
        );
        let token = old.seal("p", "t", &json!({})).await.unwrap();
        let rotated = format!(
            "k2 {}\n{RING}",
            "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="
        );
        let new = Confirmations::new(
            parse_ring(&rotated, "new").unwrap(),
            Duration::from_secs(60),
            store,
        );
        assert_eq!(
            new.open(&token, "p", "t", &json!({})).await,
            Ok(Opened::Confirmation)
        );
        let from_new = new.seal("p", "t", &json!({})).await.unwrap();
        assert_eq!(
            old.open(&from_new, "p", "t", &json!({})).await,
            Err(StateRefused::Invalid)
        );
    }

    #[test]
    fn a_bad_ring_names_the_line_and_the_problem() {
        let e = parse_ring("# comment\nk1 c2hvcnQ=\n", "keys.txt")
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("keys.txt, line 2") && e.contains("at least 32"),
            "{e}"
        );
        let e = parse_ring("k1\n", "keys.txt").err().unwrap().to_string();
        assert!(e.contains("line 1") && e.contains("KEY-ID SECRET"), "{e}");
        let e = parse_ring(&format!("{RING}{RING}"), "keys.txt")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("twice"), "{e}");
        assert!(parse_ring("# nothing\n", "keys.txt").is_err());
    }
}

#[cfg(test)]
mod shared {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_state_that_cannot_be_checked_is_refused_saying_why() {
        const RING: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n";
        let sealer = Confirmations::new(
            parse_ring(RING, "test").unwrap(),
            Duration::from_secs(60),
            dispatcher_core::store::MemoryStore::new(),
        );
        let store = Arc::new(dispatcher_core::store::Unreachable::new(
            "redis://cache:6379/0",
        ));
        let c = Confirmations::new(
            parse_ring(RING, "test").unwrap(),
            Duration::from_secs(60),
            store.clone(),
        );
        assert!(
            c.seal("alice", "write_file", &json!({}))
                .await
                .unwrap_err()
                .to_string()
                .contains("redis://cache:6379/0")
        );
        let token = sealer
            .seal("alice", "write_file", &json!({}))
            .await
            .unwrap();
        let refused = c
            .open(&token, "alice", "write_file", &json!({}))
            .await
            .unwrap_err();
        let said = refused.to_string();
        assert!(matches!(refused, StateRefused::Unchecked(_)), "{said}");
        assert!(
            said.contains("cannot be checked")
                && said.contains("redis://cache:6379/0")
                && said.contains("Nothing ran"),
            "{said}"
        );
    }
}
