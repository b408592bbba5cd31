//! The [`Scanner`]: rules compiled once; each text searched for all their keywords in one
//! pass, and a rule's pattern run only on the stretch around its keywords.

use std::cell::RefCell;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::Regex;
use serde::Deserialize;

use crate::SecretsError;

/// The rules that come with toolhost (`src/rules.toml`).
const BUILTIN: &str = include_str!("rules.toml");

/// How far before its keyword a match may start (a secret's name before its value, a URL's
/// scheme before `://`), at most: the line's start, or this many bytes back.
const REACH_BACK: usize = 512;

/// How far past its keyword a match may end, unless the rule says (`span`): the tokens
/// and assignments are found on their keyword's line.
const DEFAULT_SPAN: usize = 512;

/// The most of its capacity a thread keeps for the lowercased copy of the texts it scans
/// ([`LOWER`]): a larger text's copy is let go after its scan.
const KEEP_LOWER: usize = 64 * 1024;

thread_local! {
    /// The text being scanned, lowercased for the keywords found in any case: kept
    /// between scans on the thread, so that scanning a result allocates nothing.
    static LOWER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A rule as written (in `rules.toml`, or in the config's `[[secrets.rules]]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// The kind of secret, named in redactions (`[REDACTED id]`) and reports.
    pub id: String,
    /// At least one must occur for the rule to be tried: as written, or in any case when
    /// the pattern starts with `(?i`.
    pub keywords: Vec<String>,
    /// A regular expression (Rust's `regex` syntax); its group `secret`, when it has one,
    /// is what is redacted, else the whole match.
    pub pattern: String,
    /// The bits of entropy per character the secret must have (Shannon, over its bytes).
    #[serde(default)]
    pub min_entropy: Option<f64>,
    /// How far past a keyword a match may reach, in bytes (default 512).
    #[serde(default)]
    pub span: Option<usize>,
    /// Whether a match may go on past its keyword's line (a private key's block); else
    /// it ends there.
    #[serde(default)]
    pub multiline: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    rule: Vec<RuleSpec>,
}

#[derive(Debug)]
struct Rule {
    id: Arc<str>,
    pattern: Regex,
    /// The index of the `secret` group, if the pattern has one.
    group: Option<usize>,
    min_entropy: Option<f64>,
    span: usize,
    multiline: bool,
}

/// The built-in rules as written.
fn builtin_specs() -> Result<Vec<RuleSpec>, SecretsError> {
    let file: RuleFile =
        toml::from_str(BUILTIN).map_err(|e| SecretsError::Builtin(e.to_string()))?;
    Ok(file.rule)
}

/// The rule `specs[index]` compiled (its pattern, and the index of its `secret` group),
/// or why it cannot be used.
fn compile(specs: &[&RuleSpec], index: usize) -> Result<(Regex, Option<usize>), SecretsError> {
    let spec = specs[index];
    let bad = |why: String| SecretsError::Rule {
        id: spec.id.clone(),
        why,
    };
    if spec.id.trim().is_empty() {
        return Err(bad("its id is empty".into()));
    }
    if specs[..index].iter().any(|s| s.id == spec.id) {
        return Err(bad("another rule has this id (a rule of the config may not replace a built-in one: give it an id of its own)".into()));
    }
    if spec.keywords.is_empty() || spec.keywords.iter().any(|k| k.is_empty()) {
        return Err(bad(
            "it needs at least one keyword, none of them empty (a rule is tried only where one occurs)".into(),
        ));
    }
    if let Some(e) = spec.min_entropy
        && !(0.0..=8.0).contains(&e)
    {
        return Err(bad(format!(
            "min_entropy {e} is not between 0 and 8 bits per character"
        )));
    }
    let pattern =
        Regex::new(&spec.pattern).map_err(|e| bad(format!("its pattern does not compile: {e}")))?;
    let group = pattern.capture_names().position(|n| n == Some("secret"));
    Ok((pattern, group))
}

/// One secret found: its kind and where it is (byte offsets into the text scanned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The rule's id.
    pub kind: Arc<str>,
    /// Where the secret starts.
    pub start: usize,
    /// Where it ends (exclusive).
    pub end: usize,
}

impl Finding {
    /// The line (from 1) of `text` the secret starts on.
    pub fn line(&self, text: &str) -> usize {
        1 + text.as_bytes()[..self.start.min(text.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
    }
}

/// Finds and redacts secrets. Cheap to share (`Arc` it); scanning takes `&self`.
#[derive(Debug)]
pub struct Scanner {
    rules: Vec<Rule>,
    /// The keywords of the rules whose pattern is case-sensitive, searched for as written;
    /// and those of the rules whose pattern is not (`(?i…`), lowercased and searched for
    /// in the text lowercased (the same offsets: only ASCII letters change). Both run on
    /// SIMD prefilters, where a search in any case took 2.3 ms a MB on its automaton.
    keywords: [Keywords; 2],
    /// The longest span of a rule that stays on its keyword's line.
    reach: usize,
    /// The length of the shortest keyword: a shorter text holds none.
    shortest: usize,
}

/// One search for keywords, and the rules each keyword starts: its own, and those of
/// every keyword it contains (the search reports the longest keyword at a place, not
/// those inside it).
#[derive(Debug)]
struct Keywords {
    search: Option<AhoCorasick>,
    rules: Vec<Vec<usize>>,
}

impl Keywords {
    fn new(words: &[(String, usize)], any_case: bool) -> Result<Keywords, SecretsError> {
        if words.is_empty() {
            return Ok(Keywords {
                search: None,
                rules: Vec::new(),
            });
        }
        let fold = |w: &str| {
            if any_case {
                w.to_ascii_lowercase()
            } else {
                w.to_string()
            }
        };
        let rules = words
            .iter()
            .map(|(k, _)| {
                let k = fold(k);
                let mut starts: Vec<usize> = words
                    .iter()
                    .filter(|(inner, _)| k.contains(fold(inner).as_str()))
                    .map(|&(_, rule)| rule)
                    .collect();
                starts.sort_unstable();
                starts.dedup();
                starts
            })
            .collect();
        let search = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(words.iter().map(|(k, _)| fold(k)))
            .map_err(|e| SecretsError::Builtin(format!("the rules' keywords: {e}")))?;
        Ok(Keywords {
            search: Some(search),
            rules,
        })
    }
}

impl Scanner {
    /// The rules that come with toolhost.
    pub fn builtin() -> Scanner {
        // The built-in rules are tested (every one compiles and finds its samples).
        Scanner::with(&[]).unwrap_or_else(|e| unreachable!("the built-in rules: {e}"))
    }

    /// The built-in rules, made once per process and shared (making them takes about
    /// 14 ms: their patterns compiled).
    pub fn shared() -> std::sync::Arc<Scanner> {
        static SHARED: std::sync::OnceLock<std::sync::Arc<Scanner>> = std::sync::OnceLock::new();
        SHARED
            .get_or_init(|| std::sync::Arc::new(Scanner::builtin()))
            .clone()
    }

    /// Whether `extra` (a user's rules) can be used beside the built-in ones, without
    /// compiling the built-in ones: what [`Scanner::with`] would refuse, it refuses.
    pub fn check(extra: &[RuleSpec]) -> Result<(), SecretsError> {
        let builtin = builtin_specs()?;
        let specs: Vec<&RuleSpec> = builtin.iter().chain(extra).collect();
        for index in builtin.len()..specs.len() {
            compile(&specs, index)?;
        }
        Ok(())
    }

    /// The built-in rules followed by `extra` (a user's). A rule that does not compile,
    /// has no keyword, or reuses an id is refused, naming it.
    pub fn with(extra: &[RuleSpec]) -> Result<Scanner, SecretsError> {
        let builtin = builtin_specs()?;
        let specs: Vec<&RuleSpec> = builtin.iter().chain(extra).collect();
        let mut rules = Vec::with_capacity(specs.len());
        let mut exact: Vec<(String, usize)> = Vec::new();
        let mut any_case: Vec<(String, usize)> = Vec::new();
        for (index, spec) in specs.iter().enumerate() {
            let (pattern, group) = compile(&specs, index)?;
            let words = if spec.pattern.starts_with("(?i") {
                &mut any_case
            } else {
                &mut exact
            };
            words.extend(spec.keywords.iter().map(|k| (k.clone(), index)));
            rules.push(Rule {
                id: spec.id.as_str().into(),
                pattern,
                group,
                min_entropy: spec.min_entropy,
                span: spec.span.unwrap_or(DEFAULT_SPAN).max(1),
                multiline: spec.multiline,
            });
        }
        let reach = rules
            .iter()
            .filter(|r| !r.multiline)
            .map(|r| r.span)
            .max()
            .unwrap_or(DEFAULT_SPAN);
        let shortest = specs
            .iter()
            .flat_map(|s| &s.keywords)
            .map(String::len)
            .min()
            .unwrap_or(0);
        Ok(Scanner {
            rules,
            keywords: [
                Keywords::new(&exact, false)?,
                Keywords::new(&any_case, true)?,
            ],
            reach,
            shortest,
        })
    }

    /// The kinds of secret it finds, in the order its rules are tried.
    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| &*r.id)
    }

    /// Every secret in `text`, in order, none overlapping another (where two rules find
    /// the same secret, the one listed first names it).
    pub fn find(&self, text: &str) -> Vec<Finding> {
        // Per rule, the stretches of text to run its pattern on: around each keyword,
        // merged where they meet. Made at the first keyword found: most texts hold none.
        let mut stretches: Vec<Vec<(usize, usize)>> = Vec::new();
        if text.len() < self.shortest {
            return Vec::new();
        }
        self.stretches(&self.keywords[0], text.as_bytes(), text, &mut stretches);
        if self.keywords[1].search.is_some() {
            LOWER.with(|kept| {
                // The thread's buffer, or a fresh one should a scan already hold it.
                let mut kept = kept.try_borrow_mut();
                let mut fresh = Vec::new();
                let lower = kept.as_deref_mut().unwrap_or(&mut fresh);
                lowercase_into(lower, text.as_bytes());
                self.stretches(&self.keywords[1], lower, text, &mut stretches);
                if lower.capacity() > KEEP_LOWER {
                    *lower = Vec::new();
                }
            });
        }
        if stretches.is_empty() {
            return Vec::new();
        }
        let mut found = Vec::new();
        for (index, list) in stretches.iter().enumerate() {
            let rule = &self.rules[index];
            for &(start, end) in list {
                let haystack = &text[..end];
                let mut at = start;
                while at < end {
                    let Some(caps) = rule.pattern.captures_at(haystack, at) else {
                        break;
                    };
                    let whole = caps.get(0).map_or((at, at), |m| (m.start(), m.end()));
                    let secret = rule
                        .group
                        .and_then(|g| caps.get(g))
                        .map_or(whole, |m| (m.start(), m.end()));
                    at = if whole.1 > whole.0 {
                        whole.1
                    } else {
                        ceil(text, whole.1 + 1)
                    };
                    if secret.1 == secret.0 {
                        continue;
                    }
                    if rule
                        .min_entropy
                        .is_some_and(|min| entropy(&text[secret.0..secret.1]) < min)
                    {
                        continue;
                    }
                    found.push((index, secret.0, secret.1));
                }
            }
        }
        // First by where it starts, then the longest, then the rule listed first.
        found.sort_by_key(|&(index, start, end)| (start, std::cmp::Reverse(end), index));
        let mut kept: Vec<Finding> = Vec::with_capacity(found.len());
        for (index, start, end) in found {
            if kept.last().is_some_and(|k| start < k.end) {
                continue;
            }
            kept.push(Finding {
                kind: self.rules[index].id.clone(),
                start,
                end,
            });
        }
        kept
    }

    /// Adds to `stretches` (per rule) the places of `text` around each of `keywords`
    /// found in `haystack`: `text` itself, or `text` lowercased (the same offsets).
    fn stretches(
        &self,
        keywords: &Keywords,
        haystack: &[u8],
        text: &str,
        stretches: &mut Vec<Vec<(usize, usize)>>,
    ) {
        let Some(search) = &keywords.search else {
            return;
        };
        // The line of the last hit, when its end was found: the next hit is often on it.
        let mut line = (0usize, 0usize);
        for hit in search.find_iter(haystack) {
            let (start, line_end) = if hit.start() >= line.0 && hit.end() <= line.1 {
                line
            } else {
                let back = floor(text, hit.start().saturating_sub(REACH_BACK));
                let start = memchr::memrchr(b'\n', &text.as_bytes()[back..hit.start()])
                    .map_or(back, |at| back + at + 1);
                // No rule that stays on its line reaches further than this.
                let ahead = (hit.end() + self.reach).min(text.len());
                match memchr::memchr(b'\n', &text.as_bytes()[hit.end()..ahead]) {
                    Some(at) => {
                        line = (start, hit.end() + at);
                        line
                    }
                    // Its end is further than any rule reaches from this hit: not
                    // kept for the next, which may reach further.
                    None => {
                        line = (0, 0);
                        (start, ahead)
                    }
                }
            };
            if stretches.is_empty() {
                *stretches = vec![Vec::new(); self.rules.len()];
            }
            for &index in &keywords.rules[hit.pattern().as_usize()] {
                let rule = &self.rules[index];
                let mut end = hit.end().saturating_add(rule.span);
                if !rule.multiline {
                    end = end.min(line_end);
                }
                let end = ceil(text, end);
                let list = &mut stretches[index];
                match list.last_mut() {
                    Some(last) if start <= last.1 => last.1 = last.1.max(end),
                    _ => list.push((start, end)),
                }
            }
        }
    }

    /// `text` with every secret replaced by `[REDACTED kind]`, and what was found; `None`
    /// when there was nothing (the text is then passed on as it is).
    pub fn redact(&self, text: &str) -> Option<(String, Vec<Finding>)> {
        let found = self.find(text);
        if found.is_empty() {
            return None;
        }
        Some((replaced(text, &found), found))
    }
}

/// `text` with its ASCII letters lowercased, into `out` (emptied first): copied whole, then
/// lowercased eight bytes at a time, as integers. A loop over bytes is fast only where the
/// optimizer vectorizes it, which the shipped build (whole-program, optimized for size)
/// does not: there it took 41,000 instructions for 4 KB, this about 5,000 in any build.
fn lowercase_into(out: &mut Vec<u8>, text: &[u8]) {
    out.clear();
    out.extend_from_slice(text);
    let mut eights = out.chunks_exact_mut(8);
    for eight in &mut eights {
        let mut x = [0u8; 8];
        x.copy_from_slice(eight);
        eight.copy_from_slice(&lowercase8(u64::from_le_bytes(x)).to_le_bytes());
    }
    eights.into_remainder().make_ascii_lowercase();
}

/// The eight bytes of `x` with each ASCII capital made small; every other byte (a UTF-8
/// sequence's included) as it is.
fn lowercase8(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = ONES * 0x80;
    // Each byte's low seven bits, plus an offset that sets its high bit from `A` on, and
    // another from past `Z` on (no byte carries into the next: at most 0x7f + 0x3f).
    let low = x & !HIGH;
    let from_a = low + ONES * (0x80 - u64::from(b'A'));
    let past_z = low + ONES * (0x80 - u64::from(b'Z') - 1);
    let capitals = from_a & !past_z & !x & HIGH;
    x | (capitals >> 2)
}

/// `text` with each of `found` (in order, not overlapping) replaced by its marker.
pub(crate) fn replaced(text: &str, found: &[Finding]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in found {
        out.push_str(&text[at..f.start]);
        out.push_str("[REDACTED ");
        out.push_str(&f.kind);
        out.push(']');
        at = f.end;
    }
    out.push_str(&text[at..]);
    out
}

/// Shannon entropy of `s`'s bytes, in bits per byte.
pub fn entropy(s: &str) -> f64 {
    let mut counts = [0u32; 256];
    for b in s.bytes() {
        counts[b as usize] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

/// The nearest char boundary of `text` at or before `at`.
fn floor(text: &str, mut at: usize) -> usize {
    while at > 0 && !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// The nearest char boundary of `text` at or after `at` (its length at most).
fn ceil(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while at < text.len() && !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, keywords: &[&str], pattern: &str) -> RuleSpec {
        RuleSpec {
            id: id.into(),
            keywords: keywords.iter().map(|k| k.to_string()).collect(),
            pattern: pattern.into(),
            min_entropy: None,
            span: None,
            multiline: false,
        }
    }

    #[test]
    fn a_rule_of_the_users_finds_its_secret() {
        let s = Scanner::with(&[rule("acme-key", &["acme_"], r"\bacme_[0-9a-f]{12}\b")]).unwrap();
        let (text, found) = s.redact("key: acme_0123456789ab.").unwrap();
        assert_eq!(text, "key: [REDACTED acme-key].");
        assert_eq!(found[0].line("key"), 1);
    }

    #[test]
    fn a_rule_that_cannot_be_used_is_refused_naming_it_and_why() {
        for (spec, says) in [
            (rule("x", &["x"], "("), "does not compile"),
            (rule("x", &[], "x"), "at least one keyword"),
            (rule("jwt", &["x"], "x"), "another rule has this id"),
            (rule(" ", &["x"], "x"), "its id is empty"),
            (
                RuleSpec {
                    min_entropy: Some(9.0),
                    ..rule("x", &["x"], "x")
                },
                "not between 0 and 8",
            ),
        ] {
            let e = Scanner::with(&[spec]).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("[[secrets.rules]]"), "{e}");
        }
    }

    #[test]
    fn where_two_rules_find_one_secret_the_first_listed_names_it() {
        let s = Scanner::builtin();
        let found = s.find("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n");
        assert_eq!(found.len(), 1);
        assert_eq!(&*found[0].kind, "aws-secret-access-key");
    }

    /// Every kind of each token is found (the corpus has one kind of each), and so is the
    /// secret of a text that is nothing else.
    #[test]
    fn every_kind_of_a_token_is_found() {
        let s = Scanner::builtin();
        let tail = "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7dEf0hIj3kLm6nOp9q";
        for (text, kind) in [
            (format!("xoxb-{}", &tail[..24]), "slack-token"),
            (format!("xoxp-{}", &tail[..24]), "slack-token"),
            (format!("xoxe.xoxp-{}", &tail[..24]), "slack-token"),
            (format!("glpat-{}", &tail[..20]), "gitlab-token"),
            (format!("glptt-{}", &tail[..20]), "gitlab-token"),
            (format!("sk_live_{}", &tail[..24]), "stripe-key"),
            (format!("rk_test_{}", &tail[..24]), "stripe-key"),
            (format!("sk-svcacct-{}", &tail[..44]), "openai-api-key"),
            (format!("sk-admin-{}", &tail[..44]), "openai-api-key"),
            (format!("sk-ant-api03-{}", &tail[..40]), "anthropic-api-key"),
            (
                format!("AccountKey={}==", &tail[..44]),
                "azure-connection-string",
            ),
            (
                format!("SharedAccessKey={}=", &tail[..44]),
                "azure-connection-string",
            ),
        ] {
            let line = format!("the value: {text}\n");
            let found = s.find(&line);
            assert_eq!(found.len(), 1, "{line}");
            assert_eq!(&*found[0].kind, kind, "{line}");
            assert!(s.find(&text).len() == 1, "{text} alone");
        }
    }

    #[test]
    fn lowercasing_eight_bytes_at_a_time_changes_only_ascii_capitals() {
        let every: Vec<u8> = (0..=255u8).collect();
        for text in [
            &every[..],
            "ÀÉ Straße MIXED case @[`{ 0-9 Z".as_bytes(),
            b"",
            b"AB",
        ] {
            for skip in 0..8.min(text.len() + 1) {
                let text = &text[skip..];
                let mut out = vec![7; 3];
                lowercase_into(&mut out, text);
                assert_eq!(out, text.to_ascii_lowercase(), "{text:?}");
            }
        }
    }

    #[test]
    fn a_text_shorter_than_every_keyword_holds_no_secret() {
        let s = Scanner::builtin();
        assert_eq!(s.shortest, 3);
        for text in ["", "ok", "é"] {
            assert!(s.find(text).is_empty(), "{text:?}");
        }
    }

    #[test]
    fn text_in_any_script_is_scanned_without_splitting_a_character() {
        let s = Scanner::builtin();
        let text = format!("{} password: \"Zürich-Straße-42\" ✓", "é".repeat(600));
        let (out, _) = s.redact(&text).unwrap();
        assert!(
            out.ends_with("password: \"[REDACTED password-assignment]\" ✓"),
            "{out}"
        );
    }
}

#[cfg(test)]
mod long_lines {
    use super::*;

    /// On a line longer than any rule's reach (minified JSON), each secret is found whole,
    /// however far along the line it is.
    #[test]
    fn secrets_far_along_one_long_line_are_found_whole() {
        let s = Scanner::builtin();
        let jwt = format!(
            "eyJhbGciOiJIUzI1NiJ9.eyJ{}.{}",
            "a".repeat(3000),
            "b".repeat(43)
        );
        let mut line = String::new();
        for i in 0..40 {
            line.push_str(&format!(
                "{{\"id\":{i},\"token_count\":{i},\"note\":\"{}\"}},",
                "x".repeat(400)
            ));
        }
        line.push_str(&format!("{{\"session\":\"{jwt}\"}}"));
        let (out, found) = s.redact(&line).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            !out.contains(&"a".repeat(100)),
            "a part of the token is left"
        );
    }
}
