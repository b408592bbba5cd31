//! Progressive discovery's rows (issue 63): a corpus of real MCP servers installed from
//! the registries at run time (never copied into the repository), mounted in one
//! `toolhost serve --mcp` beside toolhost's own tools, and the queries of
//! `toolhost/benches/discovery/queries.json`, through the `discovery` bench: recall@1 and
//! recall@5 of `find_tools`, the tokens a model is handed with discovery off and on, and
//! the search's latency over 1,000 tools.

use std::collections::BTreeMap;
use std::path::Path;

use super::mcp_text::number_after;
use super::table::{Row, missing};
use crate::peers;
use crate::steps::{announce, cargo};

/// The npm servers of the corpus, pinned.
const NPM: &[(&str, &str)] = &[
    (
        "filesystem",
        "@modelcontextprotocol/server-filesystem@2026.8.31",
    ),
    ("memory", "@modelcontextprotocol/server-memory@2026.8.31"),
    (
        "thinking",
        "@modelcontextprotocol/server-sequential-thinking@2026.8.31",
    ),
];

/// The PyPI servers of the corpus, pinned: (id, package, command).
const PYPI: &[(&str, &str, &str)] = &[
    ("git", "mcp-server-git==2026.10.19", "mcp-server-git"),
    ("fetch", "mcp-server-fetch==2026.10.24", "mcp-server-fetch"),
    ("time", "mcp-server-time==2026.10.19", "mcp-server-time"),
];

/// The corpus's `[[mcp_servers]]` entries (server-everything among them, from the MCP
/// rows' install), each server installed once under `peers/corpus`.
fn corpus_entries(peers: &Path, ws: &Path) -> Result<String, String> {
    let node = peers::node22(peers)?;
    let mut entries = String::new();
    let mut entry = |id: &str, command: &Path, args: &[String], readable: &Path| {
        let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
        entries.push_str(&format!(
            "[[mcp_servers]]\nid = \"{id}\"\nprefix = \"{id}\"\ncommand = {:?}\nargs = [{}]\nreadable_roots = [{:?}]\n\n",
            command.display().to_string(),
            args.join(", "),
            readable.display().to_string(),
        ));
    };
    let everything = peers::npm_install(peers, "everything", crate::peers::SERVER_EVERYTHING)?;
    let modules = everything.join("node_modules");
    entry(
        "everything",
        &node,
        &[
            modules
                .join("@modelcontextprotocol/server-everything/dist/index.js")
                .display()
                .to_string(),
            "stdio".into(),
        ],
        &modules,
    );
    for (id, spec) in NPM {
        let prefix = peers::npm_install(peers, &format!("corpus/{id}"), spec)?;
        let name = spec.rsplit_once('@').map_or(*spec, |(n, _)| n);
        let modules = prefix.join("node_modules");
        let mut args = vec![
            modules
                .join(name)
                .join("dist/index.js")
                .display()
                .to_string(),
        ];
        if *id == "filesystem" {
            args.push(ws.display().to_string());
        }
        entry(id, &node, &args, &modules);
    }
    let packages: Vec<&str> = PYPI.iter().map(|(_, p, _)| *p).collect();
    let python = peers::python_venv(peers, "corpus/py", &packages, "mcp_server_git")?;
    let venv = python.parent().and_then(Path::parent).unwrap_or(peers);
    for (id, _, command) in PYPI {
        entry(id, &python.with_file_name(command), &[], venv);
    }
    Ok(entries)
}

/// What the bench printed: recall at 1 and 5 (found, of), tokens off and on, mean and p99
/// µs over 1,000 tools, the corpus's size; `meaning`: the same ranked by meaning too.
#[derive(Default)]
struct Printed {
    meaning: Option<Box<Printed>>,
    recall_1: Option<(f64, f64)>,
    recall_5: Option<(f64, f64)>,
    tokens: Option<(f64, f64)>,
    /// With nothing always listed.
    bare: Option<f64>,
    latency: Option<(f64, f64)>,
    corpus: Option<String>,
}

fn fraction(text: &str, marker: &str) -> Option<(f64, f64)> {
    let line = text.lines().find(|l| l.contains(marker))?;
    let (found, of) = line.split(marker).nth(1)?.trim().split_once('/')?;
    Some((found.trim().parse().ok()?, of.trim().parse().ok()?))
}

/// The lines of a search ranked by meaning (`discovery: by meaning: …`), read as the
/// others into `meaning`.
fn read(text: &str) -> Printed {
    const MEANING: &str = "discovery: by meaning: ";
    let words: String = text
        .lines()
        .filter(|l| !l.starts_with(MEANING))
        .map(|l| format!("{l}\n"))
        .collect();
    let meaning: String = text
        .lines()
        .filter_map(|l| l.strip_prefix(MEANING))
        .map(|l| format!("discovery: {l}\n"))
        .collect();
    Printed {
        meaning: (!meaning.is_empty()).then(|| Box::new(read_lines(&meaning))),
        ..read_lines(&words)
    }
}

fn read_lines(text: &str) -> Printed {
    Printed {
        meaning: None,
        recall_1: fraction(text, "discovery: recall@1 "),
        recall_5: fraction(text, "discovery: recall@5 "),
        tokens: number_after(text, "tokens off ").zip(number_after(text, ", on ")),
        bare: number_after(text, "with nothing always listed "),
        latency: number_after(text, "tools: mean ").zip(number_after(text, "us, p99 ")),
        corpus: text
            .lines()
            .find_map(|l| l.strip_prefix("discovery: corpus "))
            .map(String::from),
    }
}

/// The discovery rows, from a run of the bench against `toolhost` over the corpus.
pub(super) fn rows(peers: &Path, toolhost: &Path, skipped: &mut Vec<String>) -> Vec<Row> {
    announce(
        "progressive discovery over real MCP servers (installed once under target/peers/corpus)",
    );
    let measured =
        run(peers, toolhost).map_err(|e| skipped.push(format!("the discovery bench: {e}")));
    let printed = measured.map(|t| read(&t)).unwrap_or_default();
    let corpus = printed
        .corpus
        .clone()
        .unwrap_or_else(|| "the corpus".into());
    let mut rows = recall_rows(&printed, &corpus, "");
    let figure = "discovery: tokens of the tools a model is handed (o200k), discovery off vs on (default `always`: toolhost's own tools)";
    rows.push(match printed.tokens {
        Some((off, on)) => Row {
            figure: figure.into(),
            measured: format!(
                "{off:.0} vs {on:.0}: {:.0}% fewer",
                (1.0 - on / off) * 100.0
            ),
            target: "≥ 90% fewer".into(),
            pass: Some(on <= off * 0.1),
        },
        None => missing(figure),
    });
    let figure = "discovery: the same with nothing always listed (`always = []`: the search and call_found_tool)";
    rows.push(match printed.tokens.map(|t| t.0).zip(printed.bare) {
        Some((off, bare)) => Row {
            figure: figure.into(),
            measured: format!("{bare:.0}: {:.0}% fewer", (1.0 - bare / off) * 100.0),
            target: "reported".into(),
            pass: None,
        },
        None => missing(figure),
    });
    rows.push(latency_row(&printed, ""));
    let by_meaning = format!(", by meaning too ({})", peers::TEXT_MODEL);
    let none = Printed::default();
    let meaning = printed.meaning.as_deref().unwrap_or(&none);
    rows.extend(recall_rows(meaning, &corpus, &by_meaning));
    rows.push(latency_row(meaning, &by_meaning));
    rows
}

/// recall@1 (reported) and recall@5 (goal 0.95) of `printed`, ranked `how`.
fn recall_rows(printed: &Printed, corpus: &str, how: &str) -> Vec<Row> {
    [
        (1, printed.recall_1, None),
        (5, printed.recall_5, Some(0.95)),
    ]
    .into_iter()
    .map(|(at, value, goal)| {
        let figure =
            format!("discovery: recall@{at} of find_tools{how}, {corpus}, the bench's queries");
        match value {
            Some((found, of)) => Row {
                figure,
                measured: format!("{found:.0} of {of:.0}: {:.2}", found / of),
                target: goal.map_or("reported".into(), |g| format!("≥ {g}")),
                pass: goal.map(|g| found / of >= g),
            },
            None => missing(&figure),
        }
    })
    .collect()
}

/// One search's latency over 1,000 tools of `printed`, ranked `how` (goal: under 1 ms).
fn latency_row(printed: &Printed, how: &str) -> Row {
    let figure = format!("discovery: one search over 1,000 tools{how} (in process; mean, p99)");
    match printed.latency {
        Some((mean, p99)) => Row {
            figure,
            measured: format!("{mean:.1} µs, p99 {p99:.1} µs"),
            target: "< 1 ms".into(),
            pass: Some(mean < 1000.0),
        },
        None => missing(&figure),
    }
}

/// Installs the corpus, writes its two configurations and runs the bench; its output.
fn run(peers: &Path, toolhost: &Path) -> Result<String, String> {
    let dir = peers.join("discovery");
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).map_err(|e| format!("{}: {e}", ws.display()))?;
    let entries = corpus_entries(peers, &ws)?;
    let mut plan = BTreeMap::new();
    let mut configs = vec![
        ("off", "mode = \"off\"".to_string()),
        ("on", "mode = \"on\"".to_string()),
        ("bare", "mode = \"on\"\nalways = []".to_string()),
    ];
    // Ranked by meaning too, with a text model from PyPI (without it, these rows say why).
    match peers::text_model(peers) {
        Ok(model) => {
            let model = model.display().to_string();
            configs.push(("meaning", format!("mode = \"on\"\nmodel = {model:?}")));
            plan.insert("model".to_string(), model);
        }
        Err(e) => eprintln!("the discovery bench ranks by words only: {e}"),
    }
    for (name, discovery) in configs {
        let config = dir.join(format!("discovery-{name}.toml"));
        std::fs::write(
            &config,
            format!(
                "[mcp]\npins_file = \"pins.json\"\n\n[mcp.discovery]\n{discovery}\n\n{entries}"
            ),
        )
        .map_err(|e| format!("{}: {e}", config.display()))?;
        plan.insert(format!("config_{name}"), config.display().to_string());
    }
    plan.insert("toolhost".into(), toolhost.display().to_string());
    plan.insert("workspace".into(), ws.display().to_string());
    let plan = serde_json::to_string(&plan).map_err(|e| e.to_string())?;
    peers::output(
        cargo()
            .args(["bench", "-p", "toolhost", "--bench", "discovery"])
            .env("TOOLHOST_BENCH_DISCOVERY", &plan)
            .stderr(std::process::Stdio::inherit()),
    )
    .map(|text| {
        print!("{text}");
        text
    })
    .map_err(|e| format!("{e} (its plan: TOOLHOST_BENCH_DISCOVERY='{plan}' cargo bench -p toolhost --bench discovery)"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bench_s_lines_are_read_into_its_figures() {
        let text = "discovery: corpus 61 tools from 7 servers and toolhost's own\n\
                    discovery: tools/list tokens off 9988, on 1356 (7 tools listed)\n\
                    discovery: tools/list tokens with nothing always listed 301 (2 tools listed)\n\
                    discovery: recall@1 79/110\n\
                    discovery: recall@5 100/110\n\
                    discovery: search over 1000 tools: mean 61.5 us, p99 180.2 us; index built in 20.00 ms\n\
                    discovery: by meaning: recall@1 94/110\n\
                    discovery: by meaning: recall@5 108/110\n\
                    discovery: by meaning: search over 1000 tools: mean 4100.5 us, p99 9000.0 us; index built in 900.00 ms\n";
        let p = super::read(text);
        assert_eq!(p.recall_1, Some((79.0, 110.0)));
        assert_eq!(p.recall_5, Some((100.0, 110.0)));
        assert_eq!(p.tokens, Some((9988.0, 1356.0)));
        assert_eq!(p.bare, Some(301.0));
        assert_eq!(p.latency, Some((61.5, 180.2)));
        let meaning = p.meaning.as_deref().unwrap();
        assert_eq!(meaning.recall_1, Some((94.0, 110.0)));
        assert_eq!(meaning.recall_5, Some((108.0, 110.0)));
        assert_eq!(meaning.latency, Some((4100.5, 9000.0)));
        assert!(meaning.tokens.is_none());
        assert_eq!(
            p.corpus.as_deref(),
            Some("61 tools from 7 servers and toolhost's own")
        );
    }
}
