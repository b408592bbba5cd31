//! `[policies]` in a running toolhost: Cedar files decide `serve --http` calls and
//! listings, see how the call came (era, transport), reload when a file changes (a file
//! that does not load leaves the running policies), refuse to start when they do not fit
//! the tools, and decide a mounted server's calls on its own arguments.
#![cfg(test)]
#![cfg(feature = "policies")]

use std::path::Path;

use serde_json::json;

mod common;
use common::{call, logged, serve_http, tools, until, workspace};

const POLICIES: &str = r#"@id("base")
permit(principal, action, resource);

@id("no-curl")
forbid(principal, action == Action::"shell", resource)
  when { context.arguments.command like "*curl*" };

@id("stateless-http-lists-nothing")
forbid(principal, action == Action::"list_dir", resource)
  when { context.request.transport == "http" && context.request.era == "2026" };

@id("no-patches")
forbid(principal, action == Action::"patch_file", resource);
"#;

fn write_policies(ws: &Path, text: &str) {
    // Written whole and renamed in, as editors save.
    let scratch = ws.join("policies/.main.cedar.new");
    std::fs::write(&scratch, text).unwrap();
    std::fs::rename(&scratch, ws.join("policies/main.cedar")).unwrap();
}

fn configure(ws: &Path, policies: &str) {
    std::fs::create_dir_all(ws.join("policies")).unwrap();
    write_policies(ws, policies);
    std::fs::write(
        ws.join("toolhost.toml"),
        "[tool_confirmation.default]\nexecute = \"auto\"\n\n[policies]\nfiles = [\"policies/\"]\n",
    )
    .unwrap();
}

fn text(result: &serde_json::Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn policies_decide_calls_and_listings_of_a_server_and_reload_with_their_files() {
    let ws = workspace();
    configure(ws.path(), POLICIES);
    let server = serve_http(ws.path(), &[]);
    let listed = tools(&server);
    assert!(!listed.contains(&"patch_file".to_string()), "{listed:?}");
    assert!(listed.contains(&"shell".to_string()), "{listed:?}");

    let curl = call(&server, "shell", json!({"command": "curl http://x"}));
    assert_eq!(curl["isError"], true);
    assert_eq!(
        text(&curl),
        "Tool 'shell' was refused by policy \"no-curl\" (policies/main.cedar:4): it forbids this call; change or remove that policy to allow it."
    );
    assert_eq!(
        call(&server, "shell", json!({"command": "true"}))["isError"],
        false
    );
    // The request as it came: stateless, over HTTP.
    let listing = call(&server, "list_dir", json!({}));
    assert!(
        text(&listing).contains("policy \"stateless-http-lists-nothing\" (policies/main.cedar:8)"),
        "{listing}"
    );

    // A changed file applies to the next call.
    write_policies(ws.path(), &POLICIES.replace("\"2026\"", "\"1999\""));
    until("list_dir allowed", || {
        call(&server, "list_dir", json!({}))["isError"] == false
    });
    // One that does not load leaves the running policies, saying where it is wrong.
    write_policies(
        ws.path(),
        &format!("{POLICIES}\nforbid(principal, action, resource"),
    );
    logged(
        &server,
        &["[policies] not reloaded, the running policies stay"],
    );
    logged(&server, &["policies/main.cedar:15:"]);
    assert_eq!(call(&server, "list_dir", json!({}))["isError"], false);
    assert!(!tools(&server).contains(&"patch_file".to_string()));
}

#[test]
fn a_start_with_policies_that_do_not_fit_the_tools_is_refused_with_their_place() {
    let ws = workspace();
    configure(
        ws.path(),
        "permit(principal, action == Action::\"write_file\", resource)\n  when { context.arguments.file like \"docs/*\" };\n",
    );
    let o = common::command(ws.path(), &["list"]).output().unwrap();
    let err = toolhost_tests::text(&o.stderr);
    assert!(!o.status.success(), "{err}");
    for says in [
        "[policies]",
        "policies/main.cedar:2:",
        "arguments.file",
        "context.arguments has: path, content",
    ] {
        assert!(err.contains(says), "no {says:?} in: {err}");
    }
}

#[test]
fn a_mounted_servers_calls_are_decided_on_their_own_arguments() {
    let (Some(node), Some(server)) = (
        toolhost_tests::peer("TOOLHOST_TEST_NODE"),
        toolhost_tests::peer("TOOLHOST_TEST_SERVER_EVERYTHING"),
    ) else {
        return;
    };
    let ws = workspace();
    let modules = server.ancestors().nth(4).unwrap().to_path_buf();
    configure(
        ws.path(),
        r#"permit(principal, action, resource)
  when { resource.source == "mcp:ev" && resource.toolset == "ev" && resource.version != "" && resource.pinned };
@id("no-drops")
forbid(principal, action == Action::"ev__echo", resource)
  when { context.arguments.message like "*drop table*" };
"#,
    );
    let mut config = std::fs::read_to_string(ws.path().join("toolhost.toml")).unwrap();
    config.push_str(&format!(
        "\n[[mcp_servers]]\nid = \"ev\"\nprefix = \"ev\"\ncommand = \"{}\"\nargs = [\"{}\", \"stdio\"]\nreadable_roots = [\"{}\"]\n",
        node.display(),
        server.display(),
        modules.display()
    ));
    std::fs::write(ws.path().join("toolhost.toml"), config).unwrap();
    let run = |message: &str| {
        let input = json!({ "message": message }).to_string();
        let o = common::command(ws.path(), &["call", "ev__echo", "--input", &input])
            .output()
            .unwrap();
        (
            o.status.success(),
            format!(
                "{}{}",
                toolhost_tests::text(&o.stdout),
                toolhost_tests::text(&o.stderr)
            ),
        )
    };
    let (ok, out) = run("hello");
    assert!(ok && out.contains("hello"), "{out}");
    let (ok, out) = run("please drop table users");
    assert!(
        !ok && out.contains("refused by policy \"no-drops\" (policies/main.cedar:3)"),
        "{out}"
    );
    // A built-in tool is no server's: nothing permits it.
    let o = common::command(ws.path(), &["call", "list_dir", "--input", "{}"])
        .output()
        .unwrap();
    let out = toolhost_tests::text(&o.stdout) + &toolhost_tests::text(&o.stderr);
    assert!(out.contains("no permit policy matches this call"), "{out}");
}
