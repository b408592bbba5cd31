//! Opening a plugin library and reading what it exports.
//!
//! Each library is opened by its own path with `lib_header_from_path` +
//! `init_root_module` (never `RootModule::load_from_file`, which caches the first module of
//! a type and silently returns it for every later path). abi_stable never unloads a
//! library: loading the same path twice returns the same module.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use abi_stable::library::{LibraryError, RootModule, lib_header_from_path};
use abi_stable::std_types::{RResult, RStr};
use tool_api::ToolDefinition;
use tool_api::abi::PluginModRef;

use crate::error::Refusal;
use crate::layouts::Layouts;

/// What a loaded library says about itself.
#[derive(Clone)]
pub struct Library {
    /// The root module.
    pub module: PluginModRef,
    /// Plugin name.
    pub name: String,
    /// Plugin version (as the library says).
    pub version: String,
    /// tool-api version it was built against.
    pub tool_api: String,
    /// Oldest tool-api it needs from a host (`1.0.0` for 1.0 plugins).
    pub requires_tool_api: String,
    /// Built with `panic = "unwind"`.
    pub unwinds: bool,
    /// Its tool definitions.
    pub definitions: Vec<ToolDefinition>,
}

/// What a library exports, in plain data (what `cargo xtask plugin package` and `verify`
/// read, possibly in a child process, to write or check a manifest).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Inspection {
    /// Plugin name.
    pub name: String,
    /// Plugin version.
    pub version: String,
    /// tool-api version it was built against.
    pub tool_api: String,
    /// Oldest tool-api it needs.
    pub requires_tool_api: String,
    /// Built with `panic = "unwind"`.
    pub unwinds: bool,
    /// Its tool definitions.
    pub tools: Vec<ToolDefinition>,
}

/// What a library exports, borrowed from a [`Library`] or an [`Inspection`]: what is
/// compared with a manifest, without copying the definitions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exported<'a> {
    pub(crate) name: &'a str,
    pub(crate) version: &'a str,
    pub(crate) tool_api: &'a str,
    pub(crate) requires_tool_api: &'a str,
    pub(crate) unwinds: bool,
    pub(crate) tools: &'a [ToolDefinition],
}

impl Inspection {
    pub(crate) fn exported(&self) -> Exported<'_> {
        Exported {
            name: &self.name,
            version: &self.version,
            tool_api: &self.tool_api,
            requires_tool_api: &self.requires_tool_api,
            unwinds: self.unwinds,
            tools: &self.tools,
        }
    }
}

impl Library {
    pub(crate) fn exported(&self) -> Exported<'_> {
        Exported {
            name: &self.name,
            version: &self.version,
            tool_api: &self.tool_api,
            requires_tool_api: &self.requires_tool_api,
            unwinds: self.unwinds,
            tools: &self.definitions,
        }
    }

    /// The plain-data view of the library.
    pub fn inspection(&self) -> Inspection {
        Inspection {
            name: self.name.clone(),
            version: self.version.clone(),
            tool_api: self.tool_api.clone(),
            requires_tool_api: self.requires_tool_api.clone(),
            unwinds: self.unwinds,
            tools: self.definitions.clone(),
        }
    }
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("tool_api", &self.tool_api)
            .field("tools", &self.definitions.len())
            .finish()
    }
}

/// The `Error:` lines of abi_stable's layout report (the rest goes to the debug log).
fn error_lines(report: &str) -> String {
    let lines: Vec<&str> = report
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("Error:"))
        .take(3)
        .collect();
    if lines.is_empty() {
        report.lines().next().unwrap_or("").trim().to_string()
    } else {
        lines.join("; ")
    }
}

fn host_minor() -> String {
    semver::Version::parse(tool_api::TOOL_API_VERSION)
        .map(|v| format!("{}.{}", v.major, v.minor))
        .unwrap_or_else(|_| tool_api::TOOL_API_VERSION.to_string())
}

fn refusal(path: &Path, e: LibraryError) -> Refusal {
    let host = tool_api::TOOL_API_VERSION;
    match e {
        LibraryError::OpenError { err, .. } => Refusal::NotALibrary {
            path: path.display().to_string(),
            detail: err.to_string(),
        },
        LibraryError::GetSymbolError { .. } => Refusal::NoEntryPoint {
            path: path.display().to_string(),
        },
        LibraryError::IncompatibleVersionNumber { actual_version, .. } => {
            Refusal::IncompatibleAbi {
                built: actual_version.to_string(),
                host: host.to_string(),
                rebuild: host_minor(),
                detail: String::new(),
            }
        }
        LibraryError::AbiInstability(report) => {
            let report = report.to_string();
            tracing::debug!(path = %path.display(), "abi_stable layout report:\n{report}");
            Refusal::IncompatibleAbi {
                built: "a different tool-api".into(),
                host: host.to_string(),
                rebuild: host_minor(),
                detail: error_lines(&report),
            }
        }
        other => Refusal::LoadFailed {
            path: path.display().to_string(),
            detail: other.to_string(),
        },
    }
}

/// Opens a library and reads its metadata and definitions. This runs the library's code:
/// call it only after everything that can be checked without opening it was checked.
pub fn open(path: &Path) -> Result<Library, Refusal> {
    open_checked(path, None)
}

/// [`open`], for a library whose bytes have the SHA-256 `sha256` (verified by the caller
/// this start): its layout check is skipped if `layouts` remembers that those bytes passed
/// against this host, and remembered if they pass now ([`crate::layouts`]).
pub fn open_remembered(path: &Path, sha256: &str, layouts: &Layouts) -> Result<Library, Refusal> {
    open_checked(path, Some((sha256, layouts)))
}

/// What this process opened: the paths, and the files (device, inode) the loader holds.
type Opened = (HashSet<PathBuf>, HashSet<FileId>);
/// A file as the dynamic loader tells files apart: device and inode.
type FileId = (u64, u64);
static OPENED: Mutex<Option<Opened>> = Mutex::new(None);

/// An open about to happen, as the dynamic loader will see it.
struct Opening {
    /// Neither the path nor the file now there was opened before in this process: the
    /// loader will map these bytes, not hand back a library it holds.
    first: bool,
    /// The file now at the path.
    file: FileId,
}

/// Notes an open of `path` before `dlopen`. The loader hands back the library it already
/// holds for a path it opened (whatever the file there is now) or for a file it holds
/// under another name (a hard link); abi_stable never unloads one. So a path counts from
/// its first open on, and a file from its first open that left it loaded
/// ([`note_loaded`]). `None` when the file cannot be looked at (the open will fail).
fn note_opening(path: &Path) -> Option<Opening> {
    let (Ok(meta), Ok(path)) = (std::fs::metadata(path), std::path::absolute(path)) else {
        return None;
    };
    let file = (meta.dev(), meta.ino());
    let mut opened = OPENED.lock().unwrap_or_else(PoisonError::into_inner);
    let (paths, files) = opened.get_or_insert_with(Default::default);
    let new_path = paths.insert(path);
    Some(Opening {
        first: new_path && !files.contains(&file),
        file,
    })
}

/// Notes that a first open left its file loaded. Only then does the file count: the
/// loader matches files against the libraries it holds, and a file it never held (its
/// open failed) may be deleted and its inode number reused by another file.
fn note_loaded(opening: &Opening) {
    if opening.first {
        let mut opened = OPENED.lock().unwrap_or_else(PoisonError::into_inner);
        opened
            .get_or_insert_with(Default::default)
            .1
            .insert(opening.file);
    }
}

fn open_checked(path: &Path, remembered: Option<(&str, &Layouts)>) -> Result<Library, Refusal> {
    // Safe to call from several threads at once: the dynamic loader serializes `dlopen`,
    // and abi_stable keeps its layout checker's shared state behind mutexes (so the checks
    // of several libraries run in parallel).
    // Asked before `dlopen`, which hands back what it loaded before for this path or file;
    // asked of every open, so an earlier one without a memo counts too.
    let opening = note_opening(path);
    let first = opening.as_ref().is_some_and(|o| o.first);
    let header = lib_header_from_path(path);
    // Loaded unless `dlopen` itself failed (a missing entry point leaves it loaded).
    if let Some(opening) = &opening
        && !matches!(header, Err(LibraryError::OpenError { .. }))
    {
        note_loaded(opening);
    }
    let header = header.map_err(|e| refusal(path, e))?;
    let module = match remembered {
        // Only on a first open: otherwise the loader hands back a library it already holds,
        // which may be other bytes (even ones that failed their check).
        Some((sha256, layouts)) if first && layouts.passed(sha256) => {
            #[allow(unsafe_code)]
            // SAFETY: this is the process's first open of this path and file, so the library
            // is these exact bytes (their SHA-256 verified this start), which passed
            // abi_stable's layout check against this exact host file on an earlier start;
            // that check depends on nothing else. abi_stable's version check still runs.
            let module = unsafe { header.init_root_module_with_unchecked_layout::<PluginModRef>() };
            module.map_err(|e| refusal(path, e))?
        }
        _ => {
            let module = header
                .init_root_module::<PluginModRef>()
                .map_err(|e| refusal(path, e))?;
            // Only a first open checked the bytes that were hashed: a later one checked
            // what the loader held from before, whatever the file holds now.
            if let Some((sha256, layouts)) = remembered
                && first
            {
                layouts.remember(sha256, path);
            }
            module
        }
    };
    debug_assert_eq!(PluginModRef::NAME, "toolhost_plugin");
    let info = (module.info())();
    let requires_tool_api =
        match (module.extension())(RStr::from(tool_api::abi::OP_REQUIREMENTS), RStr::from("")) {
            RResult::ROk(v) => v.into_string(),
            // A 1.0 plugin does not know the operation: it needs 1.0.
            RResult::RErr(_) => "1.0.0".to_string(),
        };
    let definitions = match (module.definitions())() {
        RResult::ROk(json) => serde_json::from_str::<Vec<ToolDefinition>>(&json).map_err(|e| {
            Refusal::BadDefinitions {
                detail: format!("its tool definitions are not valid JSON definitions: {e}"),
            }
        })?,
        RResult::RErr(e) => {
            return Err(Refusal::BadDefinitions {
                detail: e.message.into_string(),
            });
        }
    };
    Ok(Library {
        module,
        name: info.name.into_string(),
        version: info.version.into_string(),
        tool_api: info.tool_api_version.into_string(),
        requires_tool_api,
        unwinds: info.unwinds,
        definitions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether an open of `path` now would be this process's first of that path and file
    /// (asking counts as an open of the path).
    fn first_open_in_process(path: &Path) -> bool {
        note_opening(path).is_some_and(|o| o.first)
    }

    #[test]
    fn a_path_counts_from_its_first_open_and_a_file_once_the_loader_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("not-a-library.so");
        std::fs::write(&garbage, b"garbage").unwrap();
        // An open without a memo, even one the loader refuses, counts for its path.
        assert!(matches!(open(&garbage), Err(Refusal::NotALibrary { .. })));
        assert!(!first_open_in_process(&garbage));
        // The loader does not hold a file it refused: under another name it is a first open
        // (and once deleted, its inode number may be another file's).
        let link = dir.path().join("another-name.so");
        std::fs::hard_link(&garbage, &link).unwrap();
        assert!(first_open_in_process(&link));

        // A real shared object without our entry point: refused, but the loader holds it,
        // so the same file under another name is no first open.
        let Some(system) = [
            "/lib/x86_64-linux-gnu/libm.so.6",
            "/usr/lib64/libm.so.6",
            "/lib64/libm.so.6",
        ]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists()) else {
            panic!("no libm.so.6 to open");
        };
        let copy = dir.path().join("libm-copy.so");
        std::fs::copy(system, &copy).unwrap();
        assert!(matches!(open(&copy), Err(Refusal::NoEntryPoint { .. })));
        let held = dir.path().join("libm-link.so");
        std::fs::hard_link(&copy, &held).unwrap();
        assert!(!first_open_in_process(&held));
    }
}
