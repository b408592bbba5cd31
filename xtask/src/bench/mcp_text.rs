//! What the `mcp_servers` bench takes and prints: the servers of its plan, and its lines
//! read back (each server's best round and each round's CPU, its own process's CPU, its
//! instructions per call, the fan-outs).

use std::collections::BTreeMap;

/// The first number after `marker` in `text`.
pub(super) fn number_after(text: &str, marker: &str) -> Option<f64> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits.parse().ok()
}

/// Per server, its best round: (calls/s, µs of server CPU per call, idle MiB).
pub(super) type Best = BTreeMap<String, (f64, f64, f64)>;

/// The `best NAME: C calls/s, U us CPU/call, idle R MiB` lines of the `mcp_servers` bench.
pub(super) fn mcp_best(text: &str) -> Best {
    text.lines()
        .filter_map(|l| l.strip_prefix("best "))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            Some((
                name.to_string(),
                (
                    number_after(rest, "")?,
                    number_after(rest, "calls/s,")?,
                    number_after(rest, "idle")?,
                ),
            ))
        })
        .collect()
}

/// Per server, each round's CPU per call (µs, server and the servers it starts), by round.
pub(super) type Rounds = BTreeMap<String, BTreeMap<usize, f64>>;

/// The `round R NAME: C calls/s, server CPU U us/call (…)` lines of the `mcp_servers`
/// bench: the rounds of all servers are interleaved, so two servers' figures of one round
/// were taken within seconds of each other, on the same evening's machine.
pub(super) fn mcp_rounds(text: &str) -> Rounds {
    let mut rounds = Rounds::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("round ")) {
        let Some((round, rest)) = line.split_once(' ') else {
            continue;
        };
        let Some((name, rest)) = rest.split_once(':') else {
            continue;
        };
        if let (Ok(round), Some(cpu)) = (round.parse(), number_after(rest, "server CPU")) {
            rounds
                .entry(name.to_string())
                .or_default()
                .insert(round, cpu);
        }
    }
    rounds
}

/// One server of the `mcp_servers` bench's plan.
pub(super) fn server(
    name: &str,
    tool: &str,
    arguments: serde_json::Value,
    command: Vec<String>,
) -> serde_json::Value {
    serde_json::json!({"name": name, "tool": tool, "arguments": arguments, "command": command})
}

/// A `serve --mcp` command made `serve --http` on the port the bench fills in.
pub(super) fn over_http(stdio: Vec<String>) -> Vec<String> {
    stdio
        .into_iter()
        .flat_map(|arg| match arg.as_str() {
            "--mcp" => vec!["--http".to_string(), "127.0.0.1:{port}".to_string()],
            _ => vec![arg],
        })
        .collect()
}

/// What the `mcp_servers` bench measured: each server's best round, its instructions per
/// call, and its own process's CPU per call (without the servers it starts).
#[derive(Default)]
pub(super) struct Measured {
    pub(super) best: Best,
    pub(super) rounds: Rounds,
    pub(super) counts: BTreeMap<String, f64>,
    pub(super) own: BTreeMap<String, f64>,
    /// Per fan-out: seconds, most threads, threads before.
    pub(super) fan_out: BTreeMap<String, (f64, f64, f64)>,
    /// How long setting up the peer gateway ContextForge took (s), when it could be.
    pub(super) contextforge_setup: Option<f64>,
    /// Per peer whose rounds had failed calls: the last such round, as the bench said it.
    pub(super) failed: BTreeMap<String, String>,
}

/// The `failed NAME: N of M calls failed in round R` lines: per server, the last.
pub(super) fn failures(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("failed "))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            Some((name.to_string(), rest.trim().to_string()))
        })
        .collect()
}

/// The `instructions NAME: N per call` lines of the `mcp_servers` bench.
pub(super) fn mcp_instructions(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("instructions "))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            Some((name.to_string(), number_after(rest, "")?))
        })
        .collect()
}

/// The `best NAME: … own O us CPU/call` figures: each server's own process alone.
pub(super) fn own_cpu(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("best "))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let own = rest.split("own ").nth(1)?;
            let digits: String = own
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            Some((name.to_string(), digits.parse().ok()?))
        })
        .collect()
}

/// The `fan-out NAME: N calls in S s, at most T threads (B before)` lines: per fan-out,
/// (seconds, most threads, threads before).
pub(super) fn fan_outs(text: &str) -> BTreeMap<String, (f64, f64, f64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("fan-out "))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let number = |after: &str| -> Option<f64> {
                let tail = rest.split(after).nth(1)?;
                let digits: String = tail
                    .trim_start()
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                digits.parse().ok()
            };
            Some((
                name.to_string(),
                (number("calls in")?, number("at most")?, number("(")?),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_lines_of_the_mcp_servers_bench_parse() {
        let text = "round 0 toolhost: 29000 calls/s, server CPU 33.0 us/call, idle RSS 13.0 MiB\n\
                    best toolhost: 29821 calls/s, 31.00 us CPU/call, idle 13.2 MiB\n\
                    best everything: 15425 calls/s, 71.50 us CPU/call, idle 74.2 MiB";
        let best = mcp_best(text);
        assert_eq!(best["toolhost"], (29821.0, 31.0, 13.2));
        assert_eq!(best["everything"], (15425.0, 71.5, 74.2));
    }

    #[test]
    fn each_rounds_cpu_is_read_by_server_and_round() {
        let text = "round 0 toolhost: 29000 calls/s, server CPU 33.0 us/call (33.0 its own process), idle RSS 13.0 MiB\n\
                    round 0 gateway: 15000 calls/s, server CPU 70.5 us/call (40.0 its own process), idle RSS 15.0 MiB\n\
                    round 1 toolhost: 30000 calls/s, server CPU 31.0 us/call (31.0 its own process), idle RSS 13.0 MiB\n\
                    round x toolhost: 1 calls/s, server CPU 1.0 us/call\n\
                    best toolhost: 30000 calls/s, 31.00 us CPU/call, idle 13.2 MiB";
        let rounds = mcp_rounds(text);
        assert_eq!(rounds["toolhost"], BTreeMap::from([(0, 33.0), (1, 31.0)]));
        assert_eq!(rounds["gateway"], BTreeMap::from([(0, 70.5)]));
        assert_eq!(rounds.len(), 2);
    }
}
