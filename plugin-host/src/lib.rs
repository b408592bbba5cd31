//! # plugin-host: load third-party tools from plugin packages
//!
//! A plugin directory holds *packages*: folders (or `.tar.gz` archives made by
//! `cargo xtask plugin package`) with a [`Manifest`] (`plugin.toml`), a `cdylib` built
//! against `tool-api`, and optionally a signature (`plugin.sig`, see [`trust`]).
//! [`PluginHost::load_into`] scans the directories and registers every good package's tools
//! in a [`Dispatcher`], through the same factory trait as built-ins, and returns a
//! [`LoadReport`]: for each package, loaded (with its tools, where it runs and who signed
//! it) or refused with a [`Refusal`] its author can act on. One bad package never stops the
//! others.
//!
//! Opening a library runs its code, so everything that can be checked first is checked
//! first, in this order:
//!
//! 1. `plugin.toml` parses (unknown keys and bad values are named);
//! 2. the target triple is this host's;
//! 3. tool-api: same major version as the host's, and the plugin's `requires_tool_api` is
//!    not newer than the host's (a plugin built against a newer minor loads if it needs
//!    nothing new; one built against an older minor always loads);
//! 4. the library file is in the package and matches its SHA-256;
//! 5. the signature: with [`PluginHost::require_signatures`], a package not signed by a
//!    trusted key is refused here; a signature that does not match is always refused;
//! 6. where it runs ([`Isolation`]): `auto` (the default) loads a package signed by a
//!    trusted key in process and runs any other in a worker process; a per-plugin setting
//!    wins;
//! 7. in process only: the plugin unwinds (`panic = "abort"` builds are refused: a panic
//!    would kill the host; isolated, it kills only the worker).
//!
//! Then the library is opened by its own path (in the host, or by its worker process, see
//! [`isolated`], [`worker`] and [`protocol`]), abi_stable checks the layout of its root
//! module (a mismatch is reported in one line; the full report is logged at debug; a pass
//! is remembered for these exact library bytes and this exact host file, see [`layouts`]),
//! its metadata and tool list are compared with the manifest, and its tools are registered
//! under the source `plugin:NAME` (a clash names both owners).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use dispatcher_core::Dispatcher;
//! use plugin_host::{PluginHost, WorkerSettings};
//!
//! let dispatcher = Dispatcher::new();
//! // Isolated plugins run in `my-host plugin-worker …`, a subcommand that calls
//! // `plugin_host::worker::run`.
//! let worker = WorkerSettings::new(std::env::current_exe()?, ["plugin-worker"]);
//! let report = PluginHost::new(["./plugins"]).worker(worker).load_into(&dispatcher);
//! for line in report.lines() {
//!     eprintln!("{line}");
//! }
//! # Ok(()) }
//! ```
//!
//! DESIGN.md's plugin-host loads "in process or in a worker process"; the worker side is in
//! this crate (not a separate binary) so that any host binary can offer it as a subcommand
//! built from the same code, which keeps host and worker on one protocol version.

mod adapter;
pub mod digest;
pub mod error;
pub mod isolated;
pub mod layouts;
pub mod library;
pub mod manifest;
pub mod package;
pub mod protocol;
pub mod trust;
pub mod worker;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use digest::Digests;
use dispatcher_core::Dispatcher;
use layouts::Layouts;
use tool_api::SideEffect;

pub use error::Refusal;
pub use isolated::{PluginWorker, WorkerSettings, WorkerStatus};
pub use library::{Inspection, Library};
pub use manifest::{MANIFEST_FILE, Manifest, ManifestError, ManifestTool};
pub use trust::{PublicKey, Verdict};

/// The target triple this host was built for; packages must match it.
pub const HOST_TARGET: &str = env!("TOOLHOST_TARGET");

/// Where a package's library runs.
///
/// `in_process` is fastest, and a crash in the plugin is a crash of the host. `process`
/// loads it in a worker process (see [`isolated`]): a crash, a hang or a memory bomb ends
/// only that worker's calls, for about one socket round trip per call. `auto` decides per
/// package: in process when it is signed by a trusted key, isolated otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Loaded into the host process.
    InProcess,
    /// Loaded by a worker process.
    Process,
    /// In process when signed by a trusted key, else `process`.
    Auto,
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Isolation::InProcess => "in_process",
            Isolation::Process => "process",
            Isolation::Auto => "auto",
        })
    }
}

/// Where packages run unless told otherwise: `auto` (in process only when signed by a
/// trusted key).
pub const DEFAULT_ISOLATION: Isolation = Isolation::Auto;

/// The outcome for one package.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The package's tools are registered.
    Loaded {
        /// Plugin name.
        name: String,
        /// Plugin version.
        version: String,
        /// Its tools and their classes.
        tools: Vec<(String, SideEffect)>,
        /// Where it runs (`in_process` or `process`, never `auto`).
        isolation: Isolation,
        /// The id of the trusted key that signed it, if one did.
        signed_by: Option<String>,
    },
    /// The package was refused.
    Refused(Refusal),
}

/// What happened to one package.
#[derive(Debug, Clone)]
pub struct PackageReport {
    /// The package folder, archive or file.
    pub path: PathBuf,
    /// Loaded or refused.
    pub outcome: Outcome,
}

/// What a scan did, package by package.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// One entry per package found (and per unreadable directory).
    pub packages: Vec<PackageReport>,
    /// The worker of every package loaded with isolation `process`.
    pub workers: Vec<Arc<PluginWorker>>,
}

impl LoadReport {
    /// The packages that loaded.
    pub fn loaded(&self) -> impl Iterator<Item = &PackageReport> {
        self.packages
            .iter()
            .filter(|p| matches!(p.outcome, Outcome::Loaded { .. }))
    }

    /// The packages that were refused, with their reasons.
    pub fn refused(&self) -> impl Iterator<Item = (&Path, &Refusal)> {
        self.packages.iter().filter_map(|p| match &p.outcome {
            Outcome::Refused(r) => Some((p.path.as_path(), r)),
            Outcome::Loaded { .. } => None,
        })
    }

    /// The refusal for a package path, if it was refused.
    pub fn refusal_for(&self, path: &Path) -> Option<&Refusal> {
        self.refused().find(|(p, _)| *p == path).map(|(_, r)| r)
    }

    /// One line per worker process: its pid (or why none runs) and its restarts.
    pub fn worker_lines(&self) -> Vec<String> {
        self.workers
            .iter()
            .map(|w| {
                let s = w.status();
                let state = match (s.pid, &s.last_failure) {
                    (Some(pid), _) => format!("running as pid {pid}"),
                    (None, Some(why)) => format!("down: {why}"),
                    (None, None) => "down".into(),
                };
                format!("worker   {}: {state}; restarts: {}", s.plugin, s.restarts)
            })
            .collect()
    }

    /// One human-readable line per package.
    pub fn lines(&self) -> Vec<String> {
        self.packages
            .iter()
            .map(|p| match &p.outcome {
                Outcome::Loaded {
                    name,
                    version,
                    tools,
                    isolation,
                    signed_by,
                } => {
                    let tools: Vec<String> =
                        tools.iter().map(|(t, c)| format!("{t} ({c})")).collect();
                    let signed = signed_by
                        .as_ref()
                        .map(|k| format!(", signed by {k}"))
                        .unwrap_or_default();
                    format!(
                        "loaded   {name} {version} from {} [{isolation}{signed}]: {}",
                        p.path.display(),
                        tools.join(", ")
                    )
                }
                Outcome::Refused(r) => format!("refused  {}: {r}", p.path.display()),
            })
            .collect()
    }
}

/// Finds, verifies and loads plugin packages.
#[derive(Debug, Clone)]
pub struct PluginHost {
    dirs: Vec<PathBuf>,
    cache_dir: PathBuf,
    isolation: Isolation,
    per_plugin: BTreeMap<String, Isolation>,
    worker: Option<WorkerSettings>,
    trusted_keys: Vec<PublicKey>,
    require_signatures: bool,
}

/// The default cache for unpacked archives: `$XDG_CACHE_HOME/toolhost/plugins`, else
/// `~/.cache/toolhost/plugins`, else the temp dir.
pub fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("toolhost")
        .join("plugins")
}

impl PluginHost {
    /// A host scanning these directories, unpacking archives into [`default_cache_dir`],
    /// with isolation [`DEFAULT_ISOLATION`] (`auto`): a package signed by a trusted key
    /// loads in process, any other runs in a worker process, which needs a worker program
    /// ([`PluginHost::worker`]; without one such packages are refused, saying so). No
    /// signature is required.
    pub fn new<P: Into<PathBuf>>(dirs: impl IntoIterator<Item = P>) -> Self {
        PluginHost {
            dirs: dirs.into_iter().map(Into::into).collect(),
            cache_dir: default_cache_dir(),
            isolation: DEFAULT_ISOLATION,
            per_plugin: BTreeMap::new(),
            worker: None,
            trusted_keys: Vec::new(),
            require_signatures: false,
        }
    }

    /// Where packages run by default (`toolhost` uses [`Isolation::Auto`]).
    pub fn isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = isolation;
        self
    }

    /// Where the plugin named `name` runs, whatever the default.
    pub fn isolate(mut self, name: impl Into<String>, isolation: Isolation) -> Self {
        self.per_plugin.insert(name.into(), isolation);
        self
    }

    /// How worker processes are started (needed for isolation `process`).
    pub fn worker(mut self, settings: WorkerSettings) -> Self {
        self.worker = Some(settings);
        self
    }

    /// Keys whose signatures make a package trusted (in process under `auto`).
    pub fn trusted_keys(mut self, keys: impl IntoIterator<Item = PublicKey>) -> Self {
        self.trusted_keys = keys.into_iter().collect();
        self
    }

    /// Refuse every package that is not signed by a trusted key, before it is opened.
    pub fn require_signatures(mut self, required: bool) -> Self {
        self.require_signatures = required;
        self
    }

    /// Unpacks archives into `dir` instead.
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = dir.into();
        self
    }

    /// Scans every directory and registers the tools of every good package.
    ///
    /// The checks before opening run in parallel across packages once one of them has to
    /// hash a file (a start over unchanged packages checks them on this thread), and so
    /// does the start of worker processes; libraries load one after another (see
    /// `open_all`); registration runs in directory order, so which of two clashing packages
    /// is refused does not depend on timing. Digests of unchanged files and the layout
    /// checks libraries passed are remembered in the cache directory ([`digest`],
    /// [`layouts`]).
    pub fn load_into(&self, dispatcher: &Dispatcher) -> LoadReport {
        let digests = Digests::load(self.cache_dir.join(DIGESTS_FILE));
        let mut found: Vec<(PathBuf, Result<package::Found, Refusal>)> = Vec::new();
        for dir in &self.dirs {
            match package::discover(dir) {
                Ok(items) => found.extend(
                    items
                        .into_iter()
                        .map(|item| (item.path().to_path_buf(), Ok(item))),
                ),
                Err(e) => found.push((
                    dir.clone(),
                    Err(Refusal::Directory {
                        detail: e.to_string(),
                    }),
                )),
            }
        }
        // First what can be checked without opening a library, for every package, so that
        // of two versions of one plugin only the newest is opened (copies of one version
        // load, or clash, as any two packages do).
        let check = |(_, item): &(PathBuf, Result<package::Found, Refusal>)| {
            item.clone()
                .and_then(|item| self.folder(&item, &digests))
                .and_then(|folder| self.checked(&folder, &digests))
        };
        // While every digest is remembered a package's checks are a few system calls,
        // cheaper than starting threads (50 packages on a 2-core VM: 0.77 ms on this thread,
        // 1.03 ms on two). From the first package that had to be hashed on, the rest are
        // checked in parallel: hashing is the slow part of a first start.
        let mut checked: Vec<Preflighted> = Vec::with_capacity(found.len());
        for (i, item) in found.iter().enumerate() {
            let hashed_before = digests.hashed();
            checked.push(check(item));
            if digests.hashed() > hashed_before {
                checked.extend(in_parallel(&found[i + 1..], check));
                break;
            }
        }
        digests.save();
        let newest = |name: &str| {
            found
                .iter()
                .zip(&checked)
                .filter_map(|((p, _), r)| r.as_ref().ok().map(|c| (p, &c.manifest)))
                .filter(|(_, m)| m.name == name)
                .max_by(|a, b| a.1.version.cmp(&b.1.version))
                .map(|(p, m)| (p.clone(), m.version.to_string()))
        };
        let to_open: Vec<Result<&Checked, Refusal>> = checked
            .iter()
            .map(|checked_ok| match checked_ok {
                Err(refusal) => Err(refusal.clone()),
                Ok(package) => match newest(&package.manifest.name) {
                    Some((newer_path, newer)) if newer != package.manifest.version.to_string() => {
                        Err(Refusal::Superseded {
                            name: package.manifest.name.clone(),
                            version: package.manifest.version.to_string(),
                            newer,
                            newer_path: newer_path.display().to_string(),
                        })
                    }
                    _ => Ok(package),
                },
            })
            .collect();
        let layouts = Layouts::load(self.cache_dir.join(layouts::LAYOUTS_FILE));
        let opened = self.open_all(&to_open, &layouts);
        layouts.save();
        let mut report = LoadReport::default();
        for (((path, _), package), opened) in found.into_iter().zip(to_open).zip(opened) {
            let outcome = package
                .and_then(|package| {
                    opened.and_then(|o| self.register(package, o, dispatcher, &mut report.workers))
                })
                .unwrap_or_else(Outcome::Refused);
            match &outcome {
                Outcome::Loaded { name, tools, .. } => {
                    tracing::info!(plugin = %name, tools = tools.len(), path = %path.display(), "plugin loaded")
                }
                Outcome::Refused(r) => {
                    tracing::warn!(path = %path.display(), "plugin refused: {r}")
                }
            }
            report.packages.push(PackageReport { path, outcome });
        }
        report
    }

    /// Preflight, then the signature: everything decided before a library is opened.
    fn checked(&self, folder: &Path, digests: &Digests) -> Result<Checked, Refusal> {
        let (manifest, library) = preflight_files(folder, digests)?;
        let name = manifest.name.clone();
        let signed_by =
            match trust::verify_with(folder, &manifest.library, &self.trusted_keys, digests) {
                Verdict::Trusted(key) => Some(key),
                Verdict::Unsigned if self.require_signatures => {
                    return Err(Refusal::Unsigned { name });
                }
                Verdict::Unsigned => None,
                Verdict::Untrusted(_) if !self.require_signatures => None,
                Verdict::Untrusted(detail) | Verdict::Bad(detail) => {
                    return Err(Refusal::BadSignature { name, detail });
                }
            };
        let isolation = match self
            .per_plugin
            .get(&name)
            .copied()
            .unwrap_or(self.isolation)
        {
            Isolation::Auto if signed_by.is_some() => Isolation::InProcess,
            Isolation::Auto => Isolation::Process,
            chosen => chosen,
        };
        if isolation == Isolation::InProcess && !manifest.unwinds {
            return Err(Refusal::PanicAbort);
        }
        if isolation == Isolation::Process && self.worker.is_none() {
            return Err(Refusal::NoWorker { name });
        }
        Ok(Checked {
            manifest,
            library,
            isolation,
            signed_by,
        })
    }

    /// Opens every package that is to be opened, results in order. Workers start in
    /// parallel (each is a process start and a handshake). Libraries open one after another
    /// on this thread: the dynamic loader serializes `dlopen` anyway, and on a small VM two
    /// threads mapping libraries into one process interrupt each other to flush TLBs.
    /// Measured over 50 packages on a 2-core VM, opening on two threads was no faster, with
    /// layout checks (19–20 ms either way) or with them remembered (6.4 ms against 5.9 ms).
    fn open_all(
        &self,
        to_open: &[Result<&Checked, Refusal>],
        layouts: &Layouts,
    ) -> Vec<Result<Opened, Refusal>> {
        let isolated =
            |p: &Result<&Checked, Refusal>| matches!(p, Ok(c) if c.isolation == Isolation::Process);
        let workers: Vec<&Result<&Checked, Refusal>> =
            to_open.iter().filter(|p| isolated(p)).collect();
        let mut started = in_parallel(&workers, |p| {
            (*p).clone().and_then(|p| self.open(p, layouts))
        })
        .into_iter();
        to_open
            .iter()
            .map(|p| {
                if isolated(p)
                    && let Some(worker) = started.next()
                {
                    return worker;
                }
                p.clone().and_then(|p| self.open(p, layouts))
            })
            .collect()
    }

    /// Opens a checked package's library: here (its layout check remembered in `layouts`),
    /// or by starting its worker.
    fn open(&self, package: &Checked, layouts: &Layouts) -> Result<Opened, Refusal> {
        match (package.isolation, &self.worker) {
            (Isolation::Process, Some(settings)) => {
                PluginWorker::start(&package.manifest.name, &package.library, settings)
                    .map(|(worker, inspection)| Opened::Isolated(worker, inspection))
            }
            (Isolation::Process, None) => Err(Refusal::NoWorker {
                name: package.manifest.name.clone(),
            }),
            _ => library::open_remembered(&package.library, &package.manifest.sha256, layouts)
                .map(Opened::InProcess),
        }
    }

    /// Compares an opened library with its manifest and registers its tools.
    fn register(
        &self,
        package: &Checked,
        opened: Opened,
        dispatcher: &Dispatcher,
        workers: &mut Vec<Arc<PluginWorker>>,
    ) -> Result<Outcome, Refusal> {
        let manifest = &package.manifest;
        let registered = match opened {
            Opened::Isolated(worker, inspection) => {
                compare_inspection(manifest, inspection.exported(), false)?;
                let registered = register_isolated(&inspection, &worker, dispatcher)?;
                workers.push(worker);
                registered
            }
            Opened::InProcess(lib) => {
                compare(manifest, &lib)?;
                register_library(&lib, dispatcher)?
            }
        };
        Ok(match registered {
            Outcome::Loaded {
                name,
                version,
                tools,
                ..
            } => Outcome::Loaded {
                name,
                version,
                tools,
                isolation: package.isolation,
                signed_by: package.signed_by.map(|k| k.id()),
            },
            refused => refused,
        })
    }

    /// The folder of a found package (an archive is unpacked into the cache).
    fn folder(&self, item: &package::Found, digests: &Digests) -> Result<PathBuf, Refusal> {
        match item {
            package::Found::Archive(archive) => {
                package::unpack_cached_with(archive, &self.cache_dir, digests).map_err(|e| {
                    Refusal::Archive {
                        detail: e.to_string(),
                    }
                })
            }
            package::Found::Folder(path) => Ok(path.clone()),
            package::Found::Library(path) => Err(Refusal::NotAPackage {
                detail: format!(
                    "'{}' is a bare library; put it in a package with `cargo xtask plugin package`",
                    path.display()
                ),
            }),
        }
    }
}

/// A package that passed every check made before its library is opened.
#[derive(Debug)]
struct Checked {
    manifest: Manifest,
    library: PathBuf,
    isolation: Isolation,
    signed_by: Option<PublicKey>,
}

/// A checked package, or why it was refused before its library was opened.
type Preflighted = Result<Checked, Refusal>;

/// A package's library, opened.
enum Opened {
    InProcess(Library),
    Isolated(Arc<PluginWorker>, Inspection),
}

/// The file in the cache directory that remembers digests ([`digest`]).
pub const DIGESTS_FILE: &str = "digests.json";

/// `f` over `items` on up to four threads (one per core), results in order.
fn in_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    // Asked once: under cgroups, the answer reads files.
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    if items.len() <= 1 {
        return items.iter().map(f).collect();
    }
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from));
    let threads = cores.min(4).min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Checks everything that can be checked without running the library's code, for a
/// package that will load in process (a `panic = "abort"` build is refused).
pub fn preflight(folder: &Path) -> Result<(Manifest, PathBuf), Refusal> {
    let (manifest, library) = preflight_files(folder, &Digests::uncached())?;
    if !manifest.unwinds {
        return Err(Refusal::PanicAbort);
    }
    Ok((manifest, library))
}

/// The checks of [`preflight`] that hold whatever the isolation.
fn preflight_files(folder: &Path, digests: &Digests) -> Result<(Manifest, PathBuf), Refusal> {
    let manifest_path = folder.join(MANIFEST_FILE);
    // Read without asking first whether it is there: one path lookup, not two.
    let text = std::fs::read_to_string(&manifest_path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => Refusal::NotAPackage {
            detail: format!("no {MANIFEST_FILE} in '{}'", folder.display()),
        },
        _ => Refusal::Manifest {
            detail: format!("{}: {e}", manifest_path.display()),
        },
    })?;
    let manifest = Manifest::parse(&manifest_path, &text).map_err(|e| Refusal::Manifest {
        detail: e.to_string(),
    })?;
    if manifest.target != HOST_TARGET {
        return Err(Refusal::WrongTarget {
            found: manifest.target.clone(),
            expected: HOST_TARGET.into(),
        });
    }
    check_versions(&manifest.tool_api, &manifest.requires_tool_api)?;
    let library = folder.join(&manifest.library);
    // The digest's own look at the file says whether it is there (and a regular file).
    let actual = digests.sha256(&library).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::InvalidInput => Refusal::MissingLibrary {
            library: manifest.library.clone(),
        },
        _ => Refusal::LoadFailed {
            path: library.display().to_string(),
            detail: e.to_string(),
        },
    })?;
    if !actual.eq_ignore_ascii_case(&manifest.sha256) {
        return Err(Refusal::ChecksumMismatch {
            library: manifest.library.clone(),
            expected: manifest.sha256.clone(),
            actual,
        });
    }
    Ok((manifest, library))
}

/// The semver verdict: same major as the host, and nothing required that the host lacks.
pub fn check_versions(built: &semver::Version, requires: &semver::Version) -> Result<(), Refusal> {
    let host = semver::Version::parse(tool_api::TOOL_API_VERSION)
        .unwrap_or_else(|_| semver::Version::new(1, 0, 0));
    if built.major != host.major || requires.major != host.major {
        return Err(Refusal::IncompatibleAbi {
            built: built.to_string(),
            host: host.to_string(),
            rebuild: format!("{}.{}", host.major, host.minor),
            detail: String::new(),
        });
    }
    if requires > &host {
        return Err(Refusal::NeedsNewerHost {
            requires: requires.to_string(),
            host: host.to_string(),
        });
    }
    Ok(())
}

/// Compares what the library says with its manifest (for a library opened in process: a
/// `panic = "abort"` build is refused).
pub fn compare(manifest: &Manifest, lib: &Library) -> Result<(), Refusal> {
    compare_inspection(manifest, lib.exported(), true)
}

/// Compares what a library exports with its manifest; `in_process` refuses a library that
/// cannot contain its panics.
fn compare_inspection(
    manifest: &Manifest,
    lib: library::Exported<'_>,
    in_process: bool,
) -> Result<(), Refusal> {
    let mismatch = |key: &'static str, m: String, l: String| {
        Err(Refusal::ManifestMismatch {
            key: key.to_string(),
            manifest: m,
            library: l,
        })
    };
    if lib.name != manifest.name {
        return mismatch("name", manifest.name.clone(), lib.name.to_string());
    }
    if lib.version != manifest.version.to_string() {
        return mismatch(
            "version",
            manifest.version.to_string(),
            lib.version.to_string(),
        );
    }
    if lib.tool_api != manifest.tool_api.to_string() {
        return mismatch(
            "tool_api",
            manifest.tool_api.to_string(),
            lib.tool_api.to_string(),
        );
    }
    if lib.requires_tool_api != manifest.requires_tool_api.to_string() {
        return mismatch(
            "requires_tool_api",
            manifest.requires_tool_api.to_string(),
            lib.requires_tool_api.to_string(),
        );
    }
    if in_process && !lib.unwinds {
        return Err(Refusal::PanicAbort);
    }
    let problems = tool_api::testing::definition_problems(lib.tools);
    if !problems.is_empty() {
        return Err(Refusal::Definitions { problems });
    }
    let missing: Vec<&str> = manifest
        .tools
        .iter()
        .filter(|t| !lib.tools.iter().any(|d| d.name == t.name))
        .map(|t| t.name.as_str())
        .collect();
    let extra: Vec<&str> = lib
        .tools
        .iter()
        .filter(|d| !manifest.tools.iter().any(|t| t.name == d.name))
        .map(|d| d.name.as_str())
        .collect();
    if !missing.is_empty() || !extra.is_empty() {
        let mut parts = Vec::new();
        if !missing.is_empty() {
            parts.push(format!(
                "listed but not in the library: {}",
                missing.join(", ")
            ));
        }
        if !extra.is_empty() {
            parts.push(format!(
                "in the library but not listed: {}",
                extra.join(", ")
            ));
        }
        return Err(Refusal::ToolListMismatch {
            detail: parts.join("; "),
        });
    }
    for t in &manifest.tools {
        if let Some(d) = lib.tools.iter().find(|d| d.name == t.name)
            && d.side_effects != t.side_effects
        {
            return Err(Refusal::SideEffectMismatch {
                tool: t.name.clone(),
                manifest: t.side_effects,
                library: d.side_effects,
            });
        }
    }
    Ok(())
}

/// Verifies, opens (in process) and registers one package folder.
pub fn load_package(folder: &Path, dispatcher: &Dispatcher) -> Result<Outcome, Refusal> {
    let (manifest, library_path) = preflight(folder)?;
    let lib = library::open(&library_path)?;
    compare(&manifest, &lib)?;
    register_library(&lib, dispatcher)
}

/// Registers every factory or none (a clash unregisters the ones already in).
fn register_all(
    dispatcher: &Dispatcher,
    factories: Vec<Arc<dyn tool_api::ToolFactory>>,
) -> Result<(), Refusal> {
    let mut registered: Vec<String> = Vec::new();
    for factory in factories {
        let name = factory.definition().name.clone();
        if let Err(e) = dispatcher.register(factory) {
            for name in &registered {
                dispatcher.unregister(name);
            }
            return Err(Refusal::Registration(e.to_string()));
        }
        registered.push(name);
    }
    Ok(())
}

fn loaded(lib: library::Exported<'_>, isolation: Isolation) -> Outcome {
    Outcome::Loaded {
        name: lib.name.to_string(),
        version: lib.version.to_string(),
        tools: lib
            .tools
            .iter()
            .map(|d| (d.name.clone(), d.side_effects))
            .collect(),
        isolation,
        signed_by: None,
    }
}

/// Whether a library built against `tool_api` answers the per-call concurrency question.
fn per_call_safety(tool_api: &str) -> bool {
    semver::Version::parse(tool_api).is_ok_and(|v| v >= semver::Version::new(1, 2, 0))
}

/// Registers an isolated library's tools, each call going to `worker`.
fn register_isolated(
    lib: &Inspection,
    worker: &Arc<PluginWorker>,
    dispatcher: &Dispatcher,
) -> Result<Outcome, Refusal> {
    let source = format!("plugin:{}", lib.name);
    let factories = lib
        .tools
        .iter()
        .map(|definition| {
            let mut definition = definition.clone();
            definition.inline = false;
            Arc::new(isolated::IsolatedToolFactory {
                worker: worker.clone(),
                definition,
                source: source.clone(),
                per_call_safety: per_call_safety(&lib.tool_api),
            }) as Arc<dyn tool_api::ToolFactory>
        })
        .collect();
    register_all(dispatcher, factories)?;
    Ok(loaded(lib.exported(), Isolation::Process))
}

/// Registers an opened, verified library's tools (all or none; source `plugin:NAME`).
pub fn register_library(lib: &Library, dispatcher: &Dispatcher) -> Result<Outcome, Refusal> {
    let source = format!("plugin:{}", lib.name);
    let factories = lib
        .definitions
        .iter()
        .map(|definition| {
            Arc::new(adapter::PluginToolFactory {
                module: lib.module,
                definition: definition.clone(),
                source: source.clone(),
                per_call_safety: per_call_safety(&lib.tool_api),
            }) as Arc<dyn tool_api::ToolFactory>
        })
        .collect();
    register_all(dispatcher, factories)?;
    Ok(loaded(lib.exported(), Isolation::InProcess))
}
