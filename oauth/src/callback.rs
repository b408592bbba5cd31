//! The browser's return to a login: a loopback HTTP server (hyper's HTTP/1) that waits for
//! the one request to `/callback`, hands its query to the login and answers with a page
//! that says the login is done. Any other request gets `404`; each connection is served
//! by a task of its own with a deadline for its head, so a connection that sends nothing
//! holds up neither the browser's nor the login's end; when the login stops waiting
//! (answered, or timed out), the server and its connections stop with it.

use std::convert::Infallible;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

/// How long a connection may take to send its request head.
const HEAD_WAIT: Duration = Duration::from_secs(10);

/// The page the browser shows once it is back.
const DONE: &str = "<!doctype html><title>toolhost</title><p>toolhost: the login is done; you can close this tab.</p>";

/// How the callback server answers a request: the parameters of a `GET /callback?…`, to
/// hand to the login; `404` elsewhere, `405` for another method on the path.
pub(crate) fn callback_query(method: &Method, path: &str, query: Option<&str>) -> Answer {
    if path != "/callback" {
        return Answer::NotFound;
    }
    if method != Method::GET {
        return Answer::NotAllowed;
    }
    let params: Map<String, Value> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
        .collect();
    Answer::Back(params)
}

/// How the callback server answers one request.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    /// The browser is back with these parameters.
    Back(Map<String, Value>),
    NotFound,
    NotAllowed,
}

fn page(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    response
}

/// Serves one connection: each request answered, the first `/callback` sent to `back`.
pub(crate) async fn serve<I>(io: I, back: mpsc::Sender<Map<String, Value>>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let back = back.clone();
        async move {
            let uri = request.uri();
            Ok::<_, Infallible>(
                match callback_query(request.method(), uri.path(), uri.query()) {
                    Answer::Back(params) => {
                        // Only the first return counts; a second finds the login gone.
                        let _ = back.try_send(params);
                        page(StatusCode::OK, DONE)
                    }
                    Answer::NotFound => page(StatusCode::NOT_FOUND, ""),
                    Answer::NotAllowed => page(StatusCode::METHOD_NOT_ALLOWED, ""),
                },
            )
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_WAIT)
        .keep_alive(false)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .await;
}

/// Waits at most `within` for the browser to come back to `listener`: the query it
/// brought.
pub(crate) async fn wait(
    listener: tokio::net::TcpListener,
    within: Duration,
) -> Result<Map<String, Value>, String> {
    let (back, mut came) = mpsc::channel(1);
    // Dropped when the wait ends: the connections still open are stopped with it.
    let mut connections = tokio::task::JoinSet::new();
    let waited = tokio::time::timeout(within, async {
        loop {
            tokio::select! {
                params = came.recv() => {
                    return params.ok_or_else(|| "the login's callback server stopped".to_string());
                }
                accepted = listener.accept() => {
                    let (stream, _) = accepted.map_err(|e| format!("the browser's return could not be accepted: {e}"))?;
                    connections.spawn(serve(stream, back.clone()));
                }
            }
        }
    })
    .await;
    connections.abort_all();
    waited.map_err(|_| {
        format!(
            "the browser did not come back within {} s",
            within.as_secs()
        )
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn only_a_get_of_the_callback_path_brings_the_browser_back() {
        let back =
            |method: Method, path: &str, query: Option<&str>| callback_query(&method, path, query);
        let Answer::Back(params) = back(Method::GET, "/callback", Some("code=a%20b&state=s"))
        else {
            panic!("not back");
        };
        assert_eq!(params["code"], "a b");
        assert_eq!(params["state"], "s");
        assert_eq!(
            back(Method::GET, "/callback", None),
            Answer::Back(Map::new())
        );
        assert_eq!(back(Method::GET, "/", Some("code=x")), Answer::NotFound);
        assert_eq!(back(Method::GET, "/callback/x", None), Answer::NotFound);
        assert_eq!(back(Method::POST, "/callback", None), Answer::NotAllowed);
    }

    async fn request(port: u16, text: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        stream.write_all(text.as_bytes()).await.unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer).await;
        answer
    }

    #[tokio::test]
    async fn a_silent_connection_does_not_hold_up_the_browsers_return() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let waiting = tokio::spawn(wait(listener, Duration::from_secs(20)));
        // Connected, and never a byte.
        let _silent = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let elsewhere = request(port, "GET /favicon.ico HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(elsewhere.starts_with("HTTP/1.1 404"), "{elsewhere}");
        let done = request(
            port,
            "GET /callback?code=c&state=s HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .await;
        assert!(
            done.starts_with("HTTP/1.1 200") && done.contains("the login is done"),
            "{done}"
        );
        let params = waiting.await.unwrap().unwrap();
        assert_eq!(params["code"], "c");
    }

    #[tokio::test]
    async fn a_browser_that_never_comes_back_ends_the_wait_and_its_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let e = wait(listener, Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(e.contains("did not come back within"), "{e}");
        assert!(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err(),
            "still listening"
        );
    }
}
