//! The tasks of MCP 2025-11-25 (experimental, SEP-1686), on the wire, for the 2025-era
//! clients that still use them. The 2026-07-28 tasks extension ([`super::tasks`]) replaced
//! them, and the protocol library under the server (rmcp) knows only the extension, so
//! toolhost serves the 2025 wire itself, over the same task table:
//!
//! - `initialize` declares `capabilities.tasks` (`list`, `cancel`, `requests.tools.call`),
//!   and `tools/list` gives every tool `execution.taskSupport: "optional"` (any call can
//!   run as a task): [`declare`], [`offer`], applied by the transports to 2025-era answers.
//! - A `tools/call` with `params.task` (`{ttl}`) answers `{"task": Task}` at once and runs
//!   on; `tasks/get` answers the task, `tasks/result` waits for its end and answers the
//!   call's result (with `_meta` `io.modelcontextprotocol/related-task`) or its error,
//!   `tasks/list` lists the caller's tasks, `tasks/cancel` stops one and answers it.
//! - What the call asks its user goes to the client as any 2025-era question does
//!   (`elicitation/create` on its session).
//!
//! A task here has `ttl` and `pollInterval` (milliseconds), not the extension's `ttlMs` and
//! `pollIntervalMs`. A request of the 2026-07-28 era (its `_meta` names the protocol
//! version) is never renamed: there `tasks/result` and `tasks/list` are unknown methods
//! and a `task` parameter is ignored, as the extension says.

use serde_json::{Value, json};

/// The prefix of the methods toolhost serves these requests under (the transports rename
/// them before the protocol library sees them, which would refuse or mistake them).
pub const PREFIX: &str = "toolhost/tasks-2025-11-25/";

/// A 2025-era task request, by the name it is served under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `tools/call` with `params.task`.
    Call,
    /// `tasks/get`.
    Get,
    /// `tasks/result`.
    Result,
    /// `tasks/list`.
    List,
    /// `tasks/cancel`.
    Cancel,
}

impl Request {
    const ALL: [(Request, &'static str); 5] = [
        (Request::Call, "tools/call"),
        (Request::Get, "tasks/get"),
        (Request::Result, "tasks/result"),
        (Request::List, "tasks/list"),
        (Request::Cancel, "tasks/cancel"),
    ];

    /// The request a renamed method is, if it is one.
    pub fn of(method: &str) -> Option<Request> {
        let method = method.strip_prefix(PREFIX)?;
        Self::ALL
            .iter()
            .find(|(_, m)| *m == method)
            .map(|(r, _)| *r)
    }

    /// Its method on the 2025 wire.
    pub fn method(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(r, _)| *r == self)
            .map_or("", |(_, m)| m)
    }
}

/// The `_meta` key that a 2026-07-28 request carries and a 2025-era one does not.
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// A 2025-era client's task request, renamed to the method toolhost serves it under;
/// `None` for every other message (the bytes are parsed only when they could be one).
pub fn rename(bytes: &[u8]) -> Option<Vec<u8>> {
    // Built once: a searcher's set-up costs more than a search of a short line.
    static HINT: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"task"));
    // Most lines name no task: they are passed on unparsed.
    HINT.find(bytes)?;
    let mut message: Value = serde_json::from_slice(bytes).ok()?;
    let method = message.get("method")?.as_str()?;
    let params = message.get("params");
    if params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(PROTOCOL_VERSION_META))
        .is_some()
        || message.get("id").is_none()
    {
        return None;
    }
    let ours = match method {
        "tools/call" => params.and_then(|p| p.get("task")).is_some(),
        "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" => true,
        _ => false,
    };
    if !ours {
        return None;
    }
    message["method"] = Value::String(format!("{PREFIX}{method}"));
    serde_json::to_vec(&message).ok()
}

/// What a 2025-era `initialize` result declares of these tasks.
pub fn declare(initialize_result: &mut Value) {
    if let Some(caps) = initialize_result
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
    {
        caps.insert(
            "tasks".into(),
            json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        );
    }
}

/// Every tool of a 2025-era `tools/list` result may run as a task.
pub fn offer(tools_list_result: &mut Value) {
    for tool in tools_list_result
        .get_mut("tools")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(tool) = tool.as_object_mut() {
            tool.insert("execution".into(), json!({"taskSupport": "optional"}));
        }
    }
}

/// A task as the 2025 wire has it (`ttl` and `pollInterval` in milliseconds).
pub fn task(task: &rmcp::model::Task) -> Value {
    let mut t = json!({
        "taskId": task.task_id,
        "status": task.status,
        "createdAt": task.created_at,
        "lastUpdatedAt": task.last_updated_at,
        "ttl": task.ttl_ms,
    });
    if let Some(every) = task.poll_interval_ms {
        t["pollInterval"] = json!(every);
    }
    if let Some(message) = &task.status_message {
        t["statusMessage"] = json!(message);
    }
    t
}

/// The `_meta` key that ties a message to its task.
pub const RELATED_TASK_META: &str = "io.modelcontextprotocol/related-task";

/// The `ttl` a task-augmented `tools/call` asked for, in milliseconds.
pub fn requested_ttl(params: &Value) -> Option<std::time::Duration> {
    params
        .get("task")?
        .get("ttl")?
        .as_u64()
        .map(std::time::Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renamed(message: Value) -> Option<Value> {
        rename(message.to_string().as_bytes()).map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn a_2025_task_request_is_renamed_and_nothing_else_is() {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "shell", "arguments": {}, "task": {"ttl": 60000}}});
        assert_eq!(
            renamed(call).unwrap()["method"],
            format!("{PREFIX}tools/call")
        );
        for method in ["tasks/get", "tasks/result", "tasks/list", "tasks/cancel"] {
            let m = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": {"taskId": "t"}});
            let got = renamed(m).unwrap();
            assert_eq!(
                Request::of(got["method"].as_str().unwrap())
                    .unwrap()
                    .method(),
                method
            );
        }
        for untouched in [
            // No task parameter (a word in the arguments is not one).
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "shell", "arguments": {"command": "echo \"tasks\""}}}),
            // 2026-07-28: a tolerated task parameter, and methods that do not exist there.
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x",
                "task": {}, "_meta": {PROTOCOL_VERSION_META: "2026-07-28"}}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/list",
                "params": {"_meta": {PROTOCOL_VERSION_META: "2026-07-28"}}}),
            // A notification.
            json!({"jsonrpc": "2.0", "method": "tasks/get", "params": {"taskId": "t"}}),
        ] {
            assert_eq!(renamed(untouched.clone()), None, "{untouched}");
        }
    }

    #[test]
    fn initialize_declares_tasks_and_every_listed_tool_may_run_as_one() {
        let mut init = json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}});
        declare(&mut init);
        assert_eq!(
            init["capabilities"]["tasks"]["requests"]["tools"]["call"],
            json!({})
        );
        let mut list = json!({"tools": [{"name": "a"}, {"name": "b"}]});
        offer(&mut list);
        assert_eq!(list["tools"][1]["execution"]["taskSupport"], "optional");
    }

    #[test]
    fn a_task_has_the_2025_field_names() {
        let t = rmcp::model::Task::new("id", rmcp::model::TaskStatus::Working, "a", "b")
            .with_ttl_ms(5)
            .with_poll_interval_ms(7);
        assert_eq!(
            task(&t),
            json!({"taskId": "id", "status": "working", "createdAt": "a",
                "lastUpdatedAt": "b", "ttl": 5, "pollInterval": 7})
        );
    }
}
