//! An in-memory host for unit-testing tools without a dispatcher.
//!
//! [`TestHost`] implements the host callbacks with an in-memory workspace, a cancellation
//! flag and a log capture, so a tool author can call `execute` directly in a plain `#[test]`:
//!
//! ```
//! use tool_api::testing::TestHost;
//!
//! let host = TestHost::new();
//! host.put_file("notes.txt", "hello");
//! let ctx = host.context();
//! assert_eq!(ctx.files().read("notes.txt").unwrap(), "hello");
//! assert!(ctx.files().read("../etc/passwd").is_err());
//! ```
//!
//! Its path rules mirror the real host's lexical rules (relative, `..` resolved while
//! checking, nothing outside the root). It has no symlinks, except those
//! [`TestHost::put_link_outside`] puts there to stand for one that leads outside, which
//! the real host refuses.

mod source_check;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use abi_stable::std_types::{RArc, RResult, RSlice, RStr, RString, RVec};

use crate::abi::{
    AbiError, ERROR_FAILED, ERROR_PERMISSION_DENIED, FsMetadata, HostContext, HostContext_TO,
    TD_Opaque,
};
use crate::context::{Level, ToolContext};

#[derive(Default)]
struct State {
    files: Mutex<BTreeMap<String, Vec<u8>>>,
    /// Paths of symlinks that lead outside the workspace.
    links_outside: Mutex<BTreeSet<String>>,
    logs: Mutex<Vec<(Level, String)>>,
    output: Mutex<Vec<String>>,
    cancelled: AtomicBool,
    questions: Mutex<Vec<String>>,
    answer: Mutex<Option<crate::context::UserAnswer>>,
    process_sandbox: Mutex<crate::sandbox::ProcessSandbox>,
    sandbox_settings: Mutex<Option<serde_json::Value>>,
}

/// An in-memory host: workspace files, a cancellation flag and captured logs.
#[derive(Clone, Default)]
pub struct TestHost {
    state: Arc<State>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

const ROOT: &str = "/workspace";

impl TestHost {
    /// An empty workspace rooted at `/workspace`.
    pub fn new() -> Self {
        TestHost::default()
    }

    /// What [`crate::ToolContext::process_sandbox`] answers (default:
    /// [`crate::sandbox::ProcessSandbox::default`]).
    pub fn set_process_sandbox(&self, sandbox: crate::sandbox::ProcessSandbox) {
        *lock(&self.state.process_sandbox) = sandbox;
    }

    /// What [`crate::ToolContext::sandbox_settings`] answers (default: `None`, as an older
    /// host).
    pub fn set_sandbox_settings(&self, settings: Option<serde_json::Value>) {
        *lock(&self.state.sandbox_settings) = settings;
    }

    /// Puts a file into the workspace.
    pub fn put_file(&self, path: &str, content: impl AsRef<[u8]>) {
        if let Ok(p) = normalize(path) {
            lock(&self.state.files).insert(p, content.as_ref().to_vec());
        }
    }

    /// Puts a symlink at `path` that leads outside the workspace, as a checkout may hold
    /// one (`venv/bin/python -> /usr/bin/python3`): it is listed in its directory, and
    /// every operation on it or through it is refused as an escape (`permission_denied`),
    /// as the real host refuses it. A tool that walks directories must get past it.
    ///
    /// ```
    /// use tool_api::testing::TestHost;
    ///
    /// let host = TestHost::new();
    /// host.put_file("src/main.rs", "fn main() {}");
    /// host.put_link_outside("src/vendor");
    /// let ctx = host.context();
    /// let files = ctx.files();
    /// assert_eq!(files.list("src").unwrap(), ["main.rs", "vendor"]);
    /// assert!(files.metadata("src/vendor").is_err());
    /// assert!(files.read("src/vendor/lib.rs").is_err());
    /// ```
    pub fn put_link_outside(&self, path: &str) {
        if let Ok(p) = normalize(path) {
            lock(&self.state.links_outside).insert(p);
        }
    }

    /// `path` resolved under the root, refused when it is, or goes through, a link that
    /// leads outside.
    fn resolve(&self, path: &str) -> Result<String, AbiError> {
        let p = normalize(path)?;
        let through_link = lock(&self.state.links_outside).iter().any(|l| {
            p == *l
                || p.strip_prefix(l.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        });
        if through_link {
            return Err(denied(path));
        }
        Ok(p)
    }

    /// [`Self::resolve`] for a write: a path in a directory's form is refused, as the host
    /// refuses it.
    fn writable(&self, path: &str) -> Result<String, AbiError> {
        if crate::fs_error::is_directory_form(path) {
            return Err(failed(crate::fs_error::names_a_directory(path)));
        }
        self.resolve(path)
    }

    /// The current content of a workspace file as text.
    pub fn file(&self, path: &str) -> Option<String> {
        let p = normalize(path).ok()?;
        lock(&self.state.files)
            .get(&p)
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }

    /// Sets the cancellation flag, as the host does on cancel.
    pub fn cancel(&self) {
        self.state.cancelled.store(true, Ordering::SeqCst);
    }

    /// The messages logged so far, with their levels.
    pub fn logs(&self) -> Vec<(Level, String)> {
        lock(&self.state.logs).clone()
    }

    /// The live output chunks streamed so far ([`ToolContext::output`]).
    pub fn output(&self) -> Vec<String> {
        lock(&self.state.output).clone()
    }

    /// Answers every [`ToolContext::ask_user`] question with `answer` (by default nobody
    /// answers: [`crate::context::UserAnswer::NoAnswer`]).
    pub fn answering(self, answer: crate::context::UserAnswer) -> Self {
        *lock(&self.state.answer) = Some(answer);
        self
    }

    /// The questions tools asked so far ([`ToolContext::ask_user`]).
    pub fn questions(&self) -> Vec<String> {
        lock(&self.state.questions).clone()
    }

    /// A context for one call, backed by this host.
    pub fn context(&self) -> ToolContext {
        ToolContext::from_host(HostContext_TO::from_ptr(RArc::new(self.clone()), TD_Opaque))
    }
}

fn denied(path: &str) -> AbiError {
    AbiError {
        code: ERROR_PERMISSION_DENIED,
        message: crate::fs_error::escapes(path).into(),
    }
}

fn failed(message: String) -> AbiError {
    AbiError {
        code: ERROR_FAILED,
        message: message.into(),
    }
}

/// Lexical resolution under the root: `..` may never climb above it.
fn normalize(path: &str) -> Result<String, AbiError> {
    let rel = if let Some(rest) = path.strip_prefix(ROOT) {
        if !(rest.is_empty() || rest.starts_with('/')) {
            return Err(denied(path));
        }
        rest
    } else if path.starts_with('/') {
        return Err(denied(path));
    } else {
        path
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(denied(path));
                }
            }
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

fn ok_or<T>(r: Result<T, AbiError>) -> RResult<T, AbiError> {
    r.into()
}

impl HostContext for TestHost {
    fn session_id(&self) -> RStr<'_> {
        "test-session".into()
    }
    fn turn_id(&self) -> RStr<'_> {
        "test-turn".into()
    }
    fn tool_use_id(&self) -> RStr<'_> {
        "test-call".into()
    }
    fn workspace_root(&self) -> RStr<'_> {
        ROOT.into()
    }
    fn is_cancelled(&self) -> bool {
        self.state.cancelled.load(Ordering::SeqCst)
    }
    fn log_enabled(&self, _level: u8) -> bool {
        true
    }
    fn log(&self, level: u8, message: RStr<'_>) {
        lock(&self.state.logs).push((Level::from_code(level), message.to_string()));
    }
    fn fs_read(&self, path: RStr<'_>) -> RResult<RString, AbiError> {
        ok_or(self.read(path.as_str()).and_then(|b| {
            String::from_utf8(b)
                .map(RString::from)
                .map_err(|_| failed(crate::fs_error::not_utf8(&path)))
        }))
    }
    fn fs_read_bytes(&self, path: RStr<'_>) -> RResult<RVec<u8>, AbiError> {
        ok_or(self.read(path.as_str()).map(RVec::from))
    }
    fn fs_write(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError> {
        ok_or(self.writable(path.as_str()).map(|p| {
            lock(&self.state.files).insert(p, content.to_vec());
        }))
    }
    fn fs_append(&self, path: RStr<'_>, content: RSlice<'_, u8>) -> RResult<(), AbiError> {
        ok_or(self.writable(path.as_str()).map(|p| {
            lock(&self.state.files)
                .entry(p)
                .or_default()
                .extend_from_slice(content.as_slice());
        }))
    }
    fn fs_exists(&self, path: RStr<'_>) -> RResult<bool, AbiError> {
        ok_or(self.resolve(path.as_str()).map(|p| {
            let files = lock(&self.state.files);
            let dir = format!("{p}/");
            p.is_empty() || files.contains_key(&p) || files.keys().any(|k| k.starts_with(&dir))
        }))
    }
    fn fs_list(&self, path: RStr<'_>) -> RResult<RVec<RString>, AbiError> {
        ok_or(self.resolve(path.as_str()).map(|p| {
            let prefix = if p.is_empty() { p } else { format!("{p}/") };
            let mut names: Vec<String> = lock(&self.state.files)
                .keys()
                .filter_map(|k| k.strip_prefix(&prefix))
                .map(|rest| match rest.split_once('/') {
                    Some((dir, _)) => format!("{dir}/"),
                    None => rest.to_string(),
                })
                .collect();
            // A link is listed by its name, as a symlink is (its target is never looked at).
            names.extend(
                lock(&self.state.links_outside)
                    .iter()
                    .filter_map(|l| l.strip_prefix(&prefix))
                    .filter(|rest| !rest.contains('/'))
                    .map(str::to_string),
            );
            names.sort();
            names.dedup();
            names.into_iter().map(RString::from).collect()
        }))
    }
    fn fs_delete(&self, path: RStr<'_>) -> RResult<(), AbiError> {
        ok_or(self.resolve(path.as_str()).and_then(|p| {
            lock(&self.state.files)
                .remove(&p)
                .map(|_| ())
                .ok_or_else(|| failed(crate::fs_error::not_found(&path)))
        }))
    }
    fn extension(&self, op: RStr<'_>, payload: RStr<'_>) -> RResult<RString, AbiError> {
        match op.as_str() {
            crate::abi::OP_FS_METADATA => {
                ok_or(crate::abi::fs_metadata_op(payload.as_str(), |p| {
                    self.metadata(p)
                }))
            }
            crate::abi::OP_OUTPUT_DELTA => {
                lock(&self.state.output).push(payload.as_str().to_string());
                RResult::ROk(RString::new())
            }
            // A test host keeps every chunk of live output.
            crate::abi::OP_OUTPUT_WANTED => RResult::ROk("true".into()),
            crate::abi::OP_PROCESS_SANDBOX => {
                let mut answer =
                    serde_json::to_value(&*lock(&self.state.process_sandbox)).unwrap_or_default();
                if let (Some(settings), Some(map)) = (
                    lock(&self.state.sandbox_settings).clone(),
                    answer.as_object_mut(),
                ) {
                    map.insert(crate::sandbox::SANDBOX_SETTINGS_KEY.into(), settings);
                }
                RResult::ROk(answer.to_string().into())
            }
            crate::abi::OP_USER_CONFIRM => {
                let question = serde_json::from_str::<serde_json::Value>(payload.as_str())
                    .ok()
                    .and_then(|v| v.get("question")?.as_str().map(String::from))
                    .unwrap_or_default();
                lock(&self.state.questions).push(question);
                let answer = match *lock(&self.state.answer) {
                    Some(crate::context::UserAnswer::Allowed) => "allow",
                    Some(crate::context::UserAnswer::Denied) => "deny",
                    Some(crate::context::UserAnswer::NoAnswer) | None => "no_answer",
                };
                RResult::ROk(serde_json::json!({ "answer": answer }).to_string().into())
            }
            other => RResult::RErr(crate::abi::unsupported(other, "host")),
        }
    }
    fn fs_patch(&self, path: RStr<'_>, old: RStr<'_>, new: RStr<'_>) -> RResult<(), AbiError> {
        ok_or(self.resolve(path.as_str()).and_then(|p| {
            let mut files = lock(&self.state.files);
            let bytes = files
                .get_mut(&p)
                .ok_or_else(|| failed(crate::fs_error::not_found(&path)))?;
            let text = String::from_utf8_lossy(bytes).into_owned();
            match crate::fs_error::patch_match_count(&text, &old) {
                1 => {
                    *bytes = text.replacen(old.as_str(), new.as_str(), 1).into_bytes();
                    Ok(())
                }
                _ => Err(failed(crate::fs_error::patch_mismatch(&path, &text, &old))),
            }
        }))
    }
}

impl TestHost {
    fn metadata(&self, path: &str) -> Result<FsMetadata, AbiError> {
        let p = self.resolve(path)?;
        let files = lock(&self.state.files);
        if let Some(bytes) = files.get(&p) {
            return Ok(FsMetadata {
                is_dir: false,
                size: bytes.len() as u64,
                modified_unix_ms: 0,
            });
        }
        let dir = format!("{p}/");
        if p.is_empty() || files.keys().any(|k| k.starts_with(&dir)) {
            Ok(FsMetadata {
                is_dir: true,
                size: 0,
                modified_unix_ms: 0,
            })
        } else {
            Err(failed(crate::fs_error::not_found(path)))
        }
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, AbiError> {
        let p = self.resolve(path)?;
        lock(&self.state.files)
            .get(&p)
            .cloned()
            .ok_or_else(|| failed(crate::fs_error::not_found(path)))
    }
}

/// Everything wrong with a plugin's exports ([`check_plugin`]), one problem per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginProblems(pub Vec<String>);

impl std::fmt::Display for PluginProblems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "- {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PluginProblems {}

/// What [`crate::check_plugin!`] runs: [`check_plugin`], then the plugin's sources under
/// `manifest_dir/src` (its `CARGO_MANIFEST_DIR`): a type that implements `Tool` or
/// `TypedTool` but is not among `tool_types` (as written in `export_plugin!`), and direct
/// use of the filesystem, programs or the network that no exported tool's declared class
/// grants. Test modules (from a file's `#[cfg(test)]` line on) and lines ending with
/// `// toolhost: allow` are not read.
pub fn check_plugin_sources(
    export: &crate::export::PluginExport,
    tool_types: &[&str],
    crate_version: &str,
    manifest_dir: &str,
) -> Result<Vec<crate::definition::ToolDefinition>, PluginProblems> {
    let checked = check_plugin(export, crate_version);
    let classes: Vec<crate::SideEffect> = match &checked {
        Ok(definitions) => definitions.iter().map(|d| d.side_effects).collect(),
        Err(_) => return checked,
    };
    let problems = source_check::problems(std::path::Path::new(manifest_dir), tool_types, &classes);
    if problems.is_empty() {
        checked
    } else {
        Err(PluginProblems(problems))
    }
}

/// Checks `export` as a host would, and its version against `crate_version` (the plugin
/// crate's `CARGO_PKG_VERSION`).
pub fn check_plugin(
    export: &crate::export::PluginExport,
    crate_version: &str,
) -> Result<Vec<crate::definition::ToolDefinition>, PluginProblems> {
    let mut problems = Vec::new();
    if export.version() != crate_version {
        problems.push(format!(
            "export_plugin! says version \"{}\" but Cargo.toml says \"{crate_version}\": write `version: env!(\"CARGO_PKG_VERSION\")` so the two cannot differ",
            export.version()
        ));
    }
    if let Err(e) = semver::Version::parse(export.version()) {
        problems.push(format!(
            "export_plugin! version \"{}\" is not a semver version: {e}",
            export.version()
        ));
    }
    let definitions = match export.tool_definitions() {
        Ok(d) => d,
        Err(e) => {
            problems.push(e);
            return Err(PluginProblems(problems));
        }
    };
    problems.extend(definition_problems(&definitions));
    if problems.is_empty() {
        Ok(definitions)
    } else {
        Err(PluginProblems(problems))
    }
}

/// What a host would refuse in a set of definitions exported together: each one's own
/// problems ([`crate::definition::ToolDefinition::check`]) and names used twice.
pub fn definition_problems(definitions: &[crate::definition::ToolDefinition]) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, def) in definitions.iter().enumerate() {
        if let Err(e) = def.check() {
            problems.push(e);
        }
        if let Some(first) = definitions[..i].iter().find(|d| d.name == def.name) {
            problems.push(format!(
                "two exported tools are named '{}' (declaring {} and {}): give each tool its own name",
                def.name, first.side_effects, def.side_effects
            ));
        }
    }
    problems
}

/// A tool that does nothing and answers `ok`, published under `definition`: for a host's
/// own tests and benchmarks, where no tool work should hide what the host costs.
///
/// ```
/// # use tool_api::{SideEffect, ToolDefinition};
/// let f = tool_api::testing::noop(
///     ToolDefinition::new("noop", "Does nothing.", SideEffect::None, serde_json::json!({"type": "object"})).inline(),
/// );
/// let host = tool_api::testing::TestHost::new();
/// let out = f.create().unwrap().execute(serde_json::json!({}), &host.context()).unwrap();
/// assert_eq!(out.text_content(), "ok");
/// ```
pub fn noop(definition: crate::definition::ToolDefinition) -> Arc<dyn crate::tool::ToolFactory> {
    Arc::new(NoopFactory(definition))
}

struct Noop;

impl crate::tool::Tool for Noop {
    fn execute(
        &self,
        _input: serde_json::Value,
        _ctx: &ToolContext,
    ) -> Result<crate::output::ToolOutput, crate::output::ToolError> {
        Ok(crate::output::ToolOutput::text("ok"))
    }
}

struct NoopFactory(crate::definition::ToolDefinition);

impl crate::tool::ToolFactory for NoopFactory {
    fn definition(&self) -> &crate::definition::ToolDefinition {
        &self.0
    }
    fn create(&self) -> Result<Box<dyn crate::tool::Tool>, crate::output::ToolError> {
        Ok(Box::new(Noop))
    }
}
