//! The scale-out figures of `cargo xtask bench`: toolhost's `scale_out` bench (three
//! instances, each with its own memory and then sharing a real Redis) read into table
//! rows, each beside its floor.

use super::table::Row;

fn after(text: &str, marker: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains(marker))?;
    let rest = &line[line.find(marker)? + marker.len()..];
    rest.split_whitespace()
        .next()?
        .trim_end_matches(',')
        .parse()
        .ok()
}

/// The rows of the bench's output `text`; `None` where a figure is missing.
pub fn rows(text: &str) -> Vec<Row> {
    if let Some(line) = text.lines().find(|l| l.starts_with("scale-out: skipped")) {
        return vec![Row {
            figure: "scale-out (3 instances, Redis)".into(),
            measured: line.trim_start_matches("scale-out: ").into(),
            target: "measured".into(),
            pass: Some(false),
        }];
    }
    let mut rows = Vec::new();
    let (memory, redis) = (after(text, "memory calls/s"), after(text, "redis calls/s"));
    rows.push(match (redis, memory) {
        (Some(r), Some(m)) => Row {
            figure: "3 instances sharing Redis: read_file calls/s (6 keep-alive clients, 2026-07-28) vs the same 3 each with its own memory".into(),
            measured: format!("{r:.0} vs {m:.0}: {:.2}×", r / m),
            target: "≥ 0.8×".into(),
            pass: Some(r / m >= 0.8),
        },
        _ => super::table::missing("scale-out calls/s"),
    });
    let read = after(text, "store commands per read_file call");
    rows.push(Row {
        figure: "Redis commands per call that needs no shared state (read_file, allowed by the policy; Redis's own count, less the instances' idle looks)".into(),
        measured: read.map_or_else(|| "not measured".into(), |n| format!("{n:.3}")),
        target: "0".into(),
        pass: read.map(|n| n < 0.01),
    });
    let write = after(text, "store commands per confirmed write");
    rows.push(Row {
        figure: "Redis commands per confirmed write: the question at one instance, the retry at another (two requests: the grant looked up and the store's generation read at the question; the nonce taken and the generation read, pipelined, at the retry)".into(),
        measured: write.map_or_else(|| "not measured".into(), |n| format!("{n:.2}")),
        target: "≤ 2 per request".into(),
        pass: write.map(|n| n <= 4.05),
    });
    let once = text
        .lines()
        .find_map(|l| l.split("exactly once under load ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|ratio| ratio.split_once('/'))
        .and_then(|(ran, of)| Some((ran.parse::<u32>().ok()?, of.parse::<u32>().ok()?)));
    rows.push(match once {
        Some((ran, of)) => Row {
            figure: "confirmed writes whose retry went to all 3 instances at once, under that load"
                .into(),
            measured: format!("{ran} of {of} ran exactly once"),
            target: "all".into(),
            pass: Some(ran == of),
        },
        None => super::table::missing("exactly once under load"),
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_output_becomes_rows_with_verdicts() {
        let text = "scale-out: memory calls/s 13576\nscale-out: redis calls/s 13182\n\
                    scale-out: store commands per read_file call 0.000 (6 commands for 39558 calls; idle 1.5/s)\n\
                    scale-out: store commands per confirmed write 3.99 (two requests)\n\
                    scale-out: exactly once under load 30/30 writes ran once (30 retries ran, 60 refused)";
        let all = rows(text);
        assert_eq!(all.len(), 4);
        assert!(
            all.iter().all(|r| r.pass == Some(true)),
            "{:?}",
            all.iter().map(|r| &r.measured).collect::<Vec<_>>()
        );
        assert!(all[0].measured.contains("0.97×"), "{}", all[0].measured);
        let bad = rows("scale-out: exactly once under load 29/30 writes");
        assert_eq!(bad.last().map(|r| r.pass), Some(Some(false)));
        let skipped = rows("scale-out: skipped: no redis-server");
        assert_eq!(skipped[0].pass, Some(false));
    }
}
