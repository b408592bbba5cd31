//! The gateway's figures (issue 61): toolhost in front of the MCP servers users mount, each
//! beside the same server alone and beside the bench's bare rmcp proxy in front of it, in
//! the same rounds of the `mcp_servers` bench, under the default configuration (the mounted
//! server in its default sandbox).
//!
//! - `gateway-everything`: `serve --mcp` mounting Node's server-everything, `ev__echo`,
//!   against `everything` alone; and the bench's byte relay in front of the same server
//!   (`gateway-everything-relay`), the floor of any hop there.
//! - `gateway-toolhost`: `serve --mcp` mounting `serve --mcp` (the bare configuration),
//!   `up__read_file`, against `toolhost` alone; and the bench's rmcp proxy in front of the
//!   same server (`gateway-toolhost-rmcp-proxy`), the floor of any gateway.
//! - `gateway-http`: `serve --http` mounting `serve --http` by its URL, stateless calls,
//!   against `toolhost-http` alone; and the bench's byte relay between each client
//!   connection and one of its own to the same server (`gateway-http-relay`), the floor of
//!   any hop over HTTP.
//!
//! Under the default configuration a session runs 4 calls at once (`max_concurrency`), but
//! a mounted server's calls take places under its entry's own `max_concurrency` (64) instead:
//! a gateway passes on the 16 its client has in flight, as the server alone is sent them.
//!
//! Instructions per call are counted for the gateway's own process (callgrind does not
//! follow the server it starts), and for toolhost in front of toolhost once more with the
//! mounted server run under callgrind by the gateway (its report written to a directory of
//! its own): both processes, against the mounted toolhost counted alone. Valgrind has no
//! Landlock, so under it the mounted server runs unconfined (`sandbox = "host"`): its
//! confinement costs at its start, not per call.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::mcp_text::{Best, Rounds, over_http, server};
use super::table::{Row, missing};

/// A `[[mcp_servers]]` entry mounting `command` under the prefix `id`, with `extra` lines.
/// Its strings are written as JSON writes them, which TOML reads alike (the same escapes).
fn mount(id: &str, command: &[String], extra: &str) -> String {
    let (program, args) = command
        .split_first()
        .map_or(("", &[][..]), |(p, a)| (p.as_str(), a));
    format!(
        "[[mcp_servers]]\nid = \"{id}\"\nprefix = \"{id}\"\ncommand = {}\nargs = {}\n{extra}",
        json!(program),
        json!(args)
    )
}

/// `command` run under callgrind, its report written into `logs` (one file a process):
/// how a gateway counted with its mounted server mounts it. `None` without `valgrind` on
/// the `PATH` (the gateway is given its absolute path: it starts a mounted server with an
/// environment of its own).
fn under_callgrind(command: &[String], logs: &Path) -> Option<Vec<String>> {
    let valgrind = std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("valgrind"))
        .find(|p| p.is_file())?;
    let mut wrapped = vec![
        valgrind.display().to_string(),
        "--tool=callgrind".into(),
        "--callgrind-out-file=/dev/null".into(),
        format!("--log-file={}", logs.join("%p.log").display()),
    ];
    wrapped.extend(command.iter().cloned());
    Some(wrapped)
}

/// The peer gateways' rows: each one's calls/s and CPU per call (its processes and the
/// server it mounts) beside toolhost's HTTP gateway in front of the same server, reported.
/// ContextForge's row is always there (what stopped it, when something did); agentgateway's
/// only when it was in the plan (a binary of it given).
pub(super) fn peer_rows(
    best: &Best,
    setup: Option<f64>,
    failed: &BTreeMap<String, String>,
) -> Vec<Row> {
    let contextforge = format!(
        "peer gateway: ContextForge ({}) in front of toolhost serve --http (its streamable HTTP, a 2025-11-25 session; its default rate limit of 100 calls a minute turned off), vs toolhost serve --http in front of the same (stateless)",
        super::contextforge::CONTEXTFORGE
    );
    let mut rows = vec![peer_row(
        best,
        failed,
        "contextforge-http",
        contextforge,
        setup,
    )];
    if best.contains_key("agentgateway-http") || failed.contains_key("agentgateway-http") {
        rows.push(peer_row(
            best,
            failed,
            "agentgateway-http",
            format!(
                "peer gateway: agentgateway (Rust; the binary {} names) in front of toolhost serve --http (its streamable HTTP, a 2025-11-25 session; its default configuration), vs toolhost serve --http in front of the same (stateless)",
                super::agentgateway::VAR
            ),
            None,
        ));
    }
    rows
}

/// One peer gateway's row, `name` in the plan, against `gateway-http`.
fn peer_row(
    best: &Best,
    failed: &BTreeMap<String, String>,
    name: &str,
    what: String,
    setup: Option<f64>,
) -> Row {
    let (Some(peer), Some(ours)) = (best.get(name), best.get("gateway-http")) else {
        return match failed.get(name) {
            Some(why) => Row {
                figure: what,
                measured: format!("not measured: {why}"),
                target: "reported".into(),
                pass: None,
            },
            None => missing(&what),
        };
    };
    let setup = setup.map_or(String::new(), |s| format!("; set up in {s:.0} s"));
    Row {
        figure: what,
        measured: format!(
            "{:.0} vs {:.0} calls/s ({:.2}×); {:.1} vs {:.1} µs CPU per call{setup}",
            peer.0,
            ours.0,
            ours.0 / peer.0,
            peer.1,
            ours.1,
        ),
        target: "reported".into(),
        pass: None,
    }
}

/// How many calls the fan-out sends at once, and how long each takes (s).
const FAN_OUT: (u64, u64) = (1000, 1);

/// The gateways of the plan (`serve` makes a `serve --mcp` command for a configuration,
/// `bare` is the configuration with nothing set), each writing its configuration under
/// `peers`; `node` runs server-everything where it could be installed. Also the fan-out:
/// [`FAN_OUT`] calls at once through the gateway to server-everything's
/// `trigger-long-running-operation` (every call of the session allowed to run at once).
pub(super) fn plan(
    peers: &Path,
    serve: &dyn Fn(&Path) -> Vec<String>,
    bare: &Path,
    node: Option<&[String]>,
    skipped: &mut Vec<String>,
) -> (Vec<Value>, Vec<Value>) {
    let mut plan = Vec::new();
    let mut fan_out = Vec::new();
    let mut write = |name: &str, text: &str| {
        let path = peers.join(name);
        match std::fs::write(&path, text) {
            Ok(()) => Some(path),
            Err(e) => {
                skipped.push(format!("the gateway's configuration {name}: {e}"));
                None
            }
        }
    };
    // toolhost in front of toolhost.
    let upstream = serve(bare);
    if let (Some(config), Some(counted)) = (
        write("gateway-toolhost.toml", &mount("up", &upstream, "")),
        write(
            "gateway-toolhost-count.toml",
            &mount("up", &upstream, "sandbox = \"host\"\n"),
        ),
    ) {
        let mut gateway = server(
            "gateway-toolhost",
            "up__read_file",
            json!({"path": "a.txt"}),
            serve(&config),
        );
        gateway["counted_as"] = json!(serve(&counted));
        gateway["proxy"] = json!({"upstream_tool": "read_file", "command": upstream});
        let logs: PathBuf = peers.join("gateway-toolhost-mounted-counts");
        if let Some(both) = under_callgrind(&upstream, &logs).and_then(|wrapped| {
            write(
                "gateway-toolhost-count-both.toml",
                &mount("up", &wrapped, "sandbox = \"host\"\n"),
            )
        }) {
            gateway["counted_with_mounted"] = json!({"command": serve(&both), "logs": logs});
        }
        plan.push(gateway);
    }
    // toolhost in front of Node's server-everything.
    if let Some(everything) = node {
        // Its modules are read from where npm put them (the node and script paths).
        let modules = everything
            .get(1)
            .and_then(|script| Path::new(script).ancestors().nth(4))
            .map(|m| format!("readable_roots = [{:?}]\n", m.display().to_string()))
            .unwrap_or_default();
        if let (Some(config), Some(counted)) = (
            write(
                "gateway-everything.toml",
                &mount("ev", everything, &modules),
            ),
            write(
                "gateway-everything-count.toml",
                &mount("ev", everything, &format!("{modules}sandbox = \"host\"\n")),
            ),
        ) {
            let mut gateway = server(
                "gateway-everything",
                "ev__echo",
                json!({"message": "hi"}),
                serve(&config),
            );
            gateway["counted_as"] = json!(serve(&counted));
            // The floor of the hop in front of it: the byte relay, without the rmcp proxy
            // (whose count would be set against no row here).
            gateway["proxy"] =
                json!({"upstream_tool": "echo", "command": everything, "rmcp": false});
            plan.push(gateway);
        }
        let slow = "side_effects = { \"trigger-long-running-operation\" = \"read\" }\n";
        if let Some(config) = write(
            "gateway-fan-out.toml",
            &mount(
                "ev",
                everything,
                &format!("{modules}{slow}max_concurrency = 1024\n"),
            ),
        ) {
            let (calls, secs) = FAN_OUT;
            fan_out.push(json!({
                "name": "gateway-fan-out",
                "tool": "ev__trigger-long-running-operation",
                "arguments": {"duration": secs, "steps": 1},
                "command": serve(&config),
                "calls": calls,
            }));
        }
    }
    // toolhost in front of toolhost, both over streamable HTTP.
    let config = peers.join("gateway-http.toml");
    let mut gateway = server(
        "gateway-http",
        "up__read_file",
        json!({"path": "a.txt"}),
        over_http(serve(&config)),
    );
    gateway["http"] = json!({"stateless": true});
    let upstream = over_http(serve(bare));
    // The floor of the hop over HTTP: the byte relay between the client's connections and
    // the same server (no rmcp proxy: it speaks stdio).
    gateway["proxy"] = json!({"upstream_tool": "read_file", "command": upstream, "rmcp": false});
    gateway["upstream"] = json!(upstream);
    gateway["files"] = json!({
        config.display().to_string():
            "[[mcp_servers]]\nid = \"up\"\nprefix = \"up\"\nurl = \"http://127.0.0.1:{upstream_port}/mcp\"\n"
    });
    plan.push(gateway);
    (plan, fan_out)
}

/// The most threads the fan-out may add to a gateway warm with a call: a call is a
/// future, so only what the runtime starts on its own (a blocking thread for a question
/// to the user, say) may come.
const MORE_THREADS: f64 = 4.0;

/// The fan-out's rows: how long its calls took, against a second more than one takes,
/// and the gateway's threads meanwhile.
pub(super) fn fan_out_rows(fan_outs: &BTreeMap<String, (f64, f64, f64)>) -> Vec<Row> {
    let (calls, secs) = FAN_OUT;
    let what = format!(
        "gateway: {calls} calls in flight at once to a mounted tool that answers after {secs} s (server-everything, its entry's max_concurrency = 1024)"
    );
    let Some((took, most, before)) = fan_outs.get("gateway-fan-out") else {
        return vec![missing(&format!("{what}: time to the last answer"))];
    };
    vec![
        Row {
            figure: format!("{what}: time to the last answer"),
            measured: format!("{took:.2} s"),
            target: format!("≤ {} s", secs + 1),
            pass: Some(*took <= (secs + 1) as f64),
        },
        Row {
            figure: format!("{what}: the gateway's threads meanwhile"),
            measured: format!("at most {most:.0} ({before:.0} before)"),
            target: format!("≤ {MORE_THREADS:.0} more"),
            pass: Some(most - before <= MORE_THREADS),
        },
    ]
}

/// The least share of the mounted server's calls/s a gateway in front of it keeps, and
/// the most times its CPU per call (both processes) it may take: issue 61's targets.
const CALLS_SHARE: [(&str, f64); 3] = [
    ("gateway-everything", 0.7),
    ("gateway-toolhost", 0.5),
    ("gateway-http", 0.5),
];
const CPU_TIMES: f64 = 2.5;
/// The most times the bare rmcp proxy's instructions per call the gateway may take.
const FLOOR_TIMES: f64 = 1.5;

/// The gateway's rows: calls/s and CPU per call against the mounted server alone, and its
/// own CPU and instructions per call against the bare rmcp proxy's.
pub(super) fn rows(
    best: &Best,
    rounds: &Rounds,
    own: &BTreeMap<String, f64>,
    counts: &BTreeMap<String, f64>,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for (gateway, alone, what) in [
        (
            "gateway-everything",
            "everything",
            "toolhost serve --mcp in front of Node's server-everything (ev__echo) vs server-everything alone",
        ),
        (
            "gateway-toolhost",
            "toolhost",
            "toolhost serve --mcp in front of toolhost serve --mcp (up__read_file) vs the mounted toolhost alone",
        ),
        (
            "gateway-http",
            "toolhost-http",
            "toolhost serve --http in front of toolhost serve --http (stateless, 16 connections) vs the mounted toolhost alone",
        ),
    ] {
        let share = CALLS_SHARE
            .iter()
            .find(|(name, _)| *name == gateway)
            .map_or(0.0, |(_, s)| *s);
        let (Some(g), Some(a)) = (best.get(gateway), best.get(alone)) else {
            rows.push(missing(&format!("gateway: {what}: calls/s")));
            continue;
        };
        rows.push(Row {
            figure: format!("gateway: {what}: calls/s"),
            measured: format!("{:.0} vs {:.0}: {:.2}×", g.0, a.0, g.0 / a.0),
            target: format!("≥ {share}×"),
            pass: Some(g.0 / a.0 >= share),
        });
        // Node's CPU is a JIT's, against no target; toolhost's own is held to 2.5×.
        let judged = gateway != "gateway-everything";
        rows.push(Row {
            figure: format!("gateway: {what}: CPU per call (the gateway and the server it mounts)"),
            measured: format!(
                "{:.1} µs vs {:.1} µs: {:.2}×{}",
                g.1,
                a.1,
                g.1 / a.1,
                round_by_round(rounds, gateway, alone)
            ),
            target: if judged {
                format!("≤ {CPU_TIMES}×")
            } else {
                "reported".into()
            },
            pass: judged.then_some(g.1 / a.1 <= CPU_TIMES),
        });
    }
    for (gateway, alone, what) in [
        (
            "gateway-toolhost+mounted",
            "toolhost",
            "toolhost serve --mcp in front of toolhost serve --mcp (up__read_file) vs the mounted toolhost alone: instructions per call of both processes (callgrind; the mounted one run under it by the gateway)",
        ),
        (
            "gateway-http+mounted",
            "toolhost-http",
            "toolhost serve --http in front of toolhost serve --http (up__read_file) vs the mounted toolhost alone: instructions per call of both processes (callgrind; one call at a time on one connection)",
        ),
    ] {
        let figure = format!("gateway: {what}");
        rows.push(match (counts.get(gateway), counts.get(alone)) {
            (Some(both), Some(alone)) if *alone > 0.0 => Row {
                figure,
                measured: format!("{both:.0} vs {alone:.0}: {:.2}×", both / alone),
                target: format!("≤ {CPU_TIMES}× (exact run to run)"),
                pass: Some(both / alone <= CPU_TIMES),
            },
            _ => missing(&figure),
        });
    }
    rows.extend([
        hop_floor(
            best,
            own,
            "gateway-toolhost",
            "toolhost",
            "toolhost serve --mcp (read_file)",
        ),
        hop_floor(
            best,
            own,
            "gateway-everything",
            "everything",
            "Node's server-everything (echo)",
        ),
        hop_floor(
            best,
            own,
            "gateway-http",
            "toolhost-http",
            "toolhost serve --http (read_file, stateless, 16 connections)",
        ),
    ]);
    let floor = "the bench's bare rmcp proxy in front of the same server (rmcp client and server, one tool forwarded)";
    let figure = format!("gateway in front of toolhost: its own CPU per call (timed) vs {floor}");
    rows.push(
        match (
            own.get("gateway-toolhost"),
            own.get("gateway-toolhost-rmcp-proxy"),
        ) {
            (Some(g), Some(p)) if *p > 0.0 => Row {
                figure,
                measured: format!("{g:.1} µs vs {p:.1} µs: {:.2}×", g / p),
                target: format!("≤ {FLOOR_TIMES}×: judged by instructions (below)"),
                pass: None,
            },
            _ => missing(&figure),
        },
    );
    let figure = format!(
        "gateway in front of toolhost: its own instructions per call (callgrind) vs {floor}"
    );
    rows.push(
        match (
            counts.get("gateway-toolhost"),
            counts.get("gateway-toolhost-rmcp-proxy"),
        ) {
            (Some(g), Some(p)) if *p > 0.0 => Row {
                figure,
                measured: format!("{g:.0} vs {p:.0}: {:.2}×", g / p),
                target: format!("≤ {FLOOR_TIMES}× (exact run to run)"),
                pass: Some(g / p <= FLOOR_TIMES),
            },
            _ => missing(&figure),
        },
    );
    if let Some(n) = counts.get("gateway-everything") {
        rows.push(Row {
            figure:
                "gateway in front of server-everything: its own instructions per call (callgrind)"
                    .into(),
            measured: format!("{n:.0}"),
            target: "reported".into(),
            pass: None,
        });
    }
    rows
}

/// The CPU-per-call ratio of `gateway` to `alone` taken in each round (the two ran
/// seconds apart, on the same machine's mood), as `; round by round M× (LO–HI, N rounds)`
/// with M the median: beside the best rounds' ratio, which sets side by side two rounds
/// that may have met the machine in different moods. Empty without two such rounds.
fn round_by_round(rounds: &Rounds, gateway: &str, alone: &str) -> String {
    let (Some(g), Some(a)) = (rounds.get(gateway), rounds.get(alone)) else {
        return String::new();
    };
    let mut ratios: Vec<f64> = g
        .iter()
        .filter_map(|(r, g)| a.get(r).filter(|a| **a > 0.0).map(|a| g / a))
        .collect();
    if ratios.len() < 2 {
        return String::new();
    }
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let median = if n % 2 == 1 {
        ratios[n / 2]
    } else {
        (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0
    };
    format!(
        "; round by round {median:.2}× ({:.2}–{:.2}, {n} rounds)",
        ratios[0],
        ratios[n - 1]
    )
}

/// What one more process in the way costs before a gateway does any work: the bench's
/// byte relay (`GATEWAY-relay`) in front of the server `gateway` mounts, against that
/// server alone (`alone`, described as `what`), with the relay's own part and the
/// gateway's beside it. Reported: it is the part of the gateway's budget that no gateway
/// can spend on its own work.
fn hop_floor(
    best: &Best,
    own: &BTreeMap<String, f64>,
    gateway: &str,
    alone: &str,
    what: &str,
) -> Row {
    let figure = format!(
        "gateway: the floor of any hop, the bench's byte relay (one thread waiting on poll or epoll, no parsing) in front of {what} vs the server alone: CPU per call (the relay and the server behind it)"
    );
    let relay_name = format!("{gateway}-relay");
    let (Some(relay), Some(alone), Some(relay_own)) =
        (best.get(&relay_name), best.get(alone), own.get(&relay_name))
    else {
        return missing(&figure);
    };
    let gateway_own = own.get(gateway).map_or(String::new(), |g| {
        format!("; toolhost's gateway's own {g:.1} µs")
    });
    Row {
        figure,
        measured: format!(
            "{:.1} µs vs {:.1} µs: {:.2}× (the relay's own {relay_own:.1} µs{gateway_own}); {:.2}× the calls/s",
            relay.1,
            alone.1,
            relay.1 / alone.1,
            relay.0 / alone.0,
        ),
        target: "reported".into(),
        pass: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_gateway_stands_beside_the_server_it_mounts_and_its_floor() {
        let best = super::super::mcp_text::mcp_best(
            "best everything: 20000 calls/s, 50.00 us CPU/call, idle 70.0 MiB, own 50.00 us CPU/call\n\
             best gateway-everything: 15000 calls/s, 80.00 us CPU/call, idle 90.0 MiB, own 30.00 us CPU/call\n\
             best toolhost: 40000 calls/s, 14.00 us CPU/call, idle 13.0 MiB, own 14.00 us CPU/call\n\
             best gateway-toolhost: 18000 calls/s, 40.00 us CPU/call, idle 30.0 MiB, own 25.00 us CPU/call\n\
             best gateway-toolhost-rmcp-proxy: 8000 calls/s, 180.00 us CPU/call, idle 20.0 MiB, own 160.00 us CPU/call\n\
             best gateway-toolhost-relay: 36000 calls/s, 19.60 us CPU/call, idle 5.0 MiB, own 4.00 us CPU/call\n\
             best gateway-everything-relay: 17000 calls/s, 60.00 us CPU/call, idle 5.0 MiB, own 8.00 us CPU/call\n\
             best toolhost-http: 60000 calls/s, 19.00 us CPU/call, idle 21.0 MiB, own 19.00 us CPU/call\n\
             best gateway-http: 30000 calls/s, 47.50 us CPU/call, idle 28.0 MiB, own 27.00 us CPU/call\n\
             best gateway-http-relay: 45000 calls/s, 30.40 us CPU/call, idle 21.0 MiB, own 10.00 us CPU/call",
        );
        let own = super::super::mcp_text::own_cpu(
            "best gateway-everything: 15000 calls/s, 80.00 us CPU/call, idle 90.0 MiB, own 30.00 us CPU/call\n\
             best gateway-everything-relay: 17000 calls/s, 60.00 us CPU/call, idle 5.0 MiB, own 8.00 us CPU/call\n\
             best gateway-toolhost: 18000 calls/s, 40.00 us CPU/call, idle 30.0 MiB, own 25.00 us CPU/call\n\
             best gateway-toolhost-rmcp-proxy: 8000 calls/s, 180.00 us CPU/call, idle 20.0 MiB, own 160.00 us CPU/call\n\
             best gateway-toolhost-relay: 36000 calls/s, 19.60 us CPU/call, idle 5.0 MiB, own 4.00 us CPU/call\n\
             best gateway-http: 30000 calls/s, 47.50 us CPU/call, idle 28.0 MiB, own 27.00 us CPU/call\n\
             best gateway-http-relay: 45000 calls/s, 30.40 us CPU/call, idle 21.0 MiB, own 10.00 us CPU/call",
        );
        assert_eq!(own["gateway-toolhost"], 25.0);
        let counts = BTreeMap::from([
            ("gateway-toolhost".to_string(), 60000.0),
            ("gateway-toolhost+mounted".to_string(), 90000.0),
            ("toolhost".to_string(), 35000.0),
            ("gateway-toolhost-rmcp-proxy".to_string(), 150000.0),
            ("gateway-http+mounted".to_string(), 120000.0),
            ("toolhost-http".to_string(), 50000.0),
        ]);
        let rounds = super::super::mcp_text::mcp_rounds(
            "round 0 toolhost: 40000 calls/s, server CPU 14.0 us/call (14.0 its own process)\n\
             round 0 gateway-toolhost: 18000 calls/s, server CPU 42.0 us/call (25.0 its own process)\n\
             round 1 toolhost: 38000 calls/s, server CPU 16.0 us/call (16.0 its own process)\n\
             round 1 gateway-toolhost: 17000 calls/s, server CPU 40.0 us/call (25.0 its own process)\n\
             round 2 gateway-toolhost: 17000 calls/s, server CPU 41.0 us/call (25.0 its own process)",
        );
        let rows = rows(&best, &rounds, &own, &counts);
        let verdicts: Vec<(&str, Option<bool>)> =
            rows.iter().map(|r| (r.measured.as_str(), r.pass)).collect();
        assert_eq!(
            verdicts,
            [
                ("15000 vs 20000: 0.75×", Some(true)),
                ("80.0 µs vs 50.0 µs: 1.60×", None),
                ("18000 vs 40000: 0.45×", Some(false)),
                (
                    "40.0 µs vs 14.0 µs: 2.86×; round by round 2.75× (2.50–3.00, 2 rounds)",
                    Some(false)
                ),
                ("30000 vs 60000: 0.50×", Some(true)),
                ("47.5 µs vs 19.0 µs: 2.50×", Some(true)),
                ("90000 vs 35000: 2.57×", Some(false)),
                ("120000 vs 50000: 2.40×", Some(true)),
                (
                    "19.6 µs vs 14.0 µs: 1.40× (the relay's own 4.0 µs; toolhost's gateway's own 25.0 µs); 0.90× the calls/s",
                    None
                ),
                (
                    "60.0 µs vs 50.0 µs: 1.20× (the relay's own 8.0 µs; toolhost's gateway's own 30.0 µs); 0.85× the calls/s",
                    None
                ),
                (
                    "30.4 µs vs 19.0 µs: 1.60× (the relay's own 10.0 µs; toolhost's gateway's own 27.0 µs); 0.75× the calls/s",
                    None
                ),
                ("25.0 µs vs 160.0 µs: 0.16×", None),
                ("60000 vs 150000: 0.40×", Some(true)),
            ]
        );
    }

    #[test]
    fn the_fan_out_is_held_to_a_second_more_than_one_call_and_no_thread_per_call() {
        let fan_outs = super::super::mcp_text::fan_outs(
            "best echo: 1 calls/s, 1.00 us CPU/call, idle 2.0 MiB\n\
             fan-out gateway-fan-out: 1000 calls in 1.42 s, at most 3 threads (2 before)",
        );
        assert_eq!(fan_outs["gateway-fan-out"], (1.42, 3.0, 2.0));
        let rows = fan_out_rows(&fan_outs);
        assert_eq!(
            rows.iter()
                .map(|r| (r.measured.as_str(), r.pass))
                .collect::<Vec<_>>(),
            [("1.42 s", Some(true)), ("at most 3 (2 before)", Some(true))]
        );
        let slow = BTreeMap::from([("gateway-fan-out".to_string(), (2.5, 202.0, 2.0))]);
        assert!(fan_out_rows(&slow).iter().all(|r| r.pass == Some(false)));
        assert_eq!(fan_out_rows(&BTreeMap::new())[0].measured, "not measured");
    }

    #[test]
    fn a_mount_entry_names_the_program_and_its_arguments_as_toml_strings() {
        let entry = mount(
            "up",
            &["/bin/t h".to_string(), "serve".into(), "a\"b".into()],
            "sandbox = \"host\"\n",
        );
        assert_eq!(
            entry,
            "[[mcp_servers]]\nid = \"up\"\nprefix = \"up\"\ncommand = \"/bin/t h\"\nargs = [\"serve\",\"a\\\"b\"]\nsandbox = \"host\"\n"
        );
    }
}
