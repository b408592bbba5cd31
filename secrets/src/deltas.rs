//! Live output ([`Deltas`]): chunks as a command prints them, shown redacted. A secret may
//! arrive in two chunks, so what could still be the start of one is held back until the
//! rest comes: the line not yet ended, and a private key's block until its end line.

use crate::scan::{Finding, Scanner};

/// The most held back at once; past it the older part is shown (scanned on its own) so a
/// command that prints a long line without an end is still seen live.
const MAX_HELD: usize = 256 * 1024;

/// One call's live output on its way out.
#[derive(Debug, Default)]
pub struct Deltas {
    pending: String,
}

impl Deltas {
    /// Takes a chunk; returns what may be shown now, redacted, with what was found in it.
    pub fn push(&mut self, scanner: &Scanner, chunk: &str) -> (String, Vec<Finding>) {
        self.pending.push_str(chunk);
        let cut = self.cut();
        let shown: String = self.pending.drain(..cut).collect();
        redacted(scanner, shown)
    }

    /// Whether nothing is held back (so [`Deltas::finish`] would give nothing).
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The call ended: the rest, redacted.
    pub fn finish(&mut self, scanner: &Scanner) -> (String, Vec<Finding>) {
        let rest = std::mem::take(&mut self.pending);
        redacted(scanner, rest)
    }

    /// How much of the pending text may be shown: up to its last line end, and not a
    /// private key's block that has not ended.
    fn cut(&self) -> usize {
        let text = &self.pending;
        let mut cut = text.rfind(['\n', '\r']).map_or(0, |at| at + 1);
        if let Some(open) = open_key(text, cut) {
            cut = cut.min(open);
        }
        if text.len() - cut > MAX_HELD {
            // Show all but the last stretch, cut where no token goes on across it.
            let mut at = text.len() - 4096;
            while at > 0 && !text.is_char_boundary(at) {
                at -= 1;
            }
            cut = text[..at]
                .rfind(|c: char| c.is_whitespace() || c == ',' || c == ';')
                .map_or(at, |w| w + 1);
        }
        cut
    }
}

/// Where the line of the first private key's `BEGIN` starts whose block does not end
/// before `cut` (its `END` marker not come yet, or not whole within what would be shown).
fn open_key(text: &str, cut: usize) -> Option<usize> {
    let mut at = 0;
    while let Some(found) = text[at..].find("-----BEGIN") {
        let begin = at + found;
        let line_end = text[begin..].find('\n').map_or(text.len(), |n| begin + n);
        if !text[begin..line_end].contains("PRIVATE KEY") {
            at = begin + 1;
            continue;
        }
        let ends = text[begin..].find("-----END").and_then(|e| {
            let after = begin + e + 8;
            text[after..].find("-----").map(|d| after + d + 5)
        });
        match ends {
            Some(end) if end <= cut => at = end,
            _ => return Some(text[..begin].rfind('\n').map_or(0, |n| n + 1)),
        }
    }
    None
}

fn redacted(scanner: &Scanner, text: String) -> (String, Vec<Finding>) {
    match scanner.redact(&text) {
        Some((out, found)) => (out, found),
        None => (text, Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the fuzz target: a second `-----BEGIN` on a private key's `BEGIN` line
    /// (without `PRIVATE KEY` after it) let the block out before its end came.
    #[test]
    fn a_key_block_is_held_whole_whatever_follows_its_begin_marker() {
        let scanner = Scanner::builtin();
        let key = "-----BEGIN OPENSSH PRIVATE KEY------BEGIN X---b3BlbnNzaC1rZXktdjE\nAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n";
        let (head, tail) = key.split_at(70);
        let mut deltas = Deltas::default();
        let mut shown = deltas.push(&scanner, head).0;
        assert_eq!(shown, "", "nothing of the block before its end");
        shown.push_str(&deltas.push(&scanner, tail).0);
        shown.push_str(&deltas.finish(&scanner).0);
        assert_eq!(shown, "[REDACTED private-key]\n");
    }

    #[test]
    fn a_progress_line_ended_by_a_carriage_return_is_shown_at_once() {
        let scanner = Scanner::builtin();
        let mut deltas = Deltas::default();
        assert_eq!(deltas.push(&scanner, "45%\r").0, "45%\r");
        assert_eq!(deltas.push(&scanner, "50% (no end yet)").0, "");
        assert_eq!(deltas.finish(&scanner).0, "50% (no end yet)");
    }
}
