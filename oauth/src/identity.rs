//! Who a valid token says is calling, from its claims.

use serde_json::{Map, Value};

use crate::error::Rejected;

/// The caller a token admits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `iss`: the issuer that vouches for the caller.
    pub issuer: String,
    /// `sub`: the caller at that issuer.
    pub subject: String,
    /// The caller's groups or roles (the configured claim).
    pub groups: Vec<String>,
    /// The token's scopes (`scope`, or `scp`).
    pub scopes: Vec<String>,
    /// The client the token was issued to (`client_id`, or `azp`), when it says.
    pub client_id: Option<String>,
    /// When the token expires (seconds since the epoch).
    pub expires_at: Option<u64>,
    /// The resources the token is for (`aud`): this server's among them.
    pub audiences: Vec<String>,
    /// Every claim of the token (a JWT's payload, an introspection answer), as rules over
    /// calls read them.
    pub claims: serde_json::Map<String, serde_json::Value>,
    /// Until when this check of the token may be reused without checking it again: a
    /// JWT's expiry (at most `keys_max_age_secs` on), an introspection answer's
    /// `cache_secs`; `None`: check it at every use.
    pub reuse_until: Option<std::time::Instant>,
}

impl Identity {
    /// The caller as one string: `ISSUER#SUBJECT` (an issuer has no fragment, so the first
    /// `#` splits it).
    pub fn principal(&self) -> String {
        format!("{}#{}", self.issuer, self.subject)
    }
}

/// What a token's claims are checked against.
pub(crate) struct Expected<'a> {
    pub(crate) issuers: &'a [String],
    pub(crate) resource: &'a str,
    pub(crate) groups_claim: &'a str,
    pub(crate) required_scopes: &'a [String],
    pub(crate) leeway: u64,
    pub(crate) now: u64,
}

fn strings(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::String(s)) => s.split_whitespace().map(String::from).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// A claim reached by a dotted path (`realm_access.roles`).
fn claim<'c>(claims: &'c Map<String, Value>, path: &str) -> Option<&'c Value> {
    let mut parts = path.split('.');
    let mut value = claims.get(parts.next()?)?;
    for part in parts {
        value = value.get(part)?;
    }
    Some(value)
}

impl Expected<'_> {
    /// The identity in `claims`, or the first claim that does not hold. `exp` is required
    /// of a JWT (`require_exp`); introspection answers may leave it out.
    pub(crate) fn identity(
        &self,
        claims: &Map<String, Value>,
        require_exp: bool,
    ) -> Result<Identity, Rejected> {
        let invalid = |why: String| Err(Rejected::Invalid(why));
        let issuer = match claims.get("iss").and_then(Value::as_str) {
            Some(iss) if self.issuers.iter().any(|i| i == iss) => iss.to_string(),
            Some(iss) => return invalid(format!("its issuer {iss:?} is not trusted here")),
            None => return invalid("it names no issuer (iss)".into()),
        };
        let audiences = strings(claims.get("aud"));
        if !audiences.iter().any(|a| a == self.resource) {
            return invalid(format!(
                "it is for {} (aud), not for this server ({}); ask the issuer for a token with resource={}",
                if audiences.is_empty() {
                    "no audience".to_string()
                } else {
                    format!("{audiences:?}")
                },
                self.resource,
                self.resource
            ));
        }
        let time = |name: &str| -> Result<Option<u64>, Rejected> {
            match claims.get(name) {
                None => Ok(None),
                Some(v) => v
                    .as_f64()
                    .filter(|t| t.is_finite() && *t >= 0.0)
                    .map(|t| Some(t as u64))
                    .ok_or_else(|| Rejected::Invalid(format!("its {name} is not a time"))),
            }
        };
        let expires_at = time("exp")?;
        match expires_at {
            Some(exp) if exp.saturating_add(self.leeway) <= self.now => {
                return invalid(format!("it expired {} s ago (exp)", self.now - exp));
            }
            None if require_exp => return invalid("it has no expiry (exp)".into()),
            _ => {}
        }
        if let Some(nbf) = time("nbf")?
            && nbf > self.now.saturating_add(self.leeway)
        {
            return invalid(format!(
                "it is not valid for another {} s (nbf)",
                nbf - self.now
            ));
        }
        let subject = match claims.get("sub").and_then(Value::as_str) {
            Some(sub) if !sub.is_empty() => sub.to_string(),
            _ => return invalid("it names no subject (sub)".into()),
        };
        let mut scopes = strings(claims.get("scope"));
        if scopes.is_empty() {
            scopes = strings(claims.get("scp"));
        }
        let missing: Vec<&str> = self
            .required_scopes
            .iter()
            .filter(|s| !scopes.contains(s))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(Rejected::InsufficientScope {
                needed: self.required_scopes.join(" "),
            });
        }
        Ok(Identity {
            issuer,
            subject,
            groups: strings(claim(claims, self.groups_claim)),
            scopes,
            client_id: claims
                .get("client_id")
                .or_else(|| claims.get("azp"))
                .and_then(Value::as_str)
                .map(String::from),
            expires_at,
            audiences,
            claims: claims.clone(),
            reuse_until: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: u64 = 1_800_000_000;

    fn check(claims: Value) -> Result<Identity, Rejected> {
        let issuers = ["https://idp.example".to_string()];
        let scopes = ["mcp".to_string()];
        Expected {
            issuers: &issuers,
            resource: "https://mcp.example/mcp",
            groups_claim: "realm_access.roles",
            required_scopes: &scopes,
            leeway: 60,
            now: NOW,
        }
        .identity(claims.as_object().unwrap(), true)
    }

    fn good() -> Value {
        json!({"iss": "https://idp.example", "sub": "alice", "aud": ["other", "https://mcp.example/mcp"],
            "exp": NOW + 300, "scope": "openid mcp", "realm_access": {"roles": ["dev", "ops"]}, "azp": "cli"})
    }

    fn with(key: &str, value: Value) -> Value {
        let mut c = good();
        c[key] = value;
        c
    }

    #[test]
    fn a_good_token_names_its_caller_groups_and_scopes() {
        let id = check(good()).unwrap();
        assert_eq!(id.principal(), "https://idp.example#alice");
        assert_eq!(id.groups, ["dev", "ops"]);
        assert_eq!(id.scopes, ["openid", "mcp"]);
        assert_eq!(id.client_id.as_deref(), Some("cli"));
    }

    #[test]
    fn each_claim_that_does_not_hold_is_named() {
        let cases = [
            (with("iss", json!("https://evil.example")), "not trusted"),
            (
                with("aud", json!("https://other.example/mcp")),
                "resource=https://mcp.example/mcp",
            ),
            (with("aud", Value::Null), "no audience"),
            (with("exp", json!(NOW - 61)), "expired 61 s ago"),
            (with("exp", json!("tomorrow")), "exp is not a time"),
            (with("nbf", json!(NOW + 3600)), "not valid for another"),
            (with("sub", json!("")), "no subject"),
        ];
        for (claims, says) in cases {
            match check(claims) {
                Err(Rejected::Invalid(why)) => assert!(why.contains(says), "{why} / {says}"),
                other => panic!("{says}: {other:?}"),
            }
        }
        let mut no_exp = good();
        no_exp.as_object_mut().unwrap().remove("exp");
        assert!(matches!(check(no_exp), Err(Rejected::Invalid(w)) if w.contains("no expiry")));
    }

    #[test]
    fn the_skew_is_forgiven_within_the_leeway() {
        assert!(check(with("exp", json!(NOW - 30))).is_ok());
        assert!(check(with("nbf", json!(NOW + 30))).is_ok());
    }

    #[test]
    fn a_missing_scope_is_insufficient_not_invalid() {
        assert_eq!(
            check(with("scope", json!("openid"))),
            Err(Rejected::InsufficientScope {
                needed: "mcp".into()
            })
        );
        assert!(check(with("scope", Value::Null)).is_err());
        let mut scp = with("scope", Value::Null);
        scp["scp"] = json!(["mcp"]);
        assert!(check(scp).is_ok());
    }
}
