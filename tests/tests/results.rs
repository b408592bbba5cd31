//! Results: size caps with spooling, live output, provider message shapes.
#![cfg(test)]

mod common;

use common::{Fixture, next_of};
use dispatcher_core::ClassModes;
use dispatcher_core::{
    ConfirmationPolicy, Dispatcher, DispatcherConfig, ErrorClass, SessionSpec, ToolUse,
    anthropic_user_message, openai_tool_messages,
};
use serde_json::json;

fn dispatcher(config: DispatcherConfig) -> Dispatcher {
    let d = Dispatcher::builder()
        .config(config)
        .policy(ConfirmationPolicy {
            default: ClassModes::all_auto(),
            ..ConfirmationPolicy::default()
        })
        .build();
    for f in builtin_tools::factories() {
        d.register(f).unwrap();
    }
    d
}

fn small_caps() -> DispatcherConfig {
    DispatcherConfig {
        results: dispatcher_core::ResultLimits {
            max_chars: 1000,
            preview_chars: 50,
            ..dispatcher_core::ResultLimits::default()
        },
        ..DispatcherConfig::default()
    }
}

fn shell(id: &str, command: &str) -> ToolUse {
    ToolUse::new(id, "shell", json!({ "command": command }))
}

#[tokio::test]
async fn large_result_is_spooled_and_read_file_can_page_through_it() {
    let d = dispatcher(small_caps());
    let fx = Fixture::new(d.clone());
    let r = d.dispatch(shell("tu_big", "seq 1 5000"), &fx.session).await;
    assert!(!r.is_error(), "{r:?}");
    let text = r.text();
    let path = ".toolhost/sessions/s1/tool-results/tu_big.txt";
    assert!(text.starts_with("1\n2\n3\n"), "a preview first: {text}");
    assert!(
        text.contains(
            "Output too large for one result: 23,907 characters in 5,001 lines (the limit is 1,000)"
        ),
        "{text}"
    );
    assert!(text.contains(path), "{text}");
    assert!(text.chars().count() < 1000, "{text}");
    assert_eq!(r.metadata["spooled_output"]["path"], path);
    assert_eq!(
        r.metadata["exit_code"], 0,
        "the tool's own metadata is kept"
    );

    // Nothing is lost: the file holds the whole output…
    let full = std::fs::read_to_string(fx.path(path)).unwrap();
    assert!(full.starts_with("1\n2\n") && full.contains("\n5000\n"));
    assert_eq!(full.chars().count(), 23_907);
    // …and the model can page through it.
    let page = d
        .dispatch(
            ToolUse::new(
                "tu_page",
                "read_file",
                json!({"path": path, "offset": 2500, "limit": 3}),
            ),
            &fx.session,
        )
        .await;
    assert_eq!(page.text(), "2500\n2501\n2502");
    // The spool directory stays out of version control.
    assert_eq!(
        std::fs::read_to_string(fx.path(".toolhost/.gitignore"))
            .unwrap()
            .lines()
            .last(),
        Some("*")
    );
}

#[tokio::test]
async fn result_under_the_cap_is_untouched() {
    let d = dispatcher(small_caps());
    let fx = Fixture::new(d.clone());
    let r = d.dispatch(shell("t", "seq 1 3"), &fx.session).await;
    assert_eq!(r.text(), "1\n2\n3\n[exit code: 0]");
    assert!(!fx.path(".toolhost").exists());
}

#[tokio::test]
async fn per_tool_result_cap_wins_over_the_default() {
    let d = dispatcher(DispatcherConfig {
        results: dispatcher_core::ResultLimits {
            per_tool: [("shell".to_string(), 20)].into(),
            ..small_caps().results
        },
        ..small_caps()
    });
    let fx = Fixture::new(d.clone());
    let r = d.dispatch(shell("t", "seq 1 30"), &fx.session).await;
    assert!(r.text().contains("(the limit is 20)"), "{}", r.text());
    fx.write("f.txt", &"x".repeat(500));
    let r = d
        .dispatch(
            ToolUse::new("t2", "read_file", json!({"path": "f.txt"})),
            &fx.session,
        )
        .await;
    assert_eq!(r.text().len(), 500, "read_file keeps the default cap");
}

#[tokio::test]
async fn spool_failure_cuts_the_result_and_says_why() {
    let d = dispatcher(small_caps());
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let session = d
        .open_session(SessionSpec::new("s", dir.path()).data_dir(&blocker))
        .unwrap();
    let r = d.dispatch(shell("t", "seq 1 5000"), &session).await;
    assert!(!r.is_error());
    assert!(
        r.text().contains("Output cut") && r.text().contains("could not be saved"),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn session_data_dir_outside_the_workspace_gets_the_spool_file() {
    let d = dispatcher(small_caps());
    let (ws, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let session = d
        .open_session(SessionSpec::new("s", ws.path()).data_dir(data.path()))
        .unwrap();
    assert_eq!(session.data_dir(), data.path());
    let r = d.dispatch(shell("t", "seq 1 5000"), &session).await;
    let file = data.path().join("tool-results/t.txt");
    assert!(
        r.text().contains(&file.display().to_string()),
        "{}",
        r.text()
    );
    assert!(file.is_file());
}

#[tokio::test]
async fn shell_streams_output_deltas_while_it_runs() {
    let d = dispatcher(DispatcherConfig::default());
    let fx = Fixture::new(d.clone());
    let mut events = fx.session.subscribe();
    let session = fx.session.clone();
    let d2 = d.clone();
    let run = tokio::spawn(async move {
        d2.dispatch(
            shell("t", "echo one; sleep 1; echo two; sleep 0.3; echo oops >&2"),
            &session,
        )
        .await
    });
    let first = next_of(&mut events, "tool.output_delta").await;
    assert_eq!(first.to_json()["chunk"], "one\n");
    assert!(
        !run.is_finished(),
        "the first chunk arrived while the command ran"
    );
    let mut chunks = vec![first.to_json()["chunk"].as_str().unwrap().to_string()];
    loop {
        let e = common::next_of_any(&mut events).await;
        match e.kind.name() {
            "tool.output_delta" => chunks.push(e.to_json()["chunk"].as_str().unwrap().to_string()),
            "tool.completed" => break,
            _ => {}
        }
    }
    assert_eq!(chunks.concat(), "one\ntwo\n[stderr] oops\n");
    assert!(!run.await.unwrap().is_error());
}

#[tokio::test]
async fn results_render_as_anthropic_and_openai_messages_keeping_call_ids() {
    let d = dispatcher(DispatcherConfig::default());
    let fx = Fixture::new(d.clone());
    let results = d
        .dispatch_batch(
            vec![
                ToolUse::new("toolu_a", "list_dir", json!({"path": "."})),
                ToolUse::new("toolu_b", "no_such_tool", json!({})),
            ],
            &fx.session,
        )
        .await;
    assert_eq!(results[1].error_class, Some(ErrorClass::NotFound));

    let anthropic = anthropic_user_message(&results);
    assert_eq!(anthropic["role"], "user");
    let blocks = anthropic["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0]["type"], "tool_result");
    assert_eq!(blocks[0]["tool_use_id"], "toolu_a");
    assert!(blocks[0].get("is_error").is_none());
    assert_eq!(blocks[1]["tool_use_id"], "toolu_b");
    assert_eq!(blocks[1]["is_error"], true);
    assert_eq!(blocks[1]["content"][0]["type"], "text");
    // Only what the API accepts: host-side fields stay out.
    assert!(blocks[1].get("error_class").is_none() && blocks[1].get("metadata").is_none());

    let openai = openai_tool_messages(&results);
    assert_eq!(openai.len(), 2);
    assert_eq!(openai[0]["role"], "tool");
    assert_eq!(openai[0]["tool_call_id"], "toolu_a");
    assert_eq!(openai[1]["tool_call_id"], "toolu_b");
    assert!(
        openai[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("Tool 'no_such_tool' not found")
    );
}

#[tokio::test]
async fn spooling_never_overwrites_an_earlier_result_with_the_same_id() {
    let d = dispatcher(small_caps());
    let fx = Fixture::new(d.clone());
    d.dispatch(shell("same", "seq 1 3000"), &fx.session).await;
    let r = d.dispatch(shell("same", "seq 5 3000"), &fx.session).await;
    let dir = fx.path(".toolhost/sessions/s1/tool-results");
    assert!(r.text().contains("tool-results/same-2.txt"), "{}", r.text());
    assert!(
        std::fs::read_to_string(dir.join("same.txt"))
            .unwrap()
            .starts_with("1\n")
    );
    assert!(
        std::fs::read_to_string(dir.join("same-2.txt"))
            .unwrap()
            .starts_with("5\n")
    );
}

#[tokio::test]
async fn the_side_effect_record_reaches_the_event_and_the_result_but_not_the_model() {
    let d = dispatcher(DispatcherConfig::default());
    let fx = Fixture::new(d.clone());
    let mut events = fx.session.subscribe();
    let write = d
        .dispatch(
            ToolUse::new(
                "tu_w",
                "write_file",
                json!({"path": "notes/a.txt", "content": "x"}),
            ),
            &fx.session,
        )
        .await;
    assert!(!write.is_error(), "{}", write.text());
    assert_eq!(write.record.files_modified, ["notes/a.txt"]);
    assert_eq!(write.to_json()["files_modified"], json!(["notes/a.txt"]));
    let completed = next_of(&mut events, "tool.completed").await;
    assert_eq!(
        completed.to_json()["files_modified"],
        json!(["notes/a.txt"])
    );

    let run = d.dispatch(shell("tu_s", "echo hi"), &fx.session).await;
    assert!(!run.is_error(), "{}", run.text());
    assert_eq!(run.record.command_executed.as_deref(), Some("echo hi"));
    assert_eq!(run.to_json()["command_executed"], "echo hi");
    let completed = next_of(&mut events, "tool.completed").await;
    assert_eq!(completed.to_json()["command_executed"], "echo hi");

    let read = d
        .dispatch(
            ToolUse::new("tu_r", "read_file", json!({"path": "notes/a.txt"})),
            &fx.session,
        )
        .await;
    assert!(read.record.is_empty(), "a read modifies nothing");
    assert!(read.to_json().get("files_modified").is_none());

    // The provider renderings carry what the model reads, not the host-side record.
    let msg = anthropic_user_message(&[write, run]);
    assert!(msg["content"][0].get("files_modified").is_none());
    assert!(msg["content"][1].get("command_executed").is_none());
}
