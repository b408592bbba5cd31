//! The session rmcp's connection to a server over HTTP holds, seen through a wrapper of
//! its HTTP client ([`Watched`]), so that a call toolhost posts itself goes out in it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};

/// The session rmcp's connection holds, as seen on what it sends and receives.
#[derive(Default)]
pub(crate) struct Session(Mutex<Option<Arc<str>>>);

impl Session {
    pub(super) fn get(&self) -> Option<Arc<str>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn saw(&self, id: Option<&str>) {
        let Some(id) = id else { return };
        let mut session = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if session.as_deref() != Some(id) {
            *session = Some(id.into());
        }
    }
}

/// The HTTP client rmcp's connection goes through, noting the session it opens (or
/// recovers) for the calls posted beside it.
#[derive(Clone)]
pub(crate) struct Watched {
    pub(crate) client: reqwest::Client,
    pub(crate) session: Arc<Session>,
}

type Stream = futures_util::stream::BoxStream<'static, Result<sse_stream::Sse, SseError>>;

impl StreamableHttpClient for Watched {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.session.saw(session_id.as_deref());
        let answer = self
            .client
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        self.noted(answer)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.session.saw(session_id.as_deref());
        let answer = self
            .client
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.noted(answer)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.client
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Stream, StreamableHttpError<Self::Error>> {
        self.client
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<Stream, StreamableHttpError<Self::Error>> {
        self.client
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

impl Watched {
    fn noted(
        &self,
        answer: Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        if let Ok(
            StreamableHttpPostResponse::Json(_, Some(id))
            | StreamableHttpPostResponse::Sse(_, Some(id)),
        ) = &answer
        {
            self.session.saw(Some(id));
        }
        answer
    }
}
