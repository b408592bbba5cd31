//! [`PluginHost`]: scans plugin directories, checks every package before its library is
//! opened, opens the rest (in process or by starting their workers) and registers their
//! tools. The order of the checks is in the crate's docs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dispatcher_core::Dispatcher;

use crate::checks::{compare, compare_inspection, verified_files};
use crate::digest::Digests;
use crate::layouts::{self, Layouts};
use crate::manifest::PackageKind;
use crate::register::{register_isolated, register_library};
use crate::report::{LoadReport, Outcome, PackageReport};
use crate::sandboxing::{PluginSandbox, WorkerPlan};
use crate::{
    DEFAULT_ISOLATION, DIGESTS_FILE, Inspection, Isolation, Library, Manifest, PluginWorker,
    PublicKey, Refusal, WorkerSettings, library, package,
};

/// Finds, verifies and loads plugin packages.
#[derive(Debug, Clone)]
pub struct PluginHost {
    dirs: Vec<PathBuf>,
    cache_dir: PathBuf,
    isolation: Isolation,
    per_plugin: BTreeMap<String, Isolation>,
    sandboxes: BTreeMap<String, PluginSandbox>,
    worker: Option<WorkerSettings>,
    trusted_keys: Vec<PublicKey>,
    require_signatures: bool,
    /// The most memory one component instance may have.
    #[cfg(feature = "wasm")]
    wasm_memory: usize,
    /// Where compiled components are cached (default: the cache directory's `wasm/`).
    #[cfg(feature = "wasm")]
    wasm_cache: Option<PathBuf>,
    /// Made when the first component is loaded (an engine costs a few milliseconds).
    #[cfg(feature = "wasm")]
    wasm: std::sync::OnceLock<Result<plugin_wasm::WasmRuntime, String>>,
}

/// The default cache for unpacked archives: `$XDG_CACHE_HOME/toolhost/plugins`, else
/// `~/.cache/toolhost/plugins`, else the temp dir.
pub fn default_cache_dir() -> PathBuf {
    cache_dir_in(
        &std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir),
    )
}

/// The directory under a host's cache where compiled components are kept.
pub const COMPILED_DIR: &str = "wasm";

/// The cache a host uses when the user's cache directory is `cache_home`
/// (`$XDG_CACHE_HOME`): `toolhost/plugins` under it. Compiled components go in its
/// `wasm/` (`PluginHost::wasm_cache_dir`, with the `wasm` feature, to put them elsewhere).
pub fn cache_dir_in(cache_home: &Path) -> PathBuf {
    cache_home.join("toolhost").join("plugins")
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
            sandboxes: BTreeMap::new(),
            worker: None,
            trusted_keys: Vec::new(),
            require_signatures: false,
            #[cfg(feature = "wasm")]
            wasm_memory: plugin_wasm::DEFAULT_MEMORY_BYTES,
            #[cfg(feature = "wasm")]
            wasm_cache: None,
            #[cfg(feature = "wasm")]
            wasm: std::sync::OnceLock::new(),
        }
    }

    /// The most linear memory one WebAssembly component instance may grow to (default
    /// 256 MiB): a grow past it fails inside the component, which ends only that call.
    #[cfg(feature = "wasm")]
    pub fn wasm_memory(mut self, bytes: usize) -> Self {
        self.wasm_memory = bytes;
        self.wasm = std::sync::OnceLock::new();
        self
    }

    /// Caches compiled components in `dir` instead of the cache directory's `wasm/` (hosts
    /// that share one compiled copy, tests).
    #[cfg(feature = "wasm")]
    pub fn wasm_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.wasm_cache = Some(dir.into());
        self.wasm = std::sync::OnceLock::new();
        self
    }

    /// The runtime components run in (compiled code cached under the cache directory's
    /// `wasm/`).
    #[cfg(feature = "wasm")]
    fn wasm_runtime(&self) -> Result<&plugin_wasm::WasmRuntime, Refusal> {
        self.wasm
            .get_or_init(|| {
                plugin_wasm::WasmRuntime::new(
                    Some(
                        self.wasm_cache
                            .clone()
                            .unwrap_or_else(|| self.cache_dir.join(COMPILED_DIR)),
                    ),
                    plugin_wasm::WasmLimits {
                        memory_bytes: self.wasm_memory,
                    },
                )
            })
            .as_ref()
            .map_err(|e| Refusal::Component(e.clone()))
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

    /// How the worker of the plugin named `name` is confined: a narrower (or, logged, a
    /// wider) grant than its tools declare, TCP ports, running unconfined where the
    /// sandbox cannot be enforced.
    pub fn sandbox(mut self, name: impl Into<String>, sandbox: PluginSandbox) -> Self {
        self.sandboxes.insert(name.into(), sandbox);
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
    /// checks libraries passed are remembered in the cache directory ([`digest`](crate::digest),
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
            let item = item.clone()?;
            let checked = self
                .folder(&item, &digests)
                .and_then(|folder| self.checked(&folder, &digests));
            match (&item, checked) {
                (package::Found::Archive(archive), Err(refusal)) => {
                    self.repaired(archive, refusal, &digests)
                }
                (_, checked) => checked,
            }
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
        let (manifest, library, signed_by) =
            verified_files(folder, &self.trusted_keys, self.require_signatures, digests)?;
        let name = manifest.name.clone();
        let setting = self.per_plugin.get(&name).copied();
        let isolation = match (manifest.kind, setting.unwrap_or(self.isolation)) {
            (PackageKind::Component, _) if !cfg!(feature = "wasm") => {
                return Err(Refusal::NoWasm { name });
            }
            (PackageKind::Component, _) => match setting {
                Some(chosen @ (Isolation::InProcess | Isolation::Process)) => {
                    return Err(Refusal::WrongIsolation {
                        name,
                        kind: "WebAssembly component".into(),
                        isolation: chosen.to_string(),
                        advice: "a component always runs in the WebAssembly sandbox; remove the setting or write isolation = \"wasm\"".into(),
                    });
                }
                _ => Isolation::Wasm,
            },
            (PackageKind::Native, Isolation::Wasm) => {
                return Err(Refusal::WrongIsolation {
                    name,
                    kind: "native library".into(),
                    isolation: "wasm".into(),
                    advice:
                        "only WebAssembly components run so; choose in_process, process or auto"
                            .into(),
                });
            }
            (PackageKind::Native, Isolation::Auto) if signed_by.is_some() => Isolation::InProcess,
            (PackageKind::Native, Isolation::Auto) => Isolation::Process,
            (PackageKind::Native, chosen) => chosen,
        };
        if isolation == Isolation::InProcess && !manifest.unwinds {
            return Err(Refusal::PanicAbort);
        }
        if isolation == Isolation::InProcess
            && self
                .sandboxes
                .get(&name)
                .is_some_and(|s| !s.http_hosts.is_empty())
        {
            return Err(Refusal::HttpHostsNative { name });
        }
        let plan = match (isolation, &self.worker) {
            (Isolation::Process, None) => return Err(Refusal::NoWorker { name }),
            (Isolation::Process, Some(worker)) => Some(WorkerPlan::new(
                &name,
                &library,
                manifest.tools.iter().map(|t| t.side_effects),
                &worker.sandbox,
                self.sandboxes
                    .get(&name)
                    .unwrap_or(&PluginSandbox::default()),
            )?),
            _ => None,
        };
        Ok(Checked {
            manifest,
            library,
            isolation,
            signed_by,
            plan,
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
                let plan = package.plan.clone().ok_or_else(|| Refusal::Worker {
                    detail: "no sandbox plan was made for it".into(),
                })?;
                PluginWorker::start(&package.manifest.name, &package.library, settings, plan)
                    .map(|(worker, inspection)| Opened::Isolated(worker, inspection))
            }
            (Isolation::Process, None) => Err(Refusal::NoWorker {
                name: package.manifest.name.clone(),
            }),
            #[cfg(feature = "wasm")]
            (Isolation::Wasm, _) => {
                let hosts = self
                    .sandboxes
                    .get(&package.manifest.name)
                    .map(|s| s.http_hosts.clone())
                    .unwrap_or_default();
                let reuse = package.manifest.instances == crate::Instances::Reused;
                self.wasm_runtime()?
                    .load(&package.library, &package.manifest.sha256, hosts)
                    .map(|plugin| Opened::Wasm(Arc::new(plugin.reuse_instances(reuse))))
                    .map_err(Refusal::from)
            }
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
            #[cfg(feature = "wasm")]
            Opened::Wasm(plugin) => {
                crate::register::register_component(manifest, &plugin, dispatcher)?
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

    /// An archive whose unpacked copy in the cache was refused: the copy may have been
    /// changed after it was unpacked (the archive is fine), so it is unpacked again and
    /// checked once more. The first refusal stands if the fresh copy is refused too (then
    /// the archive itself is at fault).
    fn repaired(
        &self,
        archive: &Path,
        refusal: Refusal,
        digests: &Digests,
    ) -> Result<Checked, Refusal> {
        let Ok(folder) = package::unpack_again(archive, &self.cache_dir, digests) else {
            return Err(refusal);
        };
        match self.checked(&folder, digests) {
            Ok(checked) => {
                tracing::warn!(
                    archive = %archive.display(),
                    "the unpacked copy of this package in the plugin cache ({}) had been changed \
                     since it was unpacked ({refusal}); it was unpacked again from the archive, \
                     which is intact",
                    folder.display()
                );
                Ok(checked)
            }
            Err(_) => Err(refusal),
        }
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
    /// How its worker is confined (isolation `process`).
    plan: Option<WorkerPlan>,
}

/// A checked package, or why it was refused before its library was opened.
type Preflighted = Result<Checked, Refusal>;

/// A package's library, opened.
enum Opened {
    InProcess(Library),
    Isolated(Arc<PluginWorker>, Inspection),
    #[cfg(feature = "wasm")]
    Wasm(Arc<plugin_wasm::WasmPlugin>),
}

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
