//! Policies as code: Cedar policies over who calls, which tool and what its arguments say
//! decide run, ask or refuse through the whole pipeline, only ever narrowing the tables;
//! policies that do not fit the tools' schemas are refused at load with file and line, and
//! a tool that changes under a policy that no longer fits has its calls refused.
#![cfg(test)]

mod common;

use std::sync::Arc;

use common::{Scripted, allow_all, builtins};
use dispatcher_core::{
    CallerFacts, Decision, Dispatcher, RequestFacts, Session, SessionSpec, ToolDefinition, ToolUse,
};
use policies::{Options, Policies, PolicyError, Source};
use serde_json::{Value, json};
use tool_api::{SideEffect, Tool, ToolContext, ToolError, ToolFactory, ToolOutput};

/// A tool that answers `ran`, with the definition it is given.
struct Stand(ToolDefinition);

struct Ran;

impl Tool for Ran {
    fn execute(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("ran"))
    }
}

impl ToolFactory for Stand {
    fn definition(&self) -> &ToolDefinition {
        &self.0
    }
    fn create(&self) -> Result<Box<dyn Tool>, ToolError> {
        Ok(Box::new(Ran))
    }
    fn source(&self) -> &str {
        "plugin:stand"
    }
    fn version(&self) -> Option<&str> {
        Some("2.1.0")
    }
    fn pinned(&self) -> bool {
        self.0.name.starts_with("github__")
    }
}

fn tickets_update() -> ToolDefinition {
    ToolDefinition::new(
        "tickets__update",
        "Updates a ticket.",
        SideEffect::Write,
        json!({
            "type": "object",
            "properties": {
                "ticket": {
                    "type": "object",
                    "properties": {
                        "project": {"type": "string"},
                        "id": {"type": "integer"},
                        "labels": {"type": "array", "items": {"type": "string"}}
                    },
                    "required": ["project", "id"]
                },
                "status": {"enum": ["open", "closed"]},
                "priority": {"type": "number"},
                "assignees": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "team": {"type": "string"}},
                        "required": ["name", "team"]
                    }
                },
                "note": {"type": "string"},
                "extra": {"type": ["string", "integer"]}
            },
            "required": ["ticket", "status"]
        }),
    )
}

fn delete_repo() -> ToolDefinition {
    ToolDefinition::new(
        "github__delete_repo",
        "Deletes a repository.",
        SideEffect::Network,
        json!({
            "type": "object",
            "properties": {"repo": {"type": "string"}},
            "required": ["repo"]
        }),
    )
}

/// A dispatcher with the built-in tools and the two above, every class `auto` in the
/// tables (policies alone decide), and a confirmer that answers every question "deny" (an
/// asked call ends "User denied").
fn dispatcher() -> Dispatcher {
    let d = Dispatcher::builder()
        .policy(allow_all())
        .confirmer(Arc::new(Scripted(Decision::Deny)))
        .build();
    builtins(&d);
    d.register(Arc::new(Stand(tickets_update()))).unwrap();
    d.register(Arc::new(Stand(delete_repo()))).unwrap();
    d
}

/// Loads `text` as one policy file (`main.cedar`) against the dispatcher's tools.
fn load(d: &Dispatcher, dir: &std::path::Path, text: &str) -> Result<Policies, PolicyError> {
    let file = dir.join("main.cedar");
    std::fs::write(&file, text).unwrap();
    let tools = d.all_definitions();
    let source = Source {
        path: file,
        name: "main.cedar".into(),
    };
    Policies::load(&[source], Options::default(), &tools, &[])
}

/// Who calls.
#[derive(Clone, Copy)]
struct Caller {
    principal: &'static str,
    groups: &'static [&'static str],
    claims: &'static [(&'static str, &'static str)],
}

const ALICE: Caller = Caller {
    principal: "alice",
    groups: &["support"],
    claims: &[("department", "support"), ("level", "3")],
};
const BOB: Caller = Caller {
    principal: "bob",
    groups: &["dev"],
    claims: &[],
};

fn session(d: &Dispatcher, dir: &std::path::Path, caller: Caller) -> Session {
    let facts = CallerFacts {
        groups: caller.groups.iter().map(|g| g.to_string()).collect(),
        claims: caller
            .claims
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect(),
    };
    d.open_session(
        SessionSpec::new(format!("s-{}", caller.principal), dir)
            .principal(caller.principal)
            .caller(facts),
    )
    .unwrap()
}

/// What became of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Run,
    Ask,
    /// Refused, the message naming this.
    Refuse(&'static str),
}

async fn call(d: &Dispatcher, session: &Session, tool: &str, args: Value) -> (Outcome, String) {
    let mut invocation = d.invocation(ToolUse::new("tu", tool, args), session);
    invocation.extend(RequestFacts {
        era: "2025",
        transport: "http",
    });
    let block = invocation.run().await;
    let text = block.text();
    let outcome = if !block.is_error() {
        Outcome::Run
    } else if text.contains("User denied") {
        Outcome::Ask
    } else {
        Outcome::Refuse("")
    };
    (outcome, text)
}

/// A base that lets everything else run.
const BASE: &str = "permit(principal, action, resource);\n";

/// (what the row shows, policies, caller, tool, arguments, outcome).
type Row = (
    &'static str,
    &'static str,
    Caller,
    &'static str,
    fn() -> Value,
    Outcome,
);

fn rows() -> Vec<Row> {
    use Outcome::*;
    vec![
        // Nothing permits: Cedar's default.
        (
            "no permit refuses",
            "",
            ALICE,
            "read_file",
            || json!({"path": "a"}),
            Refuse("no permit policy matches"),
        ),
        (
            "a base permit runs",
            BASE,
            ALICE,
            "read_file",
            || json!({"path": "a"}),
            Run,
        ),
        // The caller.
        (
            "principal ==",
            r#"permit(principal == Caller::"alice", action, resource);"#,
            ALICE,
            "read_file",
            || json!({"path": "a"}),
            Run,
        ),
        (
            "principal == other",
            r#"permit(principal == Caller::"alice", action, resource);"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Refuse("no permit"),
        ),
        (
            "principal in group",
            r#"permit(principal in Group::"support", action, resource);"#,
            ALICE,
            "read_file",
            || json!({"path": "a"}),
            Run,
        ),
        (
            "not in group",
            r#"permit(principal in Group::"support", action, resource);"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Refuse("no permit"),
        ),
        (
            "groups attribute",
            r#"permit(principal, action, resource) when { principal.groups.contains("dev") };"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Run,
        ),
        (
            "claim tag",
            r#"permit(principal, action, resource) when { principal.hasTag("department") && principal.getTag("department") == "support" };"#,
            ALICE,
            "read_file",
            || json!({"path": "a"}),
            Run,
        ),
        (
            "missing claim tag",
            r#"permit(principal, action, resource) when { principal.hasTag("department") && principal.getTag("department") == "support" };"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Refuse("no permit"),
        ),
        (
            "name attribute",
            r#"permit(principal, action, resource) when { principal.name == "bob" };"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Run,
        ),
        // The tool.
        (
            "action ==",
            r#"permit(principal, action == Action::"read_file", resource);"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Run,
        ),
        (
            "action == other",
            r#"permit(principal, action == Action::"read_file", resource);"#,
            BOB,
            "write_file",
            || json!({"path": "a", "content": ""}),
            Refuse("no permit"),
        ),
        (
            "action in list",
            r#"permit(principal, action in [Action::"read_file", Action::"list_dir"], resource);"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Run,
        ),
        (
            "side effect",
            r#"permit(principal, action, resource); forbid(principal, action, resource) when { resource.side_effect == "network" };"#,
            BOB,
            "github__delete_repo",
            || json!({"repo": "x"}),
            Refuse("forbids this call"),
        ),
        (
            "side effect other",
            r#"permit(principal, action, resource); forbid(principal, action, resource) when { resource.side_effect == "network" };"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Run,
        ),
        (
            "source",
            r#"permit(principal, action, resource) when { resource.source == "builtin" };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 1}, "status": "open"}),
            Refuse("no permit"),
        ),
        (
            "version",
            r#"permit(principal, action, resource) when { resource.version == "2.1.0" };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 1}, "status": "open"}),
            Run,
        ),
        (
            "pinned",
            r#"permit(principal, action, resource) when { resource.pinned };"#,
            BOB,
            "github__delete_repo",
            || json!({"repo": "x"}),
            Run,
        ),
        (
            "not pinned",
            r#"permit(principal, action, resource) when { resource.pinned };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 1}, "status": "open"}),
            Refuse("no permit"),
        ),
        (
            "resource name",
            r#"permit(principal, action, resource) when { resource.name like "tickets__*" };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 1}, "status": "open"}),
            Run,
        ),
        // Arguments, nested objects and arrays.
        (
            "nested attribute",
            r#"permit(principal in Group::"support", action == Action::"tickets__update", resource) when { context.arguments.ticket.project == "SUP" };"#,
            ALICE,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 7}, "status": "open"}),
            Run,
        ),
        (
            "nested attribute other",
            r#"permit(principal in Group::"support", action == Action::"tickets__update", resource) when { context.arguments.ticket.project == "SUP" };"#,
            ALICE,
            "tickets__update",
            || json!({"ticket": {"project": "OPS", "id": 7}, "status": "open"}),
            Refuse("no permit"),
        ),
        (
            "integer",
            r#"permit(principal, action == Action::"tickets__update", resource) when { context.arguments.ticket.id > 100 };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 7}, "status": "open"}),
            Refuse("no permit"),
        ),
        (
            "number as decimal",
            r#"permit(principal, action == Action::"tickets__update", resource) when { context.arguments has priority && context.arguments.priority.lessThan(decimal("2.5")) };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 7}, "status": "open", "priority": 1.5}),
            Run,
        ),
        (
            "array of strings",
            r#"permit(principal, action == Action::"tickets__update", resource) when { context.arguments.ticket has labels && context.arguments.ticket.labels.contains("urgent") };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 7, "labels": ["urgent", "bug"]}, "status": "open"}),
            Run,
        ),
        (
            "array of records",
            r#"permit(principal, action == Action::"tickets__update", resource) when { context.arguments has assignees && context.arguments.assignees.contains({name: "carol", team: "sre"}) };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 7}, "status": "open", "assignees": [{"name": "carol", "team": "sre"}]}),
            Run,
        ),
        (
            "enum",
            r#"permit(principal, action, resource); forbid(principal, action == Action::"tickets__update", resource) when { context.arguments.status == "closed" };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 7}, "status": "closed"}),
            Refuse("forbids this call"),
        ),
        (
            "missing optional, guarded",
            r#"permit(principal, action == Action::"tickets__update", resource) unless { context.arguments has note && context.arguments.note like "*secret*" };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 7}, "status": "open"}),
            Run,
        ),
        (
            "present optional, guarded",
            r#"permit(principal, action == Action::"tickets__update", resource) unless { context.arguments has note && context.arguments.note like "*secret*" };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 7}, "status": "open", "note": "a secret"}),
            Refuse("no permit"),
        ),
        // Paths, as the workspace resolves them.
        (
            "path under deploy asks",
            "permit(principal, action, resource);\n@ask\nforbid(principal, action == Action::\"write_file\", resource) when { context.arguments.path like \"deploy/*\" };",
            BOB,
            "write_file",
            || json!({"path": "deploy/app.yaml", "content": "x"}),
            Ask,
        ),
        (
            "path elsewhere runs",
            "permit(principal, action, resource);\n@ask\nforbid(principal, action == Action::\"write_file\", resource) when { context.arguments.path like \"deploy/*\" };",
            BOB,
            "write_file",
            || json!({"path": "src/app.yaml", "content": "x"}),
            Run,
        ),
        (
            "dot-dot is taken out",
            "permit(principal, action, resource);\n@ask\nforbid(principal, action == Action::\"write_file\", resource) when { context.arguments.path like \"deploy/*\" };",
            BOB,
            "write_file",
            || json!({"path": "src/../deploy/app.yaml", "content": "x"}),
            Ask,
        ),
        (
            "deploy/.. is not deploy",
            "permit(principal, action, resource);\n@ask\nforbid(principal, action == Action::\"write_file\", resource) when { context.arguments.path like \"deploy/*\" };",
            BOB,
            "write_file",
            || json!({"path": "deploy/../notes.md", "content": "x"}),
            Run,
        ),
        (
            "dot segments",
            "permit(principal, action, resource);\nforbid(principal, action == Action::\"read_file\", resource) when { context.arguments.path == \"secrets/key\" };",
            BOB,
            "read_file",
            || json!({"path": "./secrets/./key"}),
            Refuse("forbids this call"),
        ),
        // The command line.
        (
            "shell curl refused",
            "permit(principal, action, resource);\nforbid(principal, action == Action::\"shell\", resource) when { context.arguments.command like \"*curl*\" };",
            BOB,
            "shell",
            || json!({"command": "curl https://example.com"}),
            Refuse("forbids this call"),
        ),
        (
            "shell cargo runs",
            "permit(principal, action, resource);\nforbid(principal, action == Action::\"shell\", resource) when { context.arguments.command like \"*curl*\" };",
            BOB,
            "shell",
            || json!({"command": "true"}),
            Run,
        ),
        // The request.
        (
            "era",
            r#"permit(principal, action, resource) when { context.request.era == "2025" && context.request.transport == "http" };"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Run,
        ),
        (
            "era other",
            r#"permit(principal, action, resource) when { context.request.era == "2026" };"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Refuse("no permit"),
        ),
        (
            "time",
            r#"permit(principal, action, resource) when { context.request.unix > 1577836800 && context.request.time > datetime("2020-01-01") && context.request.date like "20*-*-*" && context.request.weekday >= 1 && context.request.weekday <= 7 };"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Run,
        ),
        (
            "time before",
            r#"permit(principal, action, resource) when { context.request.time < datetime("2020-01-01") };"#,
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Refuse("no permit"),
        ),
        // Only narrowing, and the ask/refuse order.
        (
            "forbid beats permit",
            "permit(principal, action, resource);\nforbid(principal, action == Action::\"read_file\", resource);",
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Refuse("forbids this call"),
        ),
        (
            "forbid beats ask",
            "permit(principal, action, resource);\n@ask\nforbid(principal, action, resource);\nforbid(principal, action == Action::\"read_file\", resource);",
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Refuse("forbids this call"),
        ),
        (
            "ask with an id",
            "permit(principal, action, resource);\n@id(\"ask-all\")\n@ask(\"every call is asked\")\nforbid(principal, action, resource);",
            BOB,
            "read_file",
            || json!({"path": "a"}),
            Ask,
        ),
        (
            "a failing policy refuses",
            r#"permit(principal, action, resource); forbid(principal, action == Action::"tickets__update", resource) when { context.arguments.ticket.id + 9223372036854775807 > 0 };"#,
            BOB,
            "tickets__update",
            || json!({"ticket": {"project": "SUP", "id": 7}, "status": "open"}),
            Refuse("could not be evaluated"),
        ),
    ]
}

#[tokio::test]
async fn the_table_of_policies_calls_and_outcomes_holds() {
    let d = dispatcher();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("deploy")).unwrap();
    std::fs::create_dir_all(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("a"), "a").unwrap();
    let rows = rows();
    assert!(rows.len() >= 40, "{} rows", rows.len());
    let mut failed = Vec::new();
    for (what, text, caller, tool, args, expected) in rows {
        let policies = match load(&d, dir.path(), text) {
            Ok(p) => p,
            Err(e) => {
                failed.push(format!("{what}: did not load: {e}"));
                continue;
            }
        };
        d.set_rules(Some(Arc::new(policies)));
        let session = session(&d, dir.path(), caller);
        let (outcome, text) = call(&d, &session, tool, args()).await;
        d.close_session(session.id()).await;
        let ok = match (&expected, &outcome) {
            (Outcome::Refuse(says), Outcome::Refuse(_)) => text.contains(says),
            _ => expected == outcome,
        };
        if !ok {
            failed.push(format!(
                "{what}: expected {expected:?}, got {outcome:?}: {text}"
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// (what the row shows, policies, what the refusal says: its place first).
const REFUSED_AT_LOAD: &[(&str, &str, &[&str])] = &[
    (
        "syntax",
        "permit(principal, action, resource)\nwhen { true",
        &["main.cedar:2:"],
    ),
    (
        "unknown argument",
        "permit(principal, action == Action::\"write_file\", resource)\n  when { context.arguments.file == \"x\" };",
        &[
            "main.cedar:2:",
            "for tool \"write_file\"",
            "context.arguments has: path, content",
        ],
    ),
    (
        "nested unknown argument",
        "permit(principal, action == Action::\"tickets__update\", resource)\n  when { context.arguments.ticket.owner == \"x\" };",
        &["main.cedar:2:", "owner"],
    ),
    (
        "type mismatch",
        "permit(principal, action == Action::\"tickets__update\", resource)\n  when { context.arguments.ticket.id == \"7\" };",
        &["main.cedar:2:", "for tool \"tickets__update\""],
    ),
    (
        "optional read without has",
        "permit(principal, action == Action::\"tickets__update\", resource)\n  when { context.arguments.note == \"x\" };",
        &["main.cedar:2:", "note"],
    ),
    (
        "an argument of several types",
        "permit(principal, action == Action::\"tickets__update\", resource)\n  when { context.arguments.extra == \"x\" };",
        &[
            "main.cedar:2:",
            "`extra` is not readable by policies: it may be one of several types",
        ],
    ),
    (
        "unknown tool",
        "permit(principal, action == Action::\"tickets_update\", resource);",
        &[
            "main.cedar:1:",
            "names the tool \"tickets_update\", which does not exist",
            "tickets__update",
        ],
    ),
    (
        "unknown tool attribute",
        "permit(principal, action, resource) when { resource.owner == \"x\" };",
        &[
            "main.cedar:1:44:",
            "resource has: name, toolset, source, side_effect, version, pinned",
        ],
    ),
    (
        "an argument read for every tool",
        "permit(principal, action, resource) when { context.arguments.path == \"x\" };",
        &["main.cedar:1:", "for tool \""],
    ),
    (
        "unknown entity type",
        "permit(principal == User::\"alice\", action, resource);",
        &["main.cedar:1:", "User"],
    ),
    (
        "@ask on a permit",
        "@ask\npermit(principal, action, resource);",
        &["main.cedar:1:", "@ask marks a forbid policy"],
    ),
    (
        "template",
        "permit(principal == ?principal, action, resource);",
        &["main.cedar:1:", "template"],
    ),
    (
        "duplicate id",
        "@id(\"a\")\npermit(principal, action, resource);\n@id(\"a\")\nforbid(principal, action, resource);",
        &[
            "main.cedar:3:",
            "already the id of policy \"a\" (main.cedar:1)",
        ],
    ),
];

#[test]
fn a_policy_that_does_not_fit_is_refused_at_load_with_its_place_and_what_exists() {
    let d = dispatcher();
    let dir = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    for (what, text, says) in REFUSED_AT_LOAD {
        match load(&d, dir.path(), text) {
            Ok(_) => failed.push(format!("{what}: loaded")),
            Err(e) => {
                let message = e.to_string();
                if let Some(missing) = says.iter().find(|s| !message.contains(*s)) {
                    failed.push(format!("{what}: no {missing:?} in: {message}"));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The dispatcher with `text` in force, and a workspace.
fn with_policies(d: &Dispatcher, text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let policies = load(d, dir.path(), text).unwrap_or_else(|e| panic!("{e}"));
    d.set_rules(Some(Arc::new(policies)));
    dir
}

fn listed(d: &Dispatcher, session: &Session) -> Vec<String> {
    d.definitions_for_session(session)
        .into_iter()
        .map(|t| t.name)
        .collect()
}

#[tokio::test]
async fn a_tool_that_changes_under_a_policy_that_no_longer_fits_is_refused_until_it_fits() {
    let d = dispatcher();
    let dir = with_policies(
        &d,
        "permit(principal, action, resource);\n\
         @id(\"sup-only\")\n\
         forbid(principal, action == Action::\"tickets__update\", resource)\n\
           unless { context.arguments.ticket.project == \"SUP\" };",
    );
    let s = session(&d, dir.path(), BOB);
    let sup = || json!({"ticket": {"project": "SUP", "id": 1}, "status": "open"});
    assert_eq!(call(&d, &s, "tickets__update", sup()).await.0, Outcome::Run);

    // The server behind the tool renames `ticket.project`: the forbid cannot read it.
    let mut changed = tickets_update();
    changed.input_schema["properties"]["ticket"]["properties"] =
        json!({"space": {"type": "string"}, "id": {"type": "integer"}});
    changed.input_schema["properties"]["ticket"]["required"] = json!(["space", "id"]);
    assert!(d.unregister("tickets__update"));
    d.register(Arc::new(Stand(changed))).unwrap();
    let (outcome, text) = call(
        &d,
        &s,
        "tickets__update",
        json!({"ticket": {"space": "OPS", "id": 1}, "status": "open"}),
    )
    .await;
    assert_eq!(outcome, Outcome::Refuse(""), "{text}");
    assert!(
        text.contains("policy \"sup-only\" (main.cedar:2)")
            && text.contains("no longer fits the tool")
            && text.contains("project"),
        "{text}"
    );
    assert!(!listed(&d, &s).contains(&"tickets__update".to_string()));
    // Every other tool is untouched.
    assert_eq!(
        call(&d, &s, "read_file", json!({"path": "a"})).await.0,
        Outcome::Refuse("")
    );
    std::fs::write(dir.path().join("a"), "a").unwrap();
    assert_eq!(
        call(&d, &s, "read_file", json!({"path": "a"})).await.0,
        Outcome::Run
    );

    // It fits again: its calls are decided again.
    assert!(d.unregister("tickets__update"));
    d.register(Arc::new(Stand(tickets_update()))).unwrap();
    assert_eq!(call(&d, &s, "tickets__update", sup()).await.0, Outcome::Run);
    assert!(listed(&d, &s).contains(&"tickets__update".to_string()));
}

#[tokio::test]
async fn listings_leave_out_the_tools_no_call_of_the_caller_could_run() {
    let d = dispatcher();
    let dir = with_policies(
        &d,
        "permit(principal, action, resource) when { resource.side_effect != \"write\" };\n\
         forbid(principal == Caller::\"bob\", action == Action::\"github__delete_repo\", resource);\n\
         forbid(principal, action == Action::\"shell\", resource) when { context.arguments.command like \"*curl*\" };\n\
         permit(principal in Group::\"support\", action == Action::\"tickets__update\", resource)\n\
           when { context.arguments.ticket.project == \"SUP\" };",
    );
    let (alice, bob) = (session(&d, dir.path(), ALICE), session(&d, dir.path(), BOB));
    let (alice, bob) = (listed(&d, &alice), listed(&d, &bob));
    let sees = |list: &[String], tool: &str| list.iter().any(|t| t == tool);
    // Forbidden for bob whatever he asks; a forbid that depends on the arguments hides
    // nothing.
    assert!(!sees(&bob, "github__delete_repo") && sees(&alice, "github__delete_repo"));
    assert!(sees(&bob, "shell") && sees(&alice, "shell"));
    // A permit only some callers have, depending on the arguments.
    assert!(sees(&alice, "tickets__update") && !sees(&bob, "tickets__update"));
    // No permit for writes at all.
    assert!(!sees(&alice, "write_file") && !sees(&bob, "write_file"));
    assert!(sees(&bob, "read_file"));
}

#[derive(Default)]
struct Audit(std::sync::Mutex<Vec<dispatcher_core::audit::AuditEntry>>);

impl dispatcher_core::audit::AuditSink for Audit {
    fn record(&self, entry: &dispatcher_core::audit::AuditEntry) {
        self.0.lock().unwrap().push(entry.clone());
    }
}

#[tokio::test]
async fn a_decision_names_its_policy_in_the_result_and_the_audit_entry() {
    let audit = Arc::new(Audit::default());
    let d = Dispatcher::builder()
        .policy(allow_all())
        .audit(audit.clone())
        .build();
    builtins(&d);
    let dir = with_policies(
        &d,
        "@id(\"readers\")\npermit(principal, action == Action::\"read_file\", resource);\n\
         @id(\"no-secrets\")\nforbid(principal, action, resource) when { context.arguments has path && context.arguments.path like \"secrets/*\" };",
    );
    std::fs::write(dir.path().join("a"), "a").unwrap();
    let s = session(&d, dir.path(), BOB);
    let (ran, _) = call(&d, &s, "read_file", json!({"path": "a"})).await;
    let (refused, text) = call(&d, &s, "read_file", json!({"path": "secrets/../secrets/k"})).await;
    assert_eq!((ran, refused), (Outcome::Run, Outcome::Refuse("")));
    assert_eq!(
        text,
        "Tool 'read_file' was refused by policy \"no-secrets\" (main.cedar:3): it forbids this call; change or remove that policy to allow it."
    );
    let entries = audit.0.lock().unwrap().clone();
    let rules: Vec<String> = entries
        .iter()
        .map(|e| match &e.decided_by {
            Some(dispatcher_core::DecidedBy::Policy { rule }) => rule.to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        rules,
        [
            "policy \"readers\" (main.cedar:1)",
            "policy \"no-secrets\" (main.cedar:3)"
        ]
    );
}

#[tokio::test]
async fn policies_only_narrow_the_tables() {
    let d = Dispatcher::builder()
        .policy(common::policy(
            "per_tool = { list_dir = \"deny\" }\ndefault = { write = \"prompt\" }",
        ))
        .confirmer(Arc::new(Scripted(Decision::Deny)))
        .build();
    builtins(&d);
    let dir = with_policies(&d, BASE);
    let s = session(&d, dir.path(), BOB);
    let (outcome, text) = call(&d, &s, "list_dir", json!({"path": "."})).await;
    assert!(
        outcome == Outcome::Refuse("") && text.contains("tool_confirmation.per_tool.list_dir"),
        "{text}"
    );
    let (outcome, _) = call(&d, &s, "write_file", json!({"path": "x", "content": ""})).await;
    assert_eq!(outcome, Outcome::Ask, "the table's prompt stays");
}

#[tokio::test]
async fn a_verdict_is_kept_only_for_the_same_caller_tool_and_values_read() {
    let d = dispatcher();
    let dir = with_policies(
        &d,
        "permit(principal, action, resource);\n\
         forbid(principal, action == Action::\"shell\", resource) when { context.arguments.command like \"*curl*\" };\n\
         forbid(principal == Caller::\"alice\", action == Action::\"shell\", resource) when { context.arguments.command == \"true\" };",
    );
    let (alice, bob) = (session(&d, dir.path(), ALICE), session(&d, dir.path(), BOB));
    let shell = |command: &str| json!({ "command": command });
    for _ in 0..2 {
        assert_eq!(
            call(&d, &bob, "shell", shell("curl x")).await.0,
            Outcome::Refuse("")
        );
        assert_eq!(call(&d, &bob, "shell", shell("true")).await.0, Outcome::Run);
        assert_eq!(
            call(&d, &alice, "shell", shell("true")).await.0,
            Outcome::Refuse("")
        );
        assert_eq!(
            call(&d, &alice, "shell", shell("echo")).await.0,
            Outcome::Run
        );
    }
    // A new set of policies decides afresh.
    let _dir = with_policies(&d, BASE);
    assert_eq!(
        call(&d, &alice, "shell", shell("true")).await.0,
        Outcome::Run
    );
}

/// The first ```cedar block of `doc` (relative to the repository), as written.
fn cedar_block(doc: &str) -> String {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(doc),
    )
    .unwrap();
    let start = doc.find("```cedar\n").expect("a cedar block") + "```cedar\n".len();
    let end = start + doc[start..].find("```").unwrap();
    doc[start..end].to_string()
}

fn documented_examples() -> String {
    cedar_block("docs/policies.md")
}

#[tokio::test]
async fn the_readmes_policies_load_and_decide_as_it_says() {
    let d = dispatcher();
    let dir = with_policies(&d, &cedar_block("README.md"));
    let bob = session(&d, dir.path(), BOB);
    let (_, text) = call(&d, &bob, "shell", json!({"command": "curl http://x"})).await;
    assert!(
        text.contains("refused by policy \"shell-never-curl\" (main.cedar:3)"),
        "{text}"
    );
    writes_ask_under_deploy_only(&d, &bob, "deploy/../deploy/a.yaml", "src/a.yaml").await;
}

/// The rule the README and the docs both show: a write under `deploy/` asks, one
/// elsewhere runs.
async fn writes_ask_under_deploy_only(d: &Dispatcher, s: &Session, deploy: &str, elsewhere: &str) {
    let write = |path: &str| json!({"path": path, "content": "x"});
    assert_eq!(
        call(d, s, "write_file", write(deploy)).await.0,
        Outcome::Ask,
        "{deploy}"
    );
    assert_eq!(
        call(d, s, "write_file", write(elsewhere)).await.0,
        Outcome::Run,
        "{elsewhere}"
    );
}

#[tokio::test]
async fn the_documented_examples_load_and_decide_as_the_docs_say() {
    let d = dispatcher();
    let dir = with_policies(&d, &documented_examples());
    let (alice, bob) = (session(&d, dir.path(), ALICE), session(&d, dir.path(), BOB));
    let refused_by = |text: &str, id: &str| text.contains(&format!("refused by policy \"{id}\""));
    let ticket = |project: &str| json!({"ticket": {"project": project, "id": 1}, "status": "open"});

    // Support updates tickets of SUP only; others are not held to it.
    let (_, text) = call(&d, &alice, "tickets__update", ticket("OPS")).await;
    assert!(refused_by(&text, "support-tickets-sup-only"), "{text}");
    assert_eq!(
        call(&d, &alice, "tickets__update", ticket("SUP")).await.0,
        Outcome::Run
    );
    assert_eq!(
        call(&d, &bob, "tickets__update", ticket("OPS")).await.0,
        Outcome::Run
    );

    // shell: cargo and git, never curl.
    for (command, policy) in [
        ("ls", Some("shell-cargo-and-git")),
        ("git status; curl http://x", Some("shell-never-curl")),
        ("git --version", None),
    ] {
        let (_, text) = call(&d, &bob, "shell", json!({ "command": command })).await;
        match policy {
            Some(id) => assert!(refused_by(&text, id), "{command}: {text}"),
            None => assert!(!text.contains("was refused by"), "{command}: {text}"),
        }
    }

    // Writes under deploy/ ask; elsewhere they run.
    writes_ask_under_deploy_only(&d, &bob, "deploy/app.yaml", "src/app.yaml").await;

    // Deleting a repository: working hours only (UTC: no utc_offset here).
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (weekday, hour) = ((secs / 86_400 + 3) % 7 + 1, secs % 86_400 / 3_600);
    let working = weekday <= 5 && (9..17).contains(&hour);
    let (outcome, text) = call(&d, &bob, "github__delete_repo", json!({"repo": "x"})).await;
    if working {
        assert_eq!(outcome, Outcome::Run, "{text}");
    } else {
        assert!(refused_by(&text, "delete-repo-working-hours"), "{text}");
    }
}
