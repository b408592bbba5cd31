//! HTTP/1.1 as a posted call speaks it on a connection of its own ([`Line`]): its request
//! written whole in one write, its answer's head parsed by httparse ([`Head`]), its body cut
//! out of what the connection reads as the head frames it ([`Framing`]: a length, chunks,
//! or the connection's end).
//!
//! Through hyper's client connection a call's request was turned into hyper's own request
//! type, encoded header by header, and its answer's head parsed into a map of every header
//! (each name hashed), with a dispatcher between the call and the connection: about 20,000
//! instructions a call of a gateway's 134,000 in front of `serve --http` (callgrind). Here
//! the headers every call carries are written once per server, and of an answer's head
//! only what a call reads is kept: its status, type, framing, challenge and redirect.

use std::io;
use std::task::{Context, Poll, Waker};

use bytes::{Buf as _, Bytes, BytesMut};
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue, LOCATION, WWW_AUTHENTICATE};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

/// The most bytes an answer's head (or a chunked body's trailers) may take.
pub(super) const MAX_HEAD: usize = 64 * 1024;
/// The most header lines an answer's head may have.
pub(super) const MAX_HEADERS: usize = 64;
/// The most bytes of the line that gives a chunk's size (with its extensions).
pub(super) const MAX_CHUNK_LINE: usize = 4096;
/// How much room a read is given at least.
const READ: usize = 8 * 1024;

/// One connection to the server, with what was read on it and not yet taken.
pub(super) struct Line {
    io: TcpStream,
    buf: BytesMut,
}

/// What a call reads of its answer's head.
pub(super) struct Head {
    pub(super) status: http::StatusCode,
    /// Only `content-type`, `www-authenticate` and `location`: the rest are not read.
    pub(super) headers: http::HeaderMap,
    pub(super) framing: Framing,
    /// The connection may carry another request once the body is read.
    pub(super) reusable: bool,
}

impl Line {
    pub(super) fn new(io: TcpStream) -> Line {
        Line {
            io,
            buf: BytesMut::new(),
        }
    }

    /// Whether the connection is open and idle, found without waiting: a connection the
    /// server closed (or wrote to unasked) is not.
    pub(super) fn free(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        match self.io.poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                let mut byte = [0u8; 1];
                matches!(self.io.try_read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    /// Writes a whole request.
    pub(super) async fn write(&mut self, request: &[u8]) -> io::Result<()> {
        self.io.write_all(request).await
    }

    /// Reads what the server sent next into the buffer: `Ok(0)` once it closed.
    ///
    /// Read through `AsyncRead`, whose read that leaves room in the buffer marks the
    /// socket drained: the next wait (or [`Line::free`] when the connection is taken
    /// again) then costs no system call that can only say "nothing yet". Read with
    /// `try_read_buf`, each call made one such read (strace of a gateway in front of
    /// `serve --http`: three reads a call, one of them `EAGAIN`).
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ / 4 {
            self.buf.reserve(READ);
        }
        tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut self.io), cx, &mut self.buf)
    }

    /// Reads the head of the answer to the request just written (informational heads
    /// passed over); the body follows in the buffer.
    pub(super) async fn head(&mut self) -> Result<Head, String> {
        let mut passed = 0;
        loop {
            if !self.buf.is_empty()
                && let Some(head) = parse_head(&mut self.buf, &mut passed)?
            {
                return Ok(head);
            }
            let read = std::future::poll_fn(|cx| self.poll_fill(cx))
                .await
                .map_err(|e| format!("the answer could not be read: {e}"))?;
            if read == 0 {
                return Err(if self.buf.is_empty() {
                    "the server closed the connection without answering".into()
                } else {
                    "the server closed the connection in the middle of its answer's head".into()
                });
            }
        }
    }

    /// What was read and not yet taken.
    pub(super) fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buf
    }
}

/// The head at the start of `buf`, taken out of it; `None` until all of it was read.
/// Informational heads (1xx but 101) before it are taken out and passed over, `passed`
/// counting their bytes: together they are held to one head's bound.
pub(super) fn parse_head(buf: &mut BytesMut, passed: &mut usize) -> Result<Option<Head>, String> {
    loop {
        let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut lines);
        let used = match response.parse(buf) {
            Ok(httparse::Status::Complete(used)) => used,
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
                return Err(format!(
                    "the server's answer has a head over {MAX_HEAD} bytes"
                ));
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(format!(
                    "the server's answer has more than {MAX_HEADERS} header lines"
                ));
            }
            Err(e) => {
                return Err(format!(
                    "the server's answer is not HTTP/1.1 ({e}): {}",
                    super::super::excerpt(&buf[..buf.len().min(120)])
                ));
            }
        };
        if used > MAX_HEAD {
            return Err(format!(
                "the server's answer has a head over {MAX_HEAD} bytes"
            ));
        }
        let code = response.code.unwrap_or(0);
        let status = http::StatusCode::from_u16(code)
            .map_err(|_| format!("the server answered with status {code}, which is no status"))?;
        if status == http::StatusCode::SWITCHING_PROTOCOLS {
            return Err("the server switched protocols (HTTP 101) on a posted call".into());
        }
        if status.is_informational() {
            *passed += used;
            if *passed > MAX_HEAD {
                return Err(format!(
                    "the server sent informational heads (HTTP 1xx) over {MAX_HEAD} bytes and no answer"
                ));
            }
            buf.advance(used);
            continue;
        }
        let head = read_head(status, response.version == Some(1), response.headers)?;
        buf.advance(used);
        return Ok(Some(head));
    }
}

/// What a call reads of the header lines of an answer with `status`.
fn read_head(
    status: http::StatusCode,
    http11: bool,
    lines: &[httparse::Header<'_>],
) -> Result<Head, String> {
    let mut headers = http::HeaderMap::new();
    let mut length: Option<u64> = None;
    let mut chunked = false;
    // HTTP/1.0 closes after each answer unless it says otherwise.
    let mut reusable = http11;
    for line in lines {
        let name = line.name;
        let value = line.value;
        if name.eq_ignore_ascii_case("content-length") {
            let n = content_length(value)?;
            if length.is_some_and(|before| before != n) {
                return Err("the server's answer has two different Content-Length headers".into());
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
            if !last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err(format!(
                    "the server's answer is sent with Transfer-Encoding '{}', which toolhost does not read (only chunked)",
                    String::from_utf8_lossy(value)
                ));
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    reusable = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && !http11 {
                    reusable = true;
                }
            }
        } else {
            keep(&mut headers, name, value);
        }
    }
    let framing =
        if status == http::StatusCode::NO_CONTENT || status == http::StatusCode::NOT_MODIFIED {
            Framing::Length(0)
        } else if chunked {
            // Both framings named: the chunks frame it, and the connection is not trusted
            // with another request (RFC 9112, 6.3).
            if length.is_some() {
                reusable = false;
            }
            Framing::Chunked(Chunk::Size)
        } else if let Some(length) = length {
            Framing::Length(length)
        } else {
            reusable = false;
            Framing::UntilClose
        };
    Ok(Head {
        status,
        headers,
        framing,
        reusable,
    })
}

/// Keeps a header a call reads; the rest (and a value no header may hold) are passed over.
fn keep(headers: &mut http::HeaderMap, name: &str, value: &[u8]) {
    let name: HeaderName = if name.eq_ignore_ascii_case("content-type") {
        CONTENT_TYPE
    } else if name.eq_ignore_ascii_case("www-authenticate") {
        WWW_AUTHENTICATE
    } else if name.eq_ignore_ascii_case("location") {
        LOCATION
    } else {
        return;
    };
    if let Ok(value) = HeaderValue::from_bytes(value) {
        headers.append(name, value);
    }
}

/// A `Content-Length` value: digits only.
fn content_length(value: &[u8]) -> Result<u64, String> {
    let digits = value.trim_ascii();
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(format!(
            "the server's answer has Content-Length '{}', which is no length",
            String::from_utf8_lossy(value)
        ));
    }
    Ok(digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// How an answer's body is told apart from what follows it on the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// This many bytes are left of it.
    Length(u64),
    /// In chunks, each after a line with its size; where in them the body is.
    Chunked(Chunk),
    /// To the connection's end.
    UntilClose,
    /// All of it was taken.
    Ended,
}

/// Where in a chunked body the reading is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chunk {
    /// At the line that gives the next chunk's size.
    Size,
    /// In a chunk, this many bytes left of it.
    Data(u64),
    /// At the line end after a chunk.
    DataEnd,
    /// In the trailers after the last chunk, this many bytes of them read.
    Trailers(usize),
}

impl Framing {
    /// The next piece of the body out of `buf`: `Some` data, `None` when more must be
    /// read first; at the end the framing is [`Framing::Ended`] and `Some` empty data
    /// is not returned. `closed`: the connection has ended, nothing more comes.
    pub(super) fn next(
        &mut self,
        buf: &mut BytesMut,
        closed: bool,
    ) -> Result<Option<Bytes>, String> {
        loop {
            match self {
                Framing::Ended => return Ok(None),
                Framing::Length(0) => *self = Framing::Ended,
                Framing::Length(left) => {
                    if buf.is_empty() {
                        return ended_early(closed);
                    }
                    let take = usize::try_from(*left).map_or(buf.len(), |l| l.min(buf.len()));
                    *left -= take as u64;
                    if *left == 0 {
                        *self = Framing::Ended;
                    }
                    return Ok(Some(buf.split_to(take).freeze()));
                }
                Framing::UntilClose => {
                    if !buf.is_empty() {
                        return Ok(Some(buf.split().freeze()));
                    }
                    if closed {
                        *self = Framing::Ended;
                    }
                    return Ok(None);
                }
                Framing::Chunked(chunk) => match chunked(chunk, buf)? {
                    Step::Data(data) => return Ok(Some(data)),
                    Step::On => {}
                    Step::More => return ended_early(closed),
                    Step::End => *self = Framing::Ended,
                },
            }
        }
    }
}

/// More of the body must be read: an error when nothing more comes.
fn ended_early(closed: bool) -> Result<Option<Bytes>, String> {
    if closed {
        Err("the server closed the connection before the end of its answer".into())
    } else {
        Ok(None)
    }
}

/// What one step through a chunked body found.
enum Step {
    Data(Bytes),
    /// Went on to the next part: take another step.
    On,
    /// More must be read.
    More,
    /// The body's end, trailers and all.
    End,
}

fn chunked(chunk: &mut Chunk, buf: &mut BytesMut) -> Result<Step, String> {
    match chunk {
        Chunk::Size => {
            // The line is httparse's to read (CRLF at its end, as hyper read it before);
            // only its length is held here. A line that starts with no digit gives no size
            // (httparse reads a bare CRLF as 0, which would end the body unsaid).
            let line = &buf[..buf.len().min(MAX_CHUNK_LINE)];
            let (used, size) = match httparse::parse_chunk_size(line) {
                Ok(httparse::Status::Complete(read)) if line[0].is_ascii_hexdigit() => read,
                Ok(httparse::Status::Partial) if line.len() < MAX_CHUNK_LINE => {
                    return Ok(Step::More);
                }
                Ok(httparse::Status::Partial) => {
                    return Err(format!(
                        "a chunk of the server's answer has a size line over {MAX_CHUNK_LINE} bytes"
                    ));
                }
                Ok(httparse::Status::Complete(_)) | Err(httparse::InvalidChunkSize) => {
                    let shown = line.split(|&b| b == b'\r' || b == b'\n').next();
                    let shown = shown.unwrap_or_default();
                    return Err(format!(
                        "a chunk of the server's answer has the size line '{}', which gives no size (hex digits, then extensions, then CRLF)",
                        String::from_utf8_lossy(&shown[..shown.len().min(40)])
                    ));
                }
            };
            buf.advance(used);
            *chunk = if size == 0 {
                Chunk::Trailers(0)
            } else {
                Chunk::Data(size)
            };
            Ok(Step::On)
        }
        Chunk::Data(left) => {
            if buf.is_empty() {
                return Ok(Step::More);
            }
            let take = usize::try_from(*left).map_or(buf.len(), |l| l.min(buf.len()));
            *left -= take as u64;
            if *left == 0 {
                *chunk = Chunk::DataEnd;
            }
            Ok(Step::Data(buf.split_to(take).freeze()))
        }
        Chunk::DataEnd => match &buf[..buf.len().min(2)] {
            [b'\r', b'\n'] => {
                buf.advance(2);
                *chunk = Chunk::Size;
                Ok(Step::On)
            }
            [] | [b'\r'] => Ok(Step::More),
            _ => Err(
                "a chunk of the server's answer is longer than its size says (no CRLF where it ends)"
                    .into(),
            ),
        },
        Chunk::Trailers(read) => {
            let Some(end) = memchr::memchr(b'\n', buf) else {
                if *read + buf.len() > MAX_HEAD {
                    return Err(format!(
                        "the server's answer has trailers over {MAX_HEAD} bytes"
                    ));
                }
                return Ok(Step::More);
            };
            if end == 0 || buf[end - 1] != b'\r' {
                return Err("a trailer line of the server's answer does not end with CRLF".into());
            }
            let empty = end == 1;
            *read += end + 1;
            buf.advance(end + 1);
            if empty {
                Ok(Step::End)
            } else if *read > MAX_HEAD {
                Err(format!(
                    "the server's answer has trailers over {MAX_HEAD} bytes"
                ))
            } else {
                Ok(Step::On)
            }
        }
    }
}

#[cfg(test)]
mod tests;
