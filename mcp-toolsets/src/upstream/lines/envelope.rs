//! What a server's line says, read only as far as toolhost needs: the id (one of
//! toolhost's own calls, `toolhost-N`, or another), and a `tools/call` answer's plain
//! result read straight as rmcp reads it. Written for hostile input: it only ever builds
//! values rmcp's own reading of the same text would (the fuzz target `upstream_lines`
//! checks the two agree), and it depends on nothing of toolhost's, so the fuzz target
//! compiles it from this file.

use std::sync::Arc;

use rmcp::model::{
    CallToolResult, ContentBlock, ErrorData, MetaObject, RequestId, ResultType, ServerResult,
};
use serde::Deserialize;
use serde::de::{Error as _, IgnoredAny};

/// A direct call's answer: the server's result, or its JSON-RPC error.
pub(crate) type Answer = Result<Answered, ErrorData>;

/// A call's result: a tool's result as it came (the usual answer), any other result boxed
/// (a task, a round of `input_required`). An answer is moved from the line that read it to
/// the call that waits for it, and on, several times: a tool result is 200 bytes, rmcp's
/// `ServerResult` 480.
#[derive(Debug)]
pub(crate) enum Answered {
    Tool(CallToolResult),
    /// Any result but a tool's (made only by `From`, which takes a tool result as `Tool`).
    Other(Box<ServerResult>),
}

impl From<ServerResult> for Answered {
    fn from(result: ServerResult) -> Answered {
        match result {
            ServerResult::CallToolResult(result) => Answered::Tool(result),
            other => Answered::Other(Box::new(other)),
        }
    }
}

/// The prefix of the ids of toolhost's own calls.
pub(crate) const ID_PREFIX: &str = "toolhost-";

/// The number of one of toolhost's own calls whose id is `id` (`toolhost-N`, written as
/// toolhost writes it: no sign, no leading zero); `None` for any other id.
pub(crate) fn number_of(id: &str) -> Option<u64> {
    let digits = id.strip_prefix(ID_PREFIX)?;
    if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A line read only as far as its id, its method (whether it is an answer) and the raw
/// text of its result or error.
#[derive(Deserialize)]
pub(crate) struct Envelope<'a> {
    #[serde(borrow)]
    pub(crate) id: Option<Id<'a>>,
    #[serde(borrow)]
    pub(crate) result: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    pub(crate) error: Option<&'a serde_json::value::RawValue>,
    pub(crate) method: Option<IgnoredAny>,
}

impl Envelope<'_> {
    /// The answer it carries to one of toolhost's own `tools/call`s: its result (a plain
    /// tool result read straight, any other result type the general way), or its error;
    /// `None` when it carries neither.
    pub(crate) fn answer(&self) -> Option<Answer> {
        if let Some(result) = self.result {
            return Some(match plain_result(result) {
                Some(plain) => Ok(Answered::Tool(plain)),
                None => serde_json::from_str::<ServerResult>(result.get())
                    .map(Answered::from)
                    .map_err(|e| {
                        ErrorData::internal_error(
                            format!(
                                "the server answered with something that is no MCP result: {e}"
                            ),
                            None,
                        )
                    }),
            });
        }
        let error = self.error?;
        Some(Err(serde_json::from_str::<ErrorData>(error.get())
            .unwrap_or_else(|e| {
                ErrorData::internal_error(
                    format!("the server answered with an error that is no JSON-RPC error: {e}"),
                    None,
                )
            })))
    }
}

/// A message's id as it was written: read without the JSON value (and the string copied
/// twice) that rmcp's `RequestId` is read through.
pub(crate) enum Id<'a> {
    Number(i64),
    String(std::borrow::Cow<'a, str>),
}

impl Id<'_> {
    /// The number of one of toolhost's own calls, if the id is one's.
    pub(crate) fn direct(&self) -> Option<u64> {
        match self {
            Id::String(s) => number_of(s),
            Id::Number(_) => None,
        }
    }

    pub(crate) fn request_id(&self) -> RequestId {
        match self {
            Id::Number(n) => RequestId::Number(*n),
            Id::String(s) => RequestId::String(Arc::from(&**s)),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Id<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Id<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Id<'de>, E> {
                Ok(Id::Number(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Id<'de>, E> {
                i64::try_from(v)
                    .map(Id::Number)
                    .map_err(|_| E::custom("Number too large for i64"))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Id<'de>, E> {
                // `1.0` and `1e2` are integers written in float form (as rmcp reads them).
                if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
                    #[allow(
                        clippy::cast_possible_truncation,
                        reason = "an integer below 2^53, exact in both"
                    )]
                    return Ok(Id::Number(v as i64));
                }
                Err(E::custom("Expected an integer"))
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Id<'de>, E> {
                Ok(Id::String(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Id<'de>, E> {
                Ok(Id::String(std::borrow::Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A `tools/call` result read straight as the plain tool result it is (as rmcp reads
/// `CallToolResult`); `None` for one that is not plain (a task, another result type, or no
/// field of a tool result at all), which is read the general way.
pub(crate) fn plain_result(result: &serde_json::value::RawValue) -> Option<CallToolResult> {
    serde_json::from_str::<Plain>(result.get())
        .ok()?
        .into_result()
}

/// A line that is an answer with a plain tool result, read in one pass: its id and its
/// result. `None` for any other line (a request, a notification, an error, a result of
/// another kind, or a line the one pass cannot read), which is read as an [`Envelope`]:
/// what this takes, that reading takes the same way (the fuzz target `upstream_lines`
/// checks it), without first going over the result to find where it ends.
pub(crate) fn plain_answer(line: &[u8]) -> Option<(Id<'_>, CallToolResult)> {
    // The envelope's fields, each refused when written twice as the envelope refuses it
    // (an `error` beside the result is read past, as the envelope reads past it).
    #[derive(Deserialize)]
    struct PlainAnswer<'a> {
        #[serde(borrow)]
        id: Id<'a>,
        result: Plain,
        #[allow(dead_code, reason = "read only so that one written twice is refused")]
        error: Option<IgnoredAny>,
        method: Option<IgnoredAny>,
    }
    // Checked as text once, not each string as it is read.
    let line = std::str::from_utf8(line).ok()?;
    if let Some(answer) = text_answer(line) {
        return Some(answer);
    }
    let answer: PlainAnswer<'_> = serde_json::from_str(line).ok()?;
    if answer.method.is_some() {
        return None;
    }
    Some((answer.id, answer.result.into_result()?))
}

/// A result read as far as a plain tool result's fields.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Plain {
    result_type: Option<ResultType>,
    content: Option<Vec<Block>>,
    #[serde(default, deserialize_with = "present")]
    structured_content: Option<serde_json::Value>,
    is_error: Option<bool>,
    #[serde(rename = "_meta")]
    meta: Option<MetaObject>,
    task: Option<IgnoredAny>,
}

impl Plain {
    /// The plain tool result it is, or `None`: what the general reading would not take as
    /// a plain result (a task, whose own type comes first, another result type, or no
    /// field of a tool result at all).
    fn into_result(self) -> Option<CallToolResult> {
        if self.task.is_some()
            || self.result_type.as_ref().is_some_and(|t| !t.is_complete())
            || (self.content.is_none()
                && self.structured_content.is_none()
                && self.is_error.is_none())
        {
            return None;
        }
        let mut out = CallToolResult::default();
        out.result_type = self.result_type;
        out.content = self
            .content
            .map(|blocks| blocks.into_iter().map(|b| b.0).collect())
            .unwrap_or_default();
        out.structured_content = self.structured_content;
        out.is_error = self.is_error;
        out.meta = self.meta;
        Some(out)
    }
}

/// A content block, read straight when it is plain text (`type` and `text`, nothing
/// else): as rmcp's tagged `ContentBlock` it would be buffered whole first, then read.
/// Any other block is read as rmcp reads it, from what was read of it.
struct Block(ContentBlock);

/// A key of a content block.
enum BlockKey {
    Type,
    Text,
    Other(String),
}

impl<'de> Deserialize<'de> for BlockKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = BlockKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<BlockKey, E> {
                Ok(match v {
                    "type" => BlockKey::Type,
                    "text" => BlockKey::Text,
                    other => BlockKey::Other(other.to_string()),
                })
            }
        }
        d.deserialize_identifier(Visit)
    }
}

/// A content block's `type`: `text`, or another kept as written.
enum BlockType {
    Text,
    Other(serde_json::Value),
}

impl<'de> Deserialize<'de> for BlockType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        Ok(if value.as_str() == Some("text") {
            BlockType::Text
        } else {
            BlockType::Other(value)
        })
    }
}

impl<'de> Deserialize<'de> for Block {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Block;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a content block")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Block, A::Error> {
                let (mut kind, mut text) = (None, None);
                let mut rest = serde_json::Map::new();
                // A key written twice is refused (rmcp refuses it of the fields it knows):
                // the block is then read the general way, which says so.
                let twice = |key: &str| A::Error::custom(format_args!("duplicate field `{key}`"));
                while let Some(key) = map.next_key::<BlockKey>()? {
                    match key {
                        BlockKey::Type if kind.is_some() => return Err(twice("type")),
                        BlockKey::Type => kind = Some(map.next_value::<BlockType>()?),
                        BlockKey::Text if text.is_some() => return Err(twice("text")),
                        BlockKey::Text => text = Some(map.next_value::<serde_json::Value>()?),
                        BlockKey::Other(key) if rest.contains_key(&key) => {
                            return Err(twice(&key));
                        }
                        BlockKey::Other(key) => {
                            rest.insert(key, map.next_value()?);
                        }
                    }
                }
                let (kind, text) = match (kind, text) {
                    (Some(BlockType::Text), Some(serde_json::Value::String(text)))
                        if rest.is_empty() =>
                    {
                        return Ok(Block(ContentBlock::text(text)));
                    }
                    other => other,
                };
                // Anything else, rebuilt and read the general way.
                match kind {
                    Some(BlockType::Text) => {
                        rest.insert("type".into(), "text".into());
                    }
                    Some(BlockType::Other(kind)) => {
                        rest.insert("type".into(), kind);
                    }
                    None => {}
                }
                if let Some(text) = text {
                    rest.insert("text".into(), text);
                }
                ContentBlock::deserialize(serde_json::Value::Object(rest))
                    .map(Block)
                    .map_err(serde::de::Error::custom)
            }
        }
        d.deserialize_map(Visit)
    }
}

/// A field that is there, `null` included (`Some(Value::Null)`), as rmcp keeps a present
/// `structuredContent: null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

/// The commonest answer of all read by hand: `{"jsonrpc":"2.0","id":"…","result":
/// {"resultType":"complete","content":[{"type":"text","text":"…"}…],"isError":…}}` (with
/// or without its `resultType`), its members in any order,
/// each once, and nothing else (an id that is a number or written with an escape, any other
/// member or block, a number anywhere). What it takes, serde's reading of [`plain_answer`]
/// takes as the same id and result; anything else it leaves to that reading (`None`).
/// serde's reading goes through generic visitors and a value per block's `type`: 4,200
/// instructions for a one-block answer, 2,200 here (callgrind, the gateway's `dist` build).
pub(crate) fn text_answer(line: &str) -> Option<(Id<'_>, CallToolResult)> {
    let mut s = Scan { text: line, at: 0 };
    let (mut id, mut result, mut version) = (None, None, false);
    s.object(|s, key| {
        match key {
            "jsonrpc" if !version => {
                s.literal("2.0")?;
                version = true;
            }
            "id" if id.is_none() => id = Some(s.plain_string()?),
            "result" if result.is_none() => result = Some(s.text_result()?),
            _ => return None,
        }
        Some(())
    })?;
    s.end()?;
    Some((Id::String(std::borrow::Cow::Borrowed(id?)), result?))
}

/// The bytes that end a string written without an escape: its closing quote, an escape,
/// or a control character.
static NOT_PLAIN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// A cursor over a line [`text_answer`] reads: each step says `None` for anything it does
/// not read.
struct Scan<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scan<'a> {
    /// The next byte after JSON's whitespace, not taken.
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while let Some(&b) = bytes.get(self.at) {
            if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                return Some(b);
            }
            self.at += 1;
        }
        None
    }

    /// Takes `byte`, the next one after whitespace.
    fn token(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Takes a `,` (`true`: a member or an element follows) or `close` (`false`).
    fn more(&mut self, close: u8) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.at += 1;
                Some(true)
            }
            b if b == close => {
                self.at += 1;
                Some(false)
            }
            _ => None,
        }
    }

    /// Whether only whitespace is left.
    fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// A string written without an escape, as it is; `None` for one with an escape or a
    /// control character (which JSON refuses in a string).
    fn plain_string(&mut self) -> Option<&'a str> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at + 1;
        let rest = self.text.as_bytes().get(start..)?;
        let len = rest.iter().position(|&b| NOT_PLAIN[usize::from(b)])?;
        if rest[len] != b'"' {
            return None;
        }
        self.at = start + len + 1;
        // Both ends are at an ASCII quote: the slice is whole characters.
        self.text.get(start..start + len)
    }

    /// A string, escapes and all, read as serde reads it.
    fn string(&mut self) -> Option<String> {
        let start = self.at;
        if let Some(plain) = self.plain_string() {
            return Some(plain.to_owned());
        }
        // Escaped: its end found past each escape, then the string read by serde.
        self.at = start;
        self.token(b'"')?;
        let quote = self.at - 1;
        let bytes = self.text.as_bytes();
        loop {
            match *bytes.get(self.at)? {
                b'"' => break,
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
        self.at += 1;
        serde_json::from_str(self.text.get(quote..self.at)?).ok()
    }

    /// An object, each member's value read by `member` (given its key) once the `:` is
    /// taken; `None` as soon as `member` says it.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.token(b'{')?;
        loop {
            let key = self.plain_string()?;
            self.token(b':')?;
            member(self, key)?;
            if !self.more(b'}')? {
                return Some(());
            }
        }
    }

    /// The string `expected`, written without an escape.
    fn literal(&mut self, expected: &str) -> Option<()> {
        (self.plain_string()? == expected).then_some(())
    }

    /// `true` or `false`.
    fn boolean(&mut self) -> Option<bool> {
        self.peek()?;
        let rest = &self.text.as_bytes()[self.at..];
        let (value, len) = if rest.starts_with(b"true") {
            (true, 4)
        } else if rest.starts_with(b"false") {
            (false, 5)
        } else {
            return None;
        };
        self.at += len;
        Some(value)
    }

    /// A result of `content` (text blocks only) and, if it says, `isError` and a
    /// `resultType` of `complete` (as every result of 2026-07-28 says it).
    fn text_result(&mut self) -> Option<CallToolResult> {
        let (mut content, mut is_error, mut result_type) = (None, None, None);
        self.object(|s, key| {
            match key {
                "content" if content.is_none() => content = Some(s.text_blocks()?),
                "isError" if is_error.is_none() => is_error = Some(s.boolean()?),
                "resultType" if result_type.is_none() => {
                    s.literal("complete")?;
                    result_type = Some(ResultType::COMPLETE);
                }
                _ => return None,
            }
            Some(())
        })?;
        // As serde's reading builds it: the `resultType` written, or none.
        let mut out = CallToolResult::default();
        out.result_type = result_type;
        out.content = content?;
        out.is_error = is_error;
        Some(out)
    }

    /// An array of text blocks (`type` and `text`, each once, nothing else).
    fn text_blocks(&mut self) -> Option<Vec<ContentBlock>> {
        self.token(b'[')?;
        // Most answers hold one block: room for it, not for four.
        let mut blocks = Vec::with_capacity(1);
        if self.peek()? == b']' {
            self.at += 1;
            return Some(blocks);
        }
        loop {
            let (mut kind, mut text) = (false, None);
            self.object(|s, key| {
                match key {
                    "type" if !kind => {
                        s.literal("text")?;
                        kind = true;
                    }
                    "text" if text.is_none() => text = Some(s.string()?),
                    _ => return None,
                }
                Some(())
            })?;
            match (kind, text) {
                (true, Some(text)) => blocks.push(ContentBlock::text(text)),
                _ => return None,
            }
            if !self.more(b']')? {
                return Some(blocks);
            }
        }
    }
}
