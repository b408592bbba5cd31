//! The egress proxy: a confined process's one way out of its network namespace.
//!
//! A process granted network runs in a network namespace of its own whose only reachable
//! address is its egress listener (`127.0.0.1:3128` there, set as `HTTP_PROXY`,
//! `HTTPS_PROXY` and `ALL_PROXY` for it: [`proxy_env`]). The host serves that listener
//! ([`Egress::serve`]): HTTP `CONNECT host:port` (what every client does for HTTPS) and
//! plain HTTP requests in absolute form. It resolves names itself and connects only where
//! its [`Rules`] allow:
//!
//! - a host on the deny list is refused (deny wins);
//! - a host must be on the allow list (by name, a `*.` wildcard, or by address);
//! - every address a name resolves to that is internal (loopback, private, link-local: the
//!   cloud metadata address 169.254.169.254 among them) is refused unless the allow list
//!   names that address itself, so a public name cannot lead inside;
//! - it connects to the address it checked (no second lookup).
//!
//! Each refusal is answered `403` with the reason, kept ([`Egress::refusals`]) and
//! reported to the host's callback, in words that name the setting that allows it:
//! `network: example.com:443 refused, not in [sandbox.network] allow`. UDP and raw DNS
//! have no way out at all: the namespace has no route.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::hosts::{HostList, is_internal};

mod relay;
mod request;

pub use request::{Route, read_request};

/// The ports an entry without a port allows: HTTPS and HTTP.
pub const WEB_PORTS: &[u16] = &[443, 80];
/// The most connections one process may have open through its proxy at once (each is a
/// task, not a thread: two file descriptors and its buffers' filled pages).
pub const MAX_CONNECTIONS: usize = 1024;
/// The most threads the proxy's name lookups take at once.
const LOOKUP_THREADS: usize = 4;
/// The longest request head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection to the destination may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The variables that send a confined process's HTTP through its proxy (upper and lower
/// case: curl reads only `http_proxy` in lower case), and an empty `NO_PROXY` so that an
/// inherited one does not send anything around it (there is nothing around it).
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let url = format!("http://127.0.0.1:{}", crate::PROXY_PORT);
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push((name, url.clone()));
    }
    for name in ["http_proxy", "https_proxy", "all_proxy"] {
        env.push((name, url.clone()));
    }
    env.push(("NO_PROXY", String::new()));
    env.push(("no_proxy", String::new()));
    env
}

/// Where a process's connections may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// Hosts it may reach.
    pub allow: HostList,
    /// Hosts it may not reach, even when allowed.
    pub deny: HostList,
    /// The only ports it may reach, whatever the host (`None`: what the lists say).
    pub ports: Option<Vec<u16>>,
    /// The key of the allow list, for refusals (`[sandbox.network] allow`).
    pub setting: String,
}

impl Rules {
    /// `allow` (whose key is `setting`, for refusals) and `deny` (`[sandbox.network]
    /// deny`), on any port they list.
    pub fn new(allow: HostList, deny: HostList, setting: impl Into<String>) -> Rules {
        Rules {
            allow,
            deny,
            ports: None,
            setting: setting.into(),
        }
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// The host is not on the allow list.
    NotAllowed,
    /// The host is on the deny list.
    Denied,
    /// The port is not one of the ports allowed.
    Port,
    /// It resolves only to internal addresses the allow list does not name.
    Internal(IpAddr),
    /// The name does not resolve.
    Unresolved(String),
    /// The request is not one the proxy serves.
    Malformed(String),
}

/// One refused connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The host as the request named it.
    pub host: String,
    /// The port.
    pub port: u16,
    /// Why.
    pub why: Why,
    /// The key of the allow list.
    pub setting: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (host, port, setting) = (&self.host, self.port, &self.setting);
        let shown = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        match &self.why {
            Why::NotAllowed => write!(f, "network: {shown} refused, not in {setting}"),
            Why::Denied => write!(
                f,
                "network: {shown} refused, listed in [sandbox.network] deny"
            ),
            Why::Port => write!(
                f,
                "network: {shown} refused, port {port} is not in tcp_ports"
            ),
            Why::Internal(ip) => write!(
                f,
                "network: {shown} refused: it is {ip}, an internal address (loopback, private or link-local), which only an entry naming that address in {setting} reaches"
            ),
            Why::Unresolved(e) => write!(
                f,
                "network: {shown} refused: the name does not resolve ({e})"
            ),
            Why::Malformed(e) => {
                write!(f, "network: a request the egress proxy does not serve: {e}")
            }
        }
    }
}

/// What the proxy calls with each refusal (to log it).
pub type OnRefusal = Arc<dyn Fn(&Refusal) + Send + Sync>;

struct Shared {
    rules: Rules,
    refusals: Mutex<Vec<Refusal>>,
    on_refusal: Option<OnRefusal>,
    /// Told when the [`Egress`] is dropped: the listener closes.
    stop: tokio::sync::Notify,
    open: AtomicUsize,
}

impl Shared {
    fn refuse(&self, refusal: Refusal) -> Refusal {
        if let Some(log) = &self.on_refusal {
            log(&refusal);
        }
        let mut kept = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
        // One process retrying the same host is one refusal.
        if !kept.contains(&refusal) && kept.len() < 100 {
            kept.push(refusal.clone());
        }
        refusal
    }
}

/// A running proxy for one confined process (its listener): stops accepting when dropped;
/// connections already relayed end with their process.
///
/// One thread serves it: a single-threaded tokio runtime whose tasks are the listener and
/// each connection (up to [`MAX_CONNECTIONS`]), with at most four more threads for name
/// lookups while they run.
pub struct Egress {
    shared: Arc<Shared>,
}

impl fmt::Debug for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Egress")
            .field("rules", &self.shared.rules)
            .finish_non_exhaustive()
    }
}

impl Egress {
    /// Serves `listener` (a confined process's, from [`crate::Attached::listener`]) under
    /// `rules` on a thread of its own; `on_refusal` hears of each refusal.
    pub fn serve(
        listener: TcpListener,
        rules: Rules,
        on_refusal: Option<OnRefusal>,
    ) -> io::Result<Egress> {
        let shared = Arc::new(Shared {
            rules,
            refusals: Mutex::new(Vec::new()),
            on_refusal,
            stop: tokio::sync::Notify::new(),
            open: AtomicUsize::new(0),
        });
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(LOOKUP_THREADS)
            .thread_name("egress-lookup")
            .build()?;
        let s = shared.clone();
        std::thread::Builder::new()
            .name("egress".into())
            .spawn(move || runtime.block_on(accept_loop(listener, s)))?;
        Ok(Egress { shared })
    }

    /// The refusals so far, in order (each host and reason once).
    pub fn refusals(&self) -> Vec<Refusal> {
        self.shared
            .refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        // Kept as a permit if the listener's task is busy: it stops at its next turn.
        self.shared.stop.notify_one();
    }
}

/// Accepts connections until the [`Egress`] is dropped, each served by a task of its own;
/// then waits for the relays still open (they end with their process).
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = shared.stop.notified() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let mut client = match accepted {
                    Ok((client, _)) => client,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        // Out of descriptors or the like: do not spin.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if shared.open.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                    shared.open.fetch_sub(1, Ordering::AcqRel);
                    let _ = answer(
                        &mut client,
                        503,
                        &format!("too many connections through the egress proxy (at most {MAX_CONNECTIONS} at once)"),
                    )
                    .await;
                    continue;
                }
                let s = shared.clone();
                connections.spawn(async move {
                    let _ = client.set_nodelay(true);
                    let _ = serve_one(client, &s).await;
                    s.open.fetch_sub(1, Ordering::AcqRel);
                });
            }
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Reads the request head (httparse): where it goes and whatever came after it, or why
/// it is not a proxy request.
async fn read_head(client: &mut TcpStream) -> io::Result<Result<(Route, Vec<u8>), String>> {
    let mut buf = Vec::with_capacity(4096);
    let (route, len) = loop {
        let n = client.read_buf(&mut buf).await?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "no request"));
        }
        match read_request(&buf) {
            Ok(Some(read)) => break read,
            Ok(None) if buf.len() > MAX_HEAD => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "request head too long",
                ));
            }
            Ok(None) => buf.reserve(4096),
            Err(why) => return Ok(Err(why)),
        }
    };
    Ok(Ok((route, buf.split_off(len))))
}

async fn serve_one(mut client: TcpStream, shared: &Shared) -> io::Result<()> {
    let read = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no request head in time"))??;
    let (route, early) = match read {
        Ok(read) => read,
        Err(why) => {
            let refusal = shared.refuse(Refusal {
                host: String::new(),
                port: 0,
                why: Why::Malformed(why),
                setting: shared.rules.setting.clone(),
            });
            return answer(&mut client, 400, &refusal.to_string()).await;
        }
    };
    let (host, port, head) = match route {
        Route::Tunnel { host, port } => (host, port, None),
        Route::Forward { host, port, head } => (host, port, Some(head)),
    };
    let Some(mut upstream) = reach(&mut client, &host, port, shared).await? else {
        return Ok(());
    };
    match head {
        Some(head) => upstream.write_all(&head).await?,
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await?;
        }
    }
    if !early.is_empty() {
        upstream.write_all(&early).await?;
    }
    relay::relay(&mut client, &mut upstream).await
}

/// A connection to `host:port` as [`open`] makes it, or `None` once `client` has been
/// answered why not (`403` refused, `502` unreachable).
async fn reach(
    client: &mut TcpStream,
    host: &str,
    port: u16,
    shared: &Shared,
) -> io::Result<Option<TcpStream>> {
    match open(host, port, shared).await {
        Ok(s) => Ok(Some(s)),
        Err(Failure::Refused(r)) => answer(client, 403, &r.to_string()).await.map(|()| None),
        Err(Failure::Unreachable(e)) => answer(
            client,
            502,
            &format!("{host}:{port} could not be reached: {e}"),
        )
        .await
        .map(|()| None),
    }
}

enum Failure {
    Refused(Refusal),
    Unreachable(io::Error),
}

/// Checks `host:port` against the rules, resolves it and connects to an address it may
/// reach.
async fn open(host: &str, port: u16, shared: &Shared) -> Result<TcpStream, Failure> {
    let rules = &shared.rules;
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let refuse = |why: Why| {
        Failure::Refused(shared.refuse(Refusal {
            host: host.clone(),
            port,
            why,
            setting: rules.setting.clone(),
        }))
    };
    let literal = host.parse::<IpAddr>().ok();
    if rules.deny.matches(&host, port, WEB_PORTS)
        || literal.is_some_and(|ip| rules.deny.lists_address(ip, port, WEB_PORTS))
    {
        return Err(refuse(Why::Denied));
    }
    if rules.ports.as_ref().is_some_and(|p| !p.contains(&port)) {
        return Err(refuse(Why::Port));
    }
    let allowed = rules.allow.matches(&host, port, WEB_PORTS)
        || literal.is_some_and(|ip| rules.allow.lists_address(ip, port, WEB_PORTS));
    if !allowed {
        return Err(refuse(Why::NotAllowed));
    }
    let addrs: Vec<SocketAddr> = match literal {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => match tokio::net::lookup_host((host.as_str(), port)).await {
            Ok(a) => a.collect(),
            Err(e) => return Err(refuse(Why::Unresolved(e.to_string()))),
        },
    };
    let mut internal = None;
    let reachable: Vec<SocketAddr> = addrs
        .into_iter()
        .filter(|a| {
            if rules.deny.lists_address(a.ip(), port, WEB_PORTS) {
                return false;
            }
            if is_internal(a.ip()) && !rules.allow.lists_address(a.ip(), port, WEB_PORTS) {
                internal.get_or_insert(a.ip());
                return false;
            }
            true
        })
        .collect();
    if reachable.is_empty() {
        return Err(match internal {
            Some(ip) => refuse(Why::Internal(ip)),
            None => refuse(Why::Unresolved("no address".into())),
        });
    }
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in reachable {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, "connection timed out"),
        }
    }
    Err(Failure::Unreachable(last))
}

/// Answers a request with `status` and a plain-text reason, then closes.
async fn answer(client: &mut TcpStream, status: u16, text: &str) -> io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        502 => "Bad Gateway",
        _ => "Service Unavailable",
    };
    let body = format!("{text}\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Toolhost-Egress: refused\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    let _ = client.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, Read, Write};
    use std::net::TcpStream;

    fn rules(allow: &[&str], deny: &[&str]) -> Rules {
        Rules::new(
            HostList::new(allow).unwrap(),
            HostList::new(deny).unwrap(),
            "[sandbox.network] allow",
        )
    }

    /// A proxy on a loopback listener of the test's own.
    fn proxy(rules: Rules) -> (Egress, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        (Egress::serve(listener, rules, None).unwrap(), addr)
    }

    /// An HTTP server answering every request with `hello`, once.
    fn origin() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in l.incoming().flatten() {
                let mut reader = io::BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let mut s = stream;
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                );
            }
        });
        addr
    }

    fn request(proxy: SocketAddr, text: &str) -> String {
        let mut s = TcpStream::connect(proxy).unwrap();
        s.write_all(text.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn a_listed_address_is_reached_by_plain_http_and_by_connect() {
        let origin = origin();
        let (_egress, addr) = proxy(rules(&[&format!("127.0.0.1:{}", origin.port())], &[]));
        let got = request(
            addr,
            &format!(
                "GET http://127.0.0.1:{}/x HTTP/1.1\r\nHost: x\r\n\r\n",
                origin.port()
            ),
        );
        assert!(got.ends_with("hello"), "{got}");
        let got = request(
            addr,
            &format!(
                "CONNECT 127.0.0.1:{0} HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\n\r\nGET / HTTP/1.1\r\n\r\n",
                origin.port()
            ),
        );
        assert!(
            got.starts_with("HTTP/1.1 200 Connection Established"),
            "{got}"
        );
        assert!(got.ends_with("hello"), "{got}");
    }

    #[test]
    fn a_name_not_listed_is_refused_naming_the_setting() {
        let (egress, addr) = proxy(rules(&["crates.io"], &[]));
        let got = request(addr, "CONNECT example.com:443 HTTP/1.1\r\n\r\n");
        assert!(got.starts_with("HTTP/1.1 403"), "{got}");
        assert!(
            got.contains("network: example.com:443 refused, not in [sandbox.network] allow"),
            "{got}"
        );
        assert_eq!(egress.refusals()[0].why, Why::NotAllowed);
    }

    #[test]
    fn deny_wins_over_allow() {
        let (egress, addr) = proxy(rules(&["*.example.com"], &["bad.example.com"]));
        let got = request(addr, "CONNECT bad.example.com:443 HTTP/1.1\r\n\r\n");
        assert!(got.contains("listed in [sandbox.network] deny"), "{got}");
        assert_eq!(egress.refusals()[0].why, Why::Denied);
    }

    #[test]
    fn a_name_that_leads_to_an_internal_address_is_refused_unless_the_address_is_listed() {
        let origin = origin();
        let port = origin.port();
        let (egress, addr) = proxy(rules(&[&format!("localhost:{port}")], &[]));
        let got = request(
            addr,
            &format!("GET http://localhost:{port}/ HTTP/1.1\r\n\r\n"),
        );
        assert!(
            got.starts_with("HTTP/1.1 403") && got.contains("internal address"),
            "{got}"
        );
        assert!(matches!(egress.refusals()[0].why, Why::Internal(_)));
        let (_e, addr) = proxy(rules(
            &[
                &format!("localhost:{port}"),
                &format!("127.0.0.1:{port}"),
                &format!("[::1]:{port}"),
            ],
            &[],
        ));
        let got = request(
            addr,
            &format!("GET http://localhost:{port}/ HTTP/1.1\r\n\r\n"),
        );
        assert!(got.ends_with("hello"), "{got}");
    }

    #[test]
    fn the_metadata_address_is_refused_even_by_name_of_a_wildcard() {
        let (_e, addr) = proxy(rules(&["*.example.com"], &[]));
        let got = request(addr, "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n");
        assert!(got.starts_with("HTTP/1.1 403"), "{got}");
    }

    #[test]
    fn a_request_that_is_not_a_proxy_request_is_answered_400() {
        let (_e, addr) = proxy(rules(&["crates.io"], &[]));
        let got = request(addr, "GET / HTTP/1.1\r\nHost: crates.io\r\n\r\n");
        assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod many {
    use super::*;
    use std::io::{Read, Write};

    /// This process's threads.
    fn threads() -> usize {
        std::fs::read_dir("/proc/self/task").unwrap().count()
    }

    #[test]
    fn five_hundred_tunnels_at_once_are_held_without_a_thread_each() {
        let origin = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = origin.local_addr().unwrap().port();
        // The origin keeps every connection open, on one thread.
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in origin.incoming().flatten() {
                held.push(stream);
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let rules = Rules::new(
            HostList::new([format!("127.0.0.1:{port}")]).unwrap(),
            HostList::none(),
            "[sandbox.network] allow",
        );
        let before = threads();
        let egress = Egress::serve(listener, rules, None).unwrap();
        let mut tunnels = Vec::new();
        for _ in 0..500 {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
                .unwrap();
            tunnels.push(s);
        }
        for s in &mut tunnels {
            let mut answer = [0u8; 39];
            s.read_exact(&mut answer).unwrap();
            assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
        }
        let during = threads();
        assert!(
            during <= before + 1 + LOOKUP_THREADS,
            "{before} threads before, {during} with 500 tunnels open"
        );
        // Dropping the proxy closes its listener; the tunnels it opened stay open.
        drop(egress);
        tunnels[0].write_all(b"still open").unwrap();
    }
}
