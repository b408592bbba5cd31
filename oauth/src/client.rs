//! This server as a client of its issuer (`[http.auth.client]`): what introspection and
//! token exchange authenticate as.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::issuer::{Issuer, oauth_answer, send_for_json};

/// The client's id and secret at `issuer`.
pub(crate) struct OwnClient {
    pub(crate) id: String,
    secret: String,
    /// The variable the secret came from, for messages.
    secret_env: String,
    pub(crate) issuer: Arc<Issuer>,
    http: reqwest::Client,
}

impl OwnClient {
    pub(crate) fn new(
        id: String,
        secret: String,
        secret_env: String,
        issuer: Arc<Issuer>,
        http: reqwest::Client,
    ) -> OwnClient {
        OwnClient {
            id,
            secret,
            secret_env,
            issuer,
            http,
        }
    }

    /// `endpoint`, or the issuer metadata's endpoint `pick` chooses.
    pub(crate) async fn endpoint(
        &self,
        given: Option<&String>,
        name: &str,
        pick: fn(&crate::issuer::Metadata) -> Option<String>,
    ) -> Result<String, String> {
        if let Some(endpoint) = given {
            return Ok(endpoint.clone());
        }
        let metadata = self.issuer.metadata().await?;
        pick(&metadata).ok_or_else(|| format!("{}'s metadata names no {name}", self.issuer.id))
    }

    /// POSTs `form` to `endpoint` authenticated as this client (`client_secret_basic`);
    /// the JSON object answered. `Err` says what went wrong, never with a token in it.
    pub(crate) async fn post(
        &self,
        endpoint: &str,
        form: &[(&str, &str)],
    ) -> Result<Map<String, Value>, String> {
        let request = self
            .http
            .post(endpoint)
            .basic_auth(&self.id, Some(&self.secret))
            .form(form);
        let (status, answer) = send_for_json(request, endpoint).await?;
        if status == reqwest::StatusCode::UNAUTHORIZED {
            tracing::error!(target: "toolhost::auth", %endpoint, client_id = %self.id,
                "the issuer refused this server's client credentials: check [http.auth.client] id and {}", self.secret_env);
        }
        oauth_answer(endpoint, status, answer)
    }
}
