//! `cargo xtask bench`: every benchmark, each figure beside its floor or peer, in one run,
//! one table.
//!
//! It runs the criterion benches (`dispatcher-core`: `dispatch`, `schedule`, `scale`;
//! `toolhost-tests`: `plugins`, `sandbox`), toolhost's `scale_out` and `mcp_roundtrip`
//! benches, and the peers the targets are measured against, in the same run: the spec's
//! own design in Python (`xtask/peers/spec_dispatcher.py`, written for this project, in a
//! venv under `target/peers` with `jsonschema`), MCP servers side by side under one client
//! written here (toolhost's `mcp_servers` bench: `toolhost serve --mcp` calling
//! `read_file`, the same server calling `word_count` from the signed text-tools example in
//! process, a bare rmcp server with the same `read_file` (the bench's own: what a Rust user
//! would write instead), the Python SDK's `MCPServer` with it too
//! (`xtask/peers/python_read_file.py`), Node's `@modelcontextprotocol/server-everything`
//! with Node 22 from npm, and an echo server that shows the client's own ceiling; then over
//! streamable HTTP, 16
//! connections: `toolhost serve --http` with stateless 2026-07-28 calls, server-everything's
//! HTTP transport in a 2025-11-25 session, and an HTTP echo server; then each stdio server's
//! instructions per call, counted with callgrind), the Python wheel, and the start-up of
//! `serve --mcp` with the example plugins against the same binary bare. What it cannot
//! install (no `python3`, no `npm`, no registry) it skips and says why. Then it prints one
//! table: figure, measured, target, verdict. `--write-readme` replaces the performance table
//! of `docs/performance.md` (linked from the README; between `<!-- bench:begin -->` and
//! `<!-- bench:end -->`) with it, so the page shows what was measured, not typed.

mod agentgateway;
mod contextforge;
mod counts;
mod discovery;
mod figures;
mod gateway;
mod mcp_text;
mod scale_out;
mod servers;
mod table;

pub use table::PERFORMANCE_PAGE;

use std::path::Path;

use crate::peers::output;
use crate::steps::{Result, announce, cargo, io, root, run};

/// What the benches that print their figures (rather than leave criterion estimates)
/// printed.
struct Printed {
    scale: String,
    scale_out: String,
    roundtrip: String,
}

/// Runs the criterion benches and the benches that print their figures, and builds the
/// toolhost that ships.
fn run_benches() -> Result<Printed> {
    run(
        "dispatcher benches (dispatch, schedule)",
        cargo().args([
            "bench",
            "-p",
            "toolhost-dispatcher-core",
            "--bench",
            "dispatch",
            "--bench",
            "schedule",
        ]),
    )?;
    let components = crate::components::fixtures()?;
    run(
        "plugin benches (native in process and isolated, WebAssembly)",
        cargo()
            .args(["bench", "-p", "toolhost-tests", "--bench", "plugins"])
            .env("TOOLHOST_TEST_COMPONENTS", &components),
    )?;
    run(
        "secrets bench (scanning tool output per MB beside a copy of it; the corpus)",
        cargo().args(["bench", "-p", "toolhost-secrets", "--bench", "scan"]),
    )?;
    run(
        "policies bench (a Cedar decision per call, with 1 and 200 policies, beside the tables alone)",
        cargo().args(["bench", "-p", "toolhost-policies", "--bench", "decide"]),
    )?;
    run(
        "sandbox bench (each figure paired with the same work unsandboxed)",
        cargo().args(["bench", "-p", "toolhost-tests", "--bench", "sandbox"]),
    )?;
    announce("scaling bench (1, 4, 16, 64 sessions; RSS after 10k and 1M dispatches)");
    let scale = output(cargo().args([
        "bench",
        "-p",
        "toolhost-dispatcher-core",
        "--bench",
        "scale",
    ]))
    .unwrap_or_default();
    announce("scale-out bench (3 instances, each with its own memory, then sharing Redis)");
    let redis = crate::ensure_redis()?;
    let scale_out = output(
        cargo()
            .args(["bench", "-p", "toolhost", "--bench", "scale_out"])
            .env("TOOLHOST_TEST_REDIS", &redis),
    )
    .unwrap_or_default();
    announce("MCP round trip bench");
    let roundtrip = output(cargo().args(["bench", "-p", "toolhost", "--bench", "mcp_roundtrip"]))
        .unwrap_or_default();
    run(
        "build the toolhost that ships (profile dist: fat LTO)",
        cargo().args(["build", "--profile", "dist", "-p", "toolhost"]),
    )?;
    Ok(Printed {
        scale,
        scale_out,
        roundtrip,
    })
}

/// The configuration of a server with the example plugin `text-tools` (release, signed by
/// a trusted key, in process), as the benches measure it; packaged under `target/peers`.
pub(crate) fn text_tools_config() -> Result<std::path::PathBuf> {
    let peers = root().join("target/peers");
    io("make target/peers", std::fs::create_dir_all(&peers))?;
    Ok(servers::plugin_configs(&peers)?.text_tools)
}

/// Runs every benchmark and its peers, prints the table, and with `write_readme` puts it
/// into the performance page.
pub fn bench(write_readme: bool, mcp_only: bool) -> Result {
    if mcp_only {
        return mcp_only_bench();
    }
    let printed = run_benches()?;
    let mut skipped = Vec::new();
    let dispatch_counts = counts::dispatch_counts(&mut skipped);
    let start_counts = counts::start_counts(&mut skipped);
    let peers = root().join("target/peers");
    io("make target/peers", std::fs::create_dir_all(&peers))?;
    let design = servers::spec_design(&peers, &mut skipped);

    let ws = mcp_workspace(&peers)?;
    let configs = servers::plugin_configs(&peers)?;
    let toolhost = root().join("target/dist/toolhost");
    let serve = serve_command(&toolhost, &ws);
    let measured = servers::mcp_servers(&peers, &serve, &configs, &mut skipped);

    announce("the Python wheel (release): read_file 4 KB");
    let wheel = crate::python::wheel_figures()
        .map_err(|e| skipped.push(format!("the Python wheel's figures: {e}")))
        .ok();
    let startup = servers::Startup::measure(&toolhost, &serve, &configs, &ws);

    let mut rows = figures::dispatch_rows(design.map(|d| d.0), &dispatch_counts);
    rows.extend(figures::file_tool_rows(&dispatch_counts));
    rows.extend(servers::wheel_rows(
        wheel,
        figures::criterion_us("dispatch", "d_read_file_4k"),
        design.map(|d| d.1),
    ));
    rows.extend(figures::batch_rows(&printed.scale));
    rows.extend(figures::plugin_rows());
    rows.extend(figures::sandbox_rows());
    rows.extend(figures::secrets_rows());
    rows.extend(figures::policy_rows());
    rows.extend(figures::load_rows(&start_counts));
    rows.extend(servers::roundtrip_rows(&printed.roundtrip));
    rows.extend(mcp_table_rows(&measured));
    rows.extend(scale_out::rows(&printed.scale_out));
    rows.extend(startup.rows(&mut skipped));
    rows.extend(discovery::rows(&peers, &toolhost, &mut skipped));

    let table = table::render(&rows, &skipped);
    println!("\n{table}");
    if write_readme {
        table::write_page(&table)?;
    }
    Ok(())
}

/// The workspace the MCP servers measured serve: one small file, `a.txt`.
fn mcp_workspace(peers: &Path) -> Result<std::path::PathBuf> {
    let ws = peers.join("ws");
    io(
        "prepare the MCP workspace",
        std::fs::create_dir_all(&ws).and_then(|()| std::fs::write(ws.join("a.txt"), "abc")),
    )?;
    Ok(ws)
}

/// `toolhost serve --mcp` over `ws` with a configuration, as the benches start it.
fn serve_command<'a>(toolhost: &'a Path, ws: &'a Path) -> impl Fn(&Path) -> Vec<String> + 'a {
    move |config: &Path| -> Vec<String> {
        let mut args = vec![toolhost.display().to_string()];
        args.extend(["serve", "--mcp", "--workspace"].map(String::from));
        args.push(ws.display().to_string());
        args.push("--config".into());
        args.push(config.display().to_string());
        args
    }
}

/// For a bench of some rows alone: the toolhost that ships, built, and `target/peers`;
/// (peers, toolhost).
fn shipped() -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    run(
        "build the toolhost that ships (profile dist: fat LTO)",
        cargo().args(["build", "--profile", "dist", "-p", "toolhost"]),
    )?;
    let peers = root().join("target/peers");
    io("make target/peers", std::fs::create_dir_all(&peers))?;
    Ok((peers, root().join("target/dist/toolhost")))
}

/// `--mcp-only`: the MCP servers side by side and the gateway's rows, against the
/// toolhost that ships.
fn mcp_only_bench() -> Result {
    let (peers, toolhost) = shipped()?;
    let mut skipped = Vec::new();
    let ws = mcp_workspace(&peers)?;
    let configs = servers::plugin_configs(&peers)?;
    let serve = serve_command(&toolhost, &ws);
    let measured = servers::mcp_servers(&peers, &serve, &configs, &mut skipped);
    println!("\n{}", table::render(&mcp_table_rows(&measured), &skipped));
    Ok(())
}

/// `--discovery-only`: progressive discovery's rows alone, against the toolhost that ships.
pub fn discovery_only() -> Result {
    let (peers, toolhost) = shipped()?;
    let mut skipped = Vec::new();
    let rows = discovery::rows(&peers, &toolhost, &mut skipped);
    println!("\n{}", table::render(&rows, &skipped));
    Ok(())
}

/// The rows of what the `mcp_servers` bench measured: the servers side by side, their
/// instructions, over HTTP, and the gateway's.
fn mcp_table_rows(measured: &mcp_text::Measured) -> Vec<table::Row> {
    let (mcp, counts) = (&measured.best, &measured.counts);
    let mut rows = servers::mcp_rows(mcp, &figures::call_floors());
    rows.extend(servers::count_rows(counts));
    rows.extend(servers::mcp_http_rows(mcp));
    rows.extend(gateway::rows(mcp, &measured.rounds, &measured.own, counts));
    rows.extend(gateway::peer_rows(
        mcp,
        measured.contextforge_setup,
        &measured.failed,
    ));
    rows.extend(gateway::fan_out_rows(&measured.fan_out));
    rows
}
