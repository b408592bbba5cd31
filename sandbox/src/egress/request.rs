//! A proxy request's head, read with `httparse`, and where it goes: a `CONNECT host:port`
//! tunnel, or a request in absolute form (`GET http://host/path`) passed on with its head
//! rewritten for the origin server. Pure: the proxy reads the bytes, this says what they
//! ask (and the fuzz target `egress_request` reads it from this file).

/// The most header lines a request head may carry.
const MAX_HEADERS: usize = 100;

/// Headers for the proxy alone, or for one hop: not passed on.
const HOP_BY_HOP: [&str; 4] = [
    "proxy-connection",
    "proxy-authorization",
    "connection",
    "keep-alive",
];

/// Where a proxy request goes, as its head asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `CONNECT host:port`: a tunnel to it.
    Tunnel {
        /// The host named.
        host: String,
        /// Its port.
        port: u16,
    },
    /// `METHOD http://host[:port]/path`: the request passed on to the host.
    Forward {
        /// The host named.
        host: String,
        /// Its port (80 unless named).
        port: u16,
        /// The head to send it: the path as its target, the proxy's and hop-by-hop
        /// headers left out, `Connection: close`.
        head: Vec<u8>,
    },
}

/// The request head at the start of `buf`: `Ok(None)` while it is incomplete, else where
/// it goes and the head's length (what follows it is passed on as it is). `Err` says what
/// is wrong with it, for the `400` that answers it.
pub fn read_request(buf: &[u8]) -> Result<Option<(Route, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(format!(
                "the request head has more than {MAX_HEADERS} header lines"
            ));
        }
        Err(e) => return Err(format!("the request head is not HTTP/1 ({e})")),
    };
    let (Some(method), Some(target), Some(version)) =
        (request.method, request.path, request.version)
    else {
        return Err("the request line is incomplete".into());
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) =
            authority(target, 443).ok_or_else(|| format!("CONNECT to '{target}'"))?;
        return Ok(Some((Route::Tunnel { host, port }, len)));
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(if target.starts_with("https://") {
            format!("'{method} {target}': HTTPS goes through CONNECT")
        } else {
            format!("'{method} {target}': a proxy request names its destination (http://host/path)")
        });
    };
    let (auth, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let auth = auth.rsplit_once('@').map_or(auth, |(_, a)| a);
    let (host, port) = authority(auth, 80).ok_or_else(|| format!("a request to '{target}'"))?;
    let mut head = Vec::with_capacity(len + 32);
    head.extend_from_slice(format!("{method} {path} HTTP/1.{version}\r\n").as_bytes());
    for header in request.headers.iter() {
        if HOP_BY_HOP
            .iter()
            .any(|h| header.name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        head.extend_from_slice(header.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(header.value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Some((Route::Forward { host, port, head }, len)))
}

/// `host:port` or `[v6]:port` (with `default` when no port is given).
pub fn authority(text: &str, default: u16) -> Option<(String, u16)> {
    let (host, port) = match text.strip_prefix('[') {
        Some(rest) => {
            let (host, after) = rest.split_once(']')?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().ok()?,
                None if after.is_empty() => default,
                None => return None,
            };
            (host, port)
        }
        None => match text.rsplit_once(':') {
            Some((host, p)) if !host.contains(':') => (host, p.parse().ok()?),
            Some(_) => return None,
            None => (text, default),
        },
    };
    (!host.is_empty() && port != 0).then(|| (host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Option<(Route, usize)>, String> {
        read_request(text.as_bytes())
    }

    #[test]
    fn a_connect_is_a_tunnel_to_its_authority() {
        let text = "CONNECT crates.io:443 HTTP/1.1\r\nHost: crates.io\r\n\r\nearly";
        let (route, len) = read(text).unwrap().unwrap();
        assert_eq!(
            route,
            Route::Tunnel {
                host: "crates.io".into(),
                port: 443
            }
        );
        assert_eq!(&text[len..], "early");
    }

    #[test]
    fn a_request_in_absolute_form_is_passed_on_with_its_head_rewritten() {
        let text = "GET http://user@a.example:8080/x?y HTTP/1.0\r\nHost: a.example\r\nProxy-Authorization: Basic eA==\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n";
        let (route, _) = read(text).unwrap().unwrap();
        let Route::Forward { host, port, head } = route else {
            panic!("not forwarded");
        };
        assert_eq!((host.as_str(), port), ("a.example", 8080));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /x?y HTTP/1.0\r\nHost: a.example\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn what_is_not_a_proxy_request_is_named() {
        for (text, says) in [
            (
                "GET / HTTP/1.1\r\n\r\n",
                "a proxy request names its destination",
            ),
            (
                "GET https://a/ HTTP/1.1\r\n\r\n",
                "HTTPS goes through CONNECT",
            ),
            ("CONNECT a:0 HTTP/1.1\r\n\r\n", "CONNECT to 'a:0'"),
            (
                "GET http://:80/ HTTP/1.1\r\n\r\n",
                "a request to 'http://:80/'",
            ),
            (
                "GET http://a/ HTTP/1.1\r\nBad Header: x\r\n\r\n",
                "not HTTP/1",
            ),
            ("GET http://a/ HTTP/1.1\r\nX: a\nb\r\n\r\n", "not HTTP/1"),
        ] {
            let e = read(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        let many = format!(
            "GET http://a/ HTTP/1.1\r\n{}\r\n",
            "X: y\r\n".repeat(MAX_HEADERS + 1)
        );
        assert!(
            read(&many)
                .unwrap_err()
                .contains("more than 100 header lines")
        );
        assert_eq!(read("GET http://a/ HTTP/1.1\r\nHost:"), Ok(None));
    }

    #[test]
    fn authorities_parse_with_and_without_ports() {
        assert_eq!(
            authority("a.example:8443", 443),
            Some(("a.example".into(), 8443))
        );
        assert_eq!(authority("a.example", 80), Some(("a.example".into(), 80)));
        assert_eq!(authority("[::1]:9", 80), Some(("::1".into(), 9)));
        assert_eq!(authority("[]:9", 80), None);
        assert_eq!(authority("::1", 80), None);
        assert_eq!(authority(":443", 80), None);
        assert_eq!(authority("a:0", 80), None);
    }
}
