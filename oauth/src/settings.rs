//! `[http.auth]`: which issuers' tokens admit a caller, and how they are checked.

use serde::{Deserialize, Deserializer};

use crate::error::SettingsError;

/// The `[http.auth]` table.
///
/// ```toml
/// [http.auth]
/// issuer = "https://idp.example.com/realms/team"   # or issuers = [...]
/// resource = "https://mcp.example.com/mcp"         # this server, as clients reach it (the tokens' `aud`)
/// groups_claim = "groups"                          # a dotted path: "realm_access.roles"
/// scopes_supported = ["mcp:tools"]
/// required_scopes = ["mcp:tools"]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The issuers whose tokens are accepted (`issuer = "…"` for one).
    #[serde(alias = "issuer", deserialize_with = "one_or_many")]
    pub issuers: Vec<String>,
    /// This server's resource URI, the `aud` its tokens must carry. Default: `http://ADDR/mcp`
    /// for the address `serve --http` was bound to (not for `0.0.0.0`, where it must be
    /// given).
    #[serde(default)]
    pub resource: Option<String>,
    /// The claim that holds the caller's groups or roles (a string or a list of strings);
    /// dots walk into objects. Default `groups`.
    #[serde(default = "groups_claim")]
    pub groups_claim: String,
    /// The scopes the metadata advertises to clients.
    #[serde(default)]
    pub scopes_supported: Vec<String>,
    /// Scopes every token must carry; one without them is answered `403` naming them.
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// How far `exp` and `nbf` may be off, in seconds (clock skew). Default 60.
    #[serde(default = "leeway_secs")]
    pub leeway_secs: u64,
    /// An issuer's keys are fetched again after this long. Default 600.
    #[serde(default = "keys_max_age_secs")]
    pub keys_max_age_secs: u64,
    /// A token whose key id is not among its issuer's keys fetches them again, at most once
    /// per this many seconds (a flood of made-up key ids does not flood the issuer).
    /// Default 10.
    #[serde(default = "keys_min_refresh_secs")]
    pub keys_min_refresh_secs: u64,
    /// This server's own client at an issuer: what introspection and token exchange
    /// authenticate as.
    #[serde(default)]
    pub client: Option<ClientSettings>,
    /// Opaque (non-JWT) tokens, checked by introspection at the client's issuer.
    #[serde(default)]
    pub introspection: Option<IntrospectionSettings>,
    /// The web console's login: the public client it logs its user in as.
    #[serde(default)]
    pub console: Option<ConsoleSettings>,
}

/// `[http.auth.console]`: the web console logs its user in at an issuer (authorization
/// code with PKCE in the browser) as this public client, whose redirect URI is the
/// console's own address (`https://mcp.example.com/`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSettings {
    /// The console's client id at the issuer.
    pub client_id: String,
    /// The issuer it is registered at; default: the first issuer.
    #[serde(default)]
    pub issuer: Option<String>,
}

/// `[http.auth.client]`: this server registered as a client at one issuer
/// (`client_secret_basic`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSettings {
    /// Its client id.
    pub id: String,
    /// The environment variable that holds its client secret (a secret is never written
    /// in the file).
    pub secret_env: String,
    /// The issuer it is registered at; default: the one issuer configured.
    #[serde(default)]
    pub issuer: Option<String>,
}

/// `[http.auth.introspection]`: RFC 7662 at the client's issuer, for tokens that are not
/// JWTs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntrospectionSettings {
    /// The endpoint; default: the issuer metadata's `introspection_endpoint`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// How long an answer is kept, in seconds (`0`: every request asks; a revoked token is
    /// refused at most this long after). Default 0.
    #[serde(default)]
    pub cache_secs: u64,
}

fn groups_claim() -> String {
    "groups".into()
}
fn leeway_secs() -> u64 {
    60
}
fn keys_max_age_secs() -> u64 {
    600
}
fn keys_min_refresh_secs() -> u64 {
    10
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

impl Settings {
    /// Settings for `issuers` with every other key at its default.
    pub fn for_issuers(issuers: impl IntoIterator<Item = impl Into<String>>) -> Settings {
        Settings {
            issuers: issuers.into_iter().map(Into::into).collect(),
            resource: None,
            groups_claim: groups_claim(),
            scopes_supported: Vec::new(),
            required_scopes: Vec::new(),
            leeway_secs: leeway_secs(),
            keys_max_age_secs: keys_max_age_secs(),
            keys_min_refresh_secs: keys_min_refresh_secs(),
            client: None,
            introspection: None,
            console: None,
        }
    }

    /// Checks what serde cannot: URLs, at least one issuer, the introspection issuer.
    pub fn check(&self) -> Result<(), SettingsError> {
        if self.issuers.is_empty() {
            return Err(SettingsError(
                "issuers: name at least one issuer (issuer = \"https://idp.example.com\")".into(),
            ));
        }
        for (i, issuer) in self.issuers.iter().enumerate() {
            check_url(&format!("issuers[{i}]"), issuer)?;
            if issuer.contains('#') || issuer.contains('?') {
                return Err(SettingsError(format!(
                    "issuers[{i}]: an issuer has no query or fragment (RFC 8414): {issuer}"
                )));
            }
        }
        if let Some(resource) = &self.resource {
            check_url("resource", resource)?;
        }
        if self.groups_claim.is_empty() || self.groups_claim.split('.').any(str::is_empty) {
            return Err(SettingsError(format!(
                "groups_claim: {:?} is not a claim name (a dotted path such as realm_access.roles)",
                self.groups_claim
            )));
        }
        if let Some(c) = &self.client {
            match &c.issuer {
                Some(issuer) if !self.issuers.contains(issuer) => {
                    return Err(SettingsError(format!(
                        "client.issuer: {issuer} is not one of issuers"
                    )));
                }
                None if self.issuers.len() > 1 => {
                    return Err(SettingsError(
                        "client.issuer: with several issuers, name the one this server is a client of".into(),
                    ));
                }
                _ => {}
            }
        }
        if let Some(issuer) = self.console.as_ref().and_then(|c| c.issuer.as_ref())
            && !self.issuers.contains(issuer)
        {
            return Err(SettingsError(format!(
                "console.issuer: {issuer} is not one of issuers"
            )));
        }
        if let Some(i) = &self.introspection {
            if self.client.is_none() {
                return Err(SettingsError(
                    "introspection: introspection authenticates as this server's client: add [http.auth.client] with its id and secret_env".into(),
                ));
            }
            if let Some(endpoint) = &i.endpoint {
                check_url("introspection.endpoint", endpoint)?;
            }
        }
        Ok(())
    }

    /// The issuer this server is a client of, when it is one.
    pub(crate) fn client_issuer(&self) -> Option<&str> {
        let client = self.client.as_ref()?;
        Some(client.issuer.as_deref().unwrap_or(&self.issuers[0]))
    }
}

/// An `http(s)` URL; plain `http` only to a loopback host.
pub(crate) fn check_url(key: &str, url: &str) -> Result<(), SettingsError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| SettingsError(format!("{key}: {url:?} is not a URL ({e})")))?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if is_loopback(&parsed) => Ok(()),
        "http" => Err(SettingsError(format!(
            "{key}: {url} is plain HTTP; use https:// (plain HTTP is taken only on a loopback address)"
        ))),
        other => Err(SettingsError(format!(
            "{key}: {url} is a {other}: URL; use https://"
        ))),
    }
}

/// Whether the URL's host is `localhost` or a loopback address.
pub(crate) fn is_loopback(url: &reqwest::Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Settings, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn one_issuer_or_several() {
        let one = parse(r#"issuer = "https://idp.example""#).unwrap();
        assert_eq!(one.issuers, ["https://idp.example"]);
        let many = parse(r#"issuers = ["https://a.example", "https://b.example"]"#).unwrap();
        assert_eq!(many.issuers.len(), 2);
        assert_eq!(many.groups_claim, "groups");
        assert_eq!(many.leeway_secs, 60);
    }

    #[test]
    fn plain_http_is_taken_only_on_loopback() {
        for (issuer, ok) in [
            ("https://idp.example", true),
            ("http://127.0.0.1:3000", true),
            ("http://localhost:3000/oidc", true),
            ("http://[::1]:3000", true),
            ("http://idp.example", false),
            ("ftp://idp.example", false),
            ("idp.example", false),
        ] {
            let r = Settings::for_issuers([issuer]).check();
            assert_eq!(r.is_ok(), ok, "{issuer}: {r:?}");
        }
        let e = Settings::for_issuers(["http://idp.example"])
            .check()
            .unwrap_err();
        assert!(
            e.to_string().contains("issuers[0]") && e.to_string().contains("https://"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        let e = parse("issuer = \"https://idp.example\"\naudience = \"x\"").unwrap_err();
        assert!(e.contains("unknown field `audience`"), "{e}");
    }

    #[test]
    fn a_client_with_several_issuers_must_name_one_and_introspection_needs_a_client() {
        let mut s = Settings::for_issuers(["https://a.example", "https://b.example"]);
        s.introspection = Some(IntrospectionSettings::default());
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("[http.auth.client]"), "{e}");
        s.client = Some(ClientSettings {
            id: "toolhost".into(),
            secret_env: "SECRET".into(),
            issuer: None,
        });
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("client.issuer"), "{e}");
    }
}
