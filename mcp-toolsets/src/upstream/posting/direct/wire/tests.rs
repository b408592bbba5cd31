use super::*;

/// The head at the start of `text`, and what is left after it.
fn head_of(text: &str) -> Result<Option<(Head, BytesMut)>, String> {
    let mut buf = BytesMut::from(text.as_bytes());
    Ok(parse_head(&mut buf, &mut 0)?.map(|head| (head, buf)))
}

fn head(text: &str) -> Head {
    head_of(text).unwrap().expect("a whole head").0
}

fn refusal(text: &str) -> String {
    match head_of(text) {
        Err(why) => why,
        Ok(_) => panic!("read as a head: {text:?}"),
    }
}

/// The body `framing` cuts out of `bytes` fed in pieces of `piece` bytes (then the
/// connection's end, when `closes`), and what is left after it.
fn body(
    mut framing: Framing,
    bytes: &[u8],
    piece: usize,
    closes: bool,
) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut pieces = bytes.chunks(piece.max(1));
    loop {
        match framing.next(&mut buf, false)? {
            Some(data) => body.extend_from_slice(&data),
            None if framing == Framing::Ended => return Ok((body, buf.to_vec())),
            None => match pieces.next() {
                Some(piece) => buf.extend_from_slice(piece),
                None if closes => loop {
                    match framing.next(&mut buf, true)? {
                        Some(data) => body.extend_from_slice(&data),
                        None => return Ok((body, buf.to_vec())),
                    }
                },
                None => return Err("more was waited for".into()),
            },
        }
    }
}

#[test]
fn a_head_keeps_its_status_type_and_framing_and_passes_over_the_rest() {
    let (head, rest) = head_of(
        "HTTP/1.1 200 OK\r\nServer: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Other: y\r\n\r\n{}",
    )
    .unwrap()
    .unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.headers.len(), 1);
    assert_eq!(head.headers[CONTENT_TYPE], "application/json");
    assert_eq!(head.framing, Framing::Length(2));
    assert!(head.reusable);
    assert_eq!(&rest[..], b"{}");
}

#[test]
fn a_head_not_all_read_yet_waits_for_the_rest_at_every_cut() {
    let text = "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"x\"\r\nContent-Length: 0\r\n\r\n";
    for cut in 1..text.len() {
        assert!(head_of(&text[..cut]).unwrap().is_none(), "cut at {cut}");
    }
    let whole = head(text);
    assert_eq!(whole.headers[WWW_AUTHENTICATE], "Bearer realm=\"x\"");
}

#[test]
fn informational_heads_before_the_answer_are_passed_over() {
    let head = head(
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 307 Temporary Redirect\r\nLocation: /other\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(head.status, 307);
    assert_eq!(head.headers[LOCATION], "/other");
}

#[test]
fn how_a_head_frames_its_body_and_whether_the_connection_is_kept() {
    let table = [
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            Framing::Length(5),
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            Framing::Chunked(Chunk::Size),
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            Framing::Chunked(Chunk::Size),
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            Framing::Chunked(Chunk::Size),
            false,
        ),
        ("HTTP/1.1 200 OK\r\n\r\n", Framing::UntilClose, false),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
            Framing::Length(5),
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            Framing::Length(5),
            true,
        ),
        (
            "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n",
            Framing::Length(5),
            false,
        ),
        (
            "HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n",
            Framing::Length(5),
            true,
        ),
        (
            "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            Framing::Length(0),
            true,
        ),
        (
            "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n",
            Framing::Length(0),
            true,
        ),
    ];
    for (text, framing, reusable) in table {
        let head = head(text);
        assert_eq!(
            (head.framing, head.reusable),
            (framing, reusable),
            "{text:?}"
        );
    }
}

#[test]
fn a_head_that_cannot_be_read_is_refused_saying_why() {
    let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: y\r\n")).collect();
    let long = format!("HTTP/1.1 200 OK\r\nX: {}", "y".repeat(MAX_HEAD + 1));
    let endless = "HTTP/1.1 100 Continue\r\n\r\n".repeat(MAX_HEAD / 20);
    let table = [
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "two different Content-Length",
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "is no length",
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
            "is no length",
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "is no length",
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "Transfer-Encoding 'gzip'",
        ),
        (
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "switched protocols",
        ),
        ("SSH-2.0-OpenSSH_9.6\r\n\r\n", "is not HTTP/1.1"),
        (
            &*format!("HTTP/1.1 200 OK\r\n{many}\r\n"),
            "more than 64 header lines",
        ),
        (&*long, "a head over 65536 bytes"),
        (&*endless, "informational heads (HTTP 1xx) over 65536 bytes"),
    ];
    for (text, says) in table {
        let why = refusal(text);
        assert!(why.contains(says), "{text:.60?}: {why}");
    }
}

#[test]
fn a_body_of_a_length_ends_there_and_leaves_what_follows() {
    for piece in [1, 3, 100] {
        let (body, rest) = body(Framing::Length(5), b"hello HTTP", piece, false).unwrap();
        assert_eq!(&body[..], b"hello", "pieces of {piece}");
        assert!(b" HTTP".starts_with(&rest), "pieces of {piece}: {rest:?}");
    }
}

#[test]
fn a_chunked_body_is_its_chunks_joined_whatever_pieces_it_comes_in() {
    let wire = b"5;name=value\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nnext";
    for piece in 1..wire.len() {
        let (body, rest) = body(Framing::Chunked(Chunk::Size), wire, piece, false)
            .unwrap_or_else(|e| panic!("pieces of {piece}: {e}"));
        assert_eq!(&body[..], b"hello 0123456789", "pieces of {piece}");
        assert!(b"next".starts_with(&rest), "pieces of {piece}: {rest:?}");
    }
}

#[test]
fn a_chunked_body_whose_lines_end_in_bare_line_feeds_is_refused() {
    // Each line ends in CRLF (RFC 9112, 7.1), as hyper held it before: a connection kept for
    // the next call must not be read two ways.
    let table: [(&[u8], &str); 4] = [
        (b"2\nhi\r\n0\r\n\r\n", "gives no size"),
        (b"2\r\nhi\n0\r\n\r\n", "no CRLF where it ends"),
        (b"2\r\nhi\r\n0\r\nX: y\n\r\n", "trailer line"),
        (b"2\r\nhi\r\n0\r\n\n", "trailer line"),
    ];
    for (bytes, says) in table {
        for piece in [1, 2, bytes.len()] {
            let why = body(Framing::Chunked(Chunk::Size), bytes, piece, true).unwrap_err();
            assert!(why.contains(says), "{bytes:?} in pieces of {piece}: {why}");
        }
    }
}

#[test]
fn a_body_to_the_connections_end_is_all_that_came() {
    let (body, _) = body(Framing::UntilClose, b"all of it", 4, true).unwrap();
    assert_eq!(&body[..], b"all of it");
}

#[test]
fn a_body_cut_short_or_malformed_is_refused_saying_why() {
    let long_extension = [&b"5;"[..], &[b'x'; MAX_CHUNK_LINE]].concat();
    let table: [(Framing, &[u8], &str); 9] = [
        (
            Framing::Length(10),
            b"short",
            "closed the connection before the end",
        ),
        (
            Framing::Chunked(Chunk::Size),
            b"5\r\nhel",
            "closed the connection before the end",
        ),
        (Framing::Chunked(Chunk::Size), b"zz\r\n", "gives no size"),
        (Framing::Chunked(Chunk::Size), b"\r\n", "gives no size"),
        (
            Framing::Chunked(Chunk::Size),
            b"11111111111111111\r\n",
            "gives no size",
        ),
        (
            Framing::Chunked(Chunk::Size),
            b"2\r\nhello\r\n",
            "longer than its size says",
        ),
        (
            Framing::Chunked(Chunk::Size),
            &long_extension,
            "size line over 4096 bytes",
        ),
        (Framing::Chunked(Chunk::Size), b"5 5\r\n", "gives no size"),
        (Framing::Chunked(Chunk::Size), b"5\rx\n", "gives no size"),
    ];
    for (framing, bytes, says) in table {
        let why = body(framing, bytes, 7, true).unwrap_err();
        assert!(
            why.contains(says),
            "{:.40?}: {why}",
            String::from_utf8_lossy(bytes)
        );
    }
}

#[test]
fn trailers_that_never_end_are_cut_off_at_their_bound() {
    let mut wire = b"0\r\n".to_vec();
    while wire.len() <= MAX_HEAD + 100 {
        wire.extend_from_slice(b"X-Trailer: yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\r\n");
    }
    let why = body(Framing::Chunked(Chunk::Size), &wire, 4096, false).unwrap_err();
    assert!(why.contains("trailers over 65536 bytes"), "{why}");
}
