//! Progressive discovery measured against real tool sets: the MCP servers the plan names
//! (installed from npm and PyPI by `cargo xtask bench`, never copied here) mounted in one
//! `toolhost serve --mcp`, and the queries in `discovery/queries.json` (written for this
//! bench, phrased as a model asks, each with the tool or tools that do what it asks).
//!
//! - recall@1 and recall@5 of `find_tools` over MCP, as a client calls it;
//! - the tokens of `tools/list` with discovery off and on (OpenAI's o200k encoding, of what
//!   a client hands its model of each tool: name, description, input schema);
//! - the search's latency over 1,000 tools: the corpus's tools, repeated under new names
//!   until there are 1,000, registered in a dispatcher in this process, and searched with
//!   the queries in turn (the index built once, then kept: its build time is reported);
//! - with a text model in the plan (`[mcp.discovery] model`), recall and latency again,
//!   ranked by meaning too.
//!
//! `TOOLHOST_BENCH_DISCOVERY` holds the plan: `{"toolhost", "workspace", "config_off",
//! "config_on", "config_bare"}` (discovery off, on, on with nothing always listed; and
//! optionally `"config_meaning"`, on with a text model, and `"model"`, its folder) (`cargo xtask bench --discovery-only` writes it and runs this). Under
//! `cargo test` it checks the query file and measures the search over a corpus of its own.
//! With `TOOLHOST_DISCOVERY_CORPUS=FILE` (a corpus saved with `toolhost list --json`) it
//! ranks the queries in this process and prints the recall: a change of the ranking tried
//! in seconds.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Instant;

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

#[derive(serde::Deserialize)]
struct Query {
    ask: String,
    tools: Vec<String>,
}

#[derive(serde::Deserialize)]
struct Plan {
    toolhost: String,
    workspace: String,
    config_off: String,
    config_on: String,
    /// Discovery on with nothing always listed (`always = []`).
    config_bare: String,
    /// Discovery on with a text model (`[mcp.discovery] model`), and that model's folder:
    /// recall and latency again, ranked by meaning too.
    #[serde(default)]
    config_meaning: Option<String>,
    #[serde(default)]
    model: Option<String>,
}

fn queries() -> Vec<Query> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/discovery/queries.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// o200k tokens of `text`.
fn tokens(text: &str) -> usize {
    tiktoken_rs::o200k_base_singleton()
        .encode_with_special_tokens(text)
        .len()
}

/// A registered tool that only has its definition: the search never calls it.
struct Listed(tool_api::ToolDefinition);

impl tool_api::ToolFactory for Listed {
    fn definition(&self) -> &tool_api::ToolDefinition {
        &self.0
    }

    fn create(&self) -> Result<Box<dyn tool_api::Tool>, tool_api::ToolError> {
        Err(tool_api::ToolError::failed("listed for the bench only"))
    }
}

/// A session of `dispatcher` over a workspace of its own (kept while the session is used).
fn session_of(
    dispatcher: &dispatcher_core::Dispatcher,
) -> (dispatcher_core::Session, tempfile::TempDir) {
    let ws = tempfile::tempdir().unwrap();
    let session = dispatcher
        .open_session(dispatcher_core::SessionSpec::new("bench", ws.path()))
        .unwrap();
    (session, ws)
}

/// How many queries found their tool first, and among the first five.
#[derive(Default)]
struct Recall {
    at1: usize,
    at5: usize,
}

impl Recall {
    /// Counts what a search for `q` `found` (names, best first), and prints a query whose
    /// tool was not first.
    fn count(&mut self, q: &Query, found: &[String]) {
        let rank = found.iter().position(|f| q.tools.contains(f));
        self.at1 += usize::from(rank == Some(0));
        self.at5 += usize::from(rank.is_some());
        if rank != Some(0) {
            println!(
                "discovery: {} \"{}\": wanted {:?}, got {:?}",
                if rank.is_some() { "low" } else { "miss" },
                q.ask,
                q.tools,
                found
            );
        }
    }
}

/// The search over `definitions` repeated under new names up to `n` tools: the first
/// search's time (the index built), then per search over `queries` in turn, sorted.
fn search_latency(
    definitions: &[tool_api::ToolDefinition],
    n: usize,
    queries: &[Query],
    model: Option<&str>,
) -> (f64, Vec<f64>) {
    let dispatcher = dispatcher_core::Dispatcher::new();
    if let Some(model) = model {
        let encoder = encode_with(&dispatcher, model);
        // Queries whose words the model has not encoded yet, then the vocabulary's words
        // learned (as `serve` does on a thread of its own) before the searches are timed.
        let cold: Vec<f64> = queries
            .iter()
            .map(|q| {
                let t = Instant::now();
                std::hint::black_box(encoder.encode_query(&q.ask));
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        let t = Instant::now();
        let left = encoder.learn_words(0);
        encoder.learn_words(usize::MAX);
        println!(
            "discovery: by meaning: a query's new words encoded: mean {:.1} us over {} queries; the vocabulary's other {left} words learned in {:.1} s",
            cold.iter().sum::<f64>() / cold.len() as f64,
            cold.len(),
            t.elapsed().as_secs_f64()
        );
    }
    let mut registered = 0;
    'fill: for round in 0.. {
        for d in definitions {
            if registered == n {
                break 'fill;
            }
            let mut d = d.clone();
            if round > 0 {
                d.name = format!("{}_{round}", d.name);
            }
            dispatcher.register(Arc::new(Listed(d))).unwrap();
            registered += 1;
        }
    }
    let (session, _ws) = session_of(&dispatcher);
    let first = Instant::now();
    dispatcher.search_tools(&session, &queries[0].ask, 5);
    let built = first.elapsed().as_secs_f64() * 1e3;
    let mut each: Vec<f64> = (0..1000)
        .map(|i| {
            let ask = &queries[i % queries.len()].ask;
            let t = Instant::now();
            std::hint::black_box(dispatcher.search_tools(&session, ask, 5));
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    each.sort_by(f64::total_cmp);
    (built, each)
}

fn report_latency(how: &str, n: usize, built: f64, each: &[f64]) {
    let mean = each.iter().sum::<f64>() / each.len() as f64;
    let p99 = each[each.len() * 99 / 100];
    println!(
        "discovery: {how}search over {n} tools: mean {mean:.1} us, p99 {p99:.1} us; index built in {built:.2} ms"
    );
}

/// What of `tools` goes into the model's context, as a client hands them to a model API:
/// each tool's name, description and input schema (not `_meta` or annotations, which
/// clients keep to themselves), as JSON.
fn model_view(tools: &[rmcp::model::Tool]) -> String {
    let view: Vec<Value> = tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
        .collect();
    serde_json::to_string(&view).unwrap()
}

/// `toolhost serve --mcp` with `config`, as a client starts it.
async fn serve(
    plan: &Plan,
    config: &str,
) -> rmcp::service::RunningService<rmcp::service::RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(&plan.toolhost);
    cmd.args([
        "serve",
        "--mcp",
        "--workspace",
        &plan.workspace,
        "--config",
        config,
    ])
    .stderr(std::process::Stdio::null());
    ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap_or_else(|e| panic!("toolhost serve --mcp --config {config}: {e}"))
}

async fn listed(
    client: &rmcp::service::RunningService<rmcp::service::RoleClient, ()>,
) -> Vec<rmcp::model::Tool> {
    client.peer().list_all_tools().await.unwrap()
}

async fn bench(plan: Plan) {
    let queries = queries();
    let off = serve(&plan, &plan.config_off).await;
    let all = listed(&off).await;
    let all_json = model_view(&all);
    let servers: std::collections::BTreeSet<&str> = all
        .iter()
        .filter_map(|t| t.name.split_once("__").map(|(s, _)| s))
        .collect();
    println!(
        "discovery: corpus {} tools from {} servers and toolhost's own",
        all.len(),
        servers.len()
    );
    off.cancel().await.unwrap();
    let on = serve(&plan, &plan.config_on).await;
    let few = listed(&on).await;
    let few_json = model_view(&few);
    let (t_off, t_on) = (tokens(&all_json), tokens(&few_json));
    println!(
        "discovery: tools/list tokens off {t_off}, on {t_on} ({} tools listed)",
        few.len()
    );
    let bare = serve(&plan, &plan.config_bare).await;
    let search_only = listed(&bare).await;
    println!(
        "discovery: tools/list tokens with nothing always listed {} ({} tools listed)",
        tokens(&model_view(&search_only)),
        search_only.len()
    );
    bare.cancel().await.unwrap();
    let recall = recall_over_mcp(&on, &queries).await;
    println!("discovery: recall@1 {}/{}", recall.at1, queries.len());
    println!("discovery: recall@5 {}/{}", recall.at5, queries.len());
    on.cancel().await.unwrap();
    let definitions: Vec<tool_api::ToolDefinition> = all
        .iter()
        .map(|t| {
            tool_api::ToolDefinition::new(
                t.name.to_string(),
                t.description.as_deref().unwrap_or_default(),
                tool_api::SideEffect::None,
                Value::Object((*t.input_schema).clone()),
            )
        })
        .collect();
    let (built, each) = search_latency(&definitions, 1000, &queries, None);
    report_latency("", 1000, built, &each);
    if let (Some(config), Some(model)) = (&plan.config_meaning, &plan.model) {
        let meaning = serve(&plan, config).await;
        let recall = recall_over_mcp(&meaning, &queries).await;
        meaning.cancel().await.unwrap();
        let n = queries.len();
        println!("discovery: by meaning: recall@1 {}/{n}", recall.at1);
        println!("discovery: by meaning: recall@5 {}/{n}", recall.at5);
        let (built, each) = search_latency(&definitions, 1000, &queries, Some(model));
        report_latency("by meaning: ", 1000, built, &each);
    }
}

/// Recall of `find_tools` over MCP, as a client calls it, for each of `queries`.
async fn recall_over_mcp(
    client: &rmcp::service::RunningService<rmcp::service::RoleClient, ()>,
    queries: &[Query],
) -> Recall {
    let mut recall = Recall::default();
    for q in queries {
        let args = json!({"query": q.ask, "limit": 5});
        let result = client
            .peer()
            .call_tool(
                CallToolRequestParams::new("find_tools")
                    .with_arguments(args.as_object().unwrap().clone()),
            )
            .await
            .unwrap();
        let found: Vec<String> = result
            .structured_content
            .as_ref()
            .and_then(|s| s["tools"].as_array())
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        recall.count(q, &found);
    }
    recall
}

/// A dispatcher's search ranked by meaning too, with the model in the folder `model`.
fn encode_with(
    dispatcher: &dispatcher_core::Dispatcher,
    model: &str,
) -> Arc<text_encoder::SentenceEncoder> {
    let encoder = Arc::new(
        text_encoder::SentenceEncoder::load(model.as_ref()).unwrap_or_else(|e| panic!("{e}")),
    );
    dispatcher.set_text_encoder(Some(encoder.clone()));
    encoder
}

/// Recall of the search in this process over `definitions` (a corpus saved with `toolhost
/// list --json`, to try a change of the ranking in seconds): (at 1, at 5).
fn recall_in_process(
    definitions: &[tool_api::ToolDefinition],
    queries: &[Query],
) -> (usize, usize) {
    let dispatcher = dispatcher_core::Dispatcher::new();
    for d in definitions {
        dispatcher.register(Arc::new(Listed(d.clone()))).unwrap();
    }
    if let Ok(model) = std::env::var("TOOLHOST_DISCOVERY_MODEL") {
        encode_with(&dispatcher, &model);
    }
    let (session, _ws) = session_of(&dispatcher);
    let mut recall = Recall::default();
    for q in queries {
        let found: Vec<String> = dispatcher
            .search_tools(&session, &q.ask, 5)
            .into_iter()
            .map(|f| f.listing.definition.name)
            .collect();
        recall.count(q, &found);
    }
    (recall.at1, recall.at5)
}

fn main() {
    if let Ok(corpus) = std::env::var("TOOLHOST_DISCOVERY_CORPUS") {
        let text = std::fs::read_to_string(&corpus).unwrap_or_else(|e| panic!("{corpus}: {e}"));
        let listed: Vec<Value> = serde_json::from_str(&text).unwrap();
        let definitions: Vec<tool_api::ToolDefinition> = listed
            .iter()
            .map(|t| {
                tool_api::ToolDefinition::new(
                    t["name"].as_str().unwrap(),
                    t["description"].as_str().unwrap_or_default(),
                    tool_api::SideEffect::None,
                    t["input_schema"].clone(),
                )
            })
            .collect();
        let queries = queries();
        let (at1, at5) = recall_in_process(&definitions, &queries);
        println!(
            "discovery: in process over {corpus}: recall@1 {at1}/{n}, recall@5 {at5}/{n}",
            n = queries.len()
        );
        return;
    }
    if !std::env::args().any(|a| a == "--bench") {
        // Under `cargo test`: the query file holds at least 100 queries, each with a tool,
        // and the search answers over 1,000 tools of its own.
        let queries = queries();
        assert!(queries.len() >= 100, "{} queries", queries.len());
        assert!(
            queries
                .iter()
                .all(|q| !q.ask.is_empty() && !q.tools.is_empty())
        );
        assert!(tokens("find_tools") > 0);
        let definitions: Vec<_> = ["read_file", "git_commit", "get_current_time"]
            .map(|n| {
                tool_api::ToolDefinition::new(
                    n,
                    n.replace('_', " "),
                    tool_api::SideEffect::None,
                    json!({"type": "object"}),
                )
            })
            .to_vec();
        let (built, each) = search_latency(&definitions, 1000, &queries, None);
        report_latency("", 1000, built, &each);
        return;
    }
    let plan: Plan = serde_json::from_str(
        &std::env::var("TOOLHOST_BENCH_DISCOVERY")
            .expect("TOOLHOST_BENCH_DISCOVERY: the plan (cargo xtask bench writes it)"),
    )
    .expect("TOOLHOST_BENCH_DISCOVERY is no plan");
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench(plan));
}
