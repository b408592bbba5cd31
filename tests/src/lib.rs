//! Support for toolhost's cross-crate tests and benchmarks: the fixture plugins.
//!
//! [`fixtures`] builds every fixture plugin (the `tests/fixtures` workspace and the
//! separately built older-minor, newer-minor and `panic = "abort"` crates) once per process
//! into `target/fixtures`, and makes packages of them the way `cargo xtask plugin package`
//! does.

pub mod docs;
pub mod issuer;
pub mod oci_registry;
pub mod redis_server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use plugin_host::{Manifest, digest, package};

/// The built fixture libraries.
#[derive(Debug)]
pub struct Fixtures {
    dir: PathBuf,
}

/// How long a soak bench runs, in minutes: `SOAK_MINUTES` (30 by default) when it runs as
/// a benchmark (`--bench`); `None` in test mode, which runs its short proof instead.
///
/// # Panics
/// When `SOAK_MINUTES` is not a whole number of minutes.
pub fn soak_minutes() -> Option<u64> {
    if !std::env::args().any(|a| a == "--bench") {
        return None;
    }
    Some(match std::env::var("SOAK_MINUTES") {
        Ok(m) => m.trim().parse().unwrap_or_else(|_| {
            panic!(
                "SOAK_MINUTES is '{m}'; set it to a whole number of minutes, e.g. SOAK_MINUTES=30"
            )
        }),
        Err(_) => 30,
    })
}

/// The threads of process `pid` now (0 when it cannot be read).
pub fn threads(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A program's output as text (bytes that are not UTF-8 shown as `�`).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or(here)
}

/// The crates built separately from the fixture workspace (each its own workspace).
pub const SEPARATE_FIXTURES: [&str; 5] = [
    "old-minor",
    "new-minor",
    "new-minor-needs",
    "abort",
    "fault-panic-abort",
];

fn build(manifest: &Path, target_dir: &Path) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "--manifest-path"])
        .arg(manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("building {} failed ({status})", manifest.display()))
    }
}

/// Builds the fixture plugins (once per process; cargo makes it a no-op when up to date).
pub fn fixtures() -> &'static Fixtures {
    static BUILT: OnceLock<Fixtures> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = repo_root();
        let target = root.join("target/fixtures");
        let fixtures = root.join("tests/fixtures");
        let mut manifests = vec![fixtures.join("Cargo.toml")];
        manifests.extend(
            SEPARATE_FIXTURES
                .iter()
                .map(|d| fixtures.join(d).join("Cargo.toml")),
        );
        for manifest in manifests {
            if let Err(e) = build(&manifest, &target) {
                panic!("fixture plugins could not be built: {e}");
            }
        }
        Fixtures {
            dir: target.join("debug"),
        }
    })
}

/// Builds one crate of the fixture workspace in release mode (for benchmarks) and returns
/// its library.
pub fn release_library(name: &str) -> PathBuf {
    let root = repo_root();
    let target = root.join("target/fixtures");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            &format!("fixture-{name}"),
            "--manifest-path",
        ])
        .arg(root.join("tests/fixtures/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => panic!("building fixture-{name} in release failed: {other:?}"),
    }
    let stem = format!("fixture_{}", name.replace('-', "_"));
    target.join("release").join(format!(
        "{}{stem}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ))
}

/// The library of fixture crate `fixture-NAME` as a benchmark loads it: built in release
/// mode when benchmarking (`--bench` among the arguments), the tests' unoptimized build in
/// test mode (`cargo test --bench NAME`), whose numbers nobody reads and which then needs no
/// second build of the fixture workspace.
pub fn bench_library(name: &str) -> PathBuf {
    if std::env::args().any(|a| a == "--bench") {
        release_library(name)
    } else {
        fixtures().library(name)
    }
}

impl Fixtures {
    /// The MCP server fixture binary.
    pub fn mcp_server(&self) -> PathBuf {
        self.dir.join(format!(
            "fixture-mcp-server{}",
            std::env::consts::EXE_SUFFIX
        ))
    }

    /// The MCP server fixture that offers what the official conformance suite calls.
    pub fn mcp_conformance_server(&self) -> PathBuf {
        self.dir.join(format!(
            "fixture-mcp-conformance-server{}",
            std::env::consts::EXE_SUFFIX
        ))
    }

    /// The library of fixture crate `fixture-NAME`.
    pub fn library(&self, name: &str) -> PathBuf {
        let stem = format!("fixture_{}", name.replace('-', "_"));
        self.dir.join(format!(
            "{}{stem}{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ))
    }
}

/// Makes a package folder `parent/<dir_name>` for a library, with the manifest its exports
/// call for (the library is opened in this process to read them). Returns the folder.
pub fn package_library(library: &Path, parent: &Path, dir_name: &str) -> PathBuf {
    let lib = match plugin_host::library::open(library) {
        Ok(lib) => lib,
        Err(e) => panic!("cannot inspect {}: {e}", library.display()),
    };
    let file_name = library
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sha = digest::sha256_file(library).unwrap_or_default();
    let manifest = match Manifest::for_library(&lib.inspection(), &file_name, sha) {
        Ok(m) => m,
        Err(e) => panic!("bad versions in {}: {e}", library.display()),
    };
    write_package(library, &manifest, parent, dir_name)
}

/// Packages the `crash-on-load` fixture as `parent/<dir_name>`. Its library aborts any
/// process that opens it, so its manifest is written from what it is known to export
/// (the `good` fixture's versions), never by opening it.
pub fn package_crash_on_load(parent: &Path, dir_name: &str) -> PathBuf {
    let scratch = parent.join(format!(".{dir_name}-template"));
    let template = package_library(&fixtures().library("good"), &scratch, "template");
    let path = template.join(plugin_host::MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let m = match Manifest::parse(&path, &text) {
        Ok(m) => m,
        Err(e) => panic!("the good fixture's manifest does not parse: {e}"),
    };
    let _ = std::fs::remove_dir_all(&scratch);
    let lib = fixtures().library("crash-on-load");
    let manifest = Manifest {
        name: "fixture-crash-on-load".into(),
        library: lib
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        sha256: digest::sha256_file(&lib).unwrap_or_default(),
        tools: vec![plugin_host::ManifestTool {
            name: "never".into(),
            side_effects: tool_api::SideEffect::None,
        }],
        ..m
    };
    write_package(&lib, &manifest, parent, dir_name)
}

/// Writes a package folder with a given manifest (for fixtures that cannot be inspected).
pub fn write_package(
    library: &Path,
    manifest: &Manifest,
    parent: &Path,
    dir_name: &str,
) -> PathBuf {
    let dest = parent.join(dir_name);
    if let Err(e) = package::write_folder(library, manifest, &dest) {
        panic!("cannot write package {}: {e}", dest.display());
    }
    dest
}

/// Whether process `pid` exists and is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    let exists = rustix::process::test_kill_process(pid).is_ok();
    let zombie = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero()))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false);
    exists && !zombie
}

/// The pids of `pid`'s child processes (from `/proc`).
pub fn children_of(pid: u32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut children: Vec<i32> = tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    children.sort_unstable();
    children.dedup();
    children
}

/// Whether process `pid` set `TCP_NODELAY` on its end of `connection` (one from this process
/// to it): each of its sockets is taken with `pidfd_getfd(2)` until one has `connection`'s
/// two addresses the other way round. `None` where it holds no such socket.
pub fn peer_nodelay(pid: u32, connection: &std::net::TcpStream) -> Option<bool> {
    use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};
    let (ours, theirs) = (connection.local_addr().ok()?, connection.peer_addr().ok()?);
    let pid = Pid::from_raw(i32::try_from(pid).ok()?)?;
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).ok()?;
    std::fs::read_dir(format!("/proc/{pid}/fd", pid = pid.as_raw_pid()))
        .ok()?
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
        })
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|number| pidfd_getfd(&pidfd, number, PidfdGetfdFlags::empty()).ok())
        .map(std::net::TcpStream::from)
        .find(|s| s.local_addr().ok() == Some(theirs) && s.peer_addr().ok() == Some(ours))
        .and_then(|s| s.nodelay().ok())
}

/// The CPU time process `pid` has spent, user and system, all its threads (those that have
/// ended too), to the nanosecond the kernel keeps it: its process CPU clock. `None` when
/// there is no such process. `/proc/PID/stat` counts the same in clock ticks (10 ms), too
/// coarse for a bench round that spends a hundred milliseconds.
pub fn cpu_time(pid: u32) -> Option<std::time::Duration> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: clock_getcpuclockid writes one clockid_t through a pointer to a local.
    #[allow(unsafe_code)]
    if unsafe { libc::clock_getcpuclockid(pid, &raw mut clock) } != 0 {
        return None;
    }
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a pointer to a local.
    #[allow(unsafe_code)]
    if unsafe { libc::clock_gettime(clock, &raw mut now) } != 0 {
        return None;
    }
    Some(std::time::Duration::new(
        u64::try_from(now.tv_sec).ok()?,
        u32::try_from(now.tv_nsec).ok()?,
    ))
}

/// Sends `signal` to process `pid`.
pub fn send_signal(pid: u32, signal: rustix::process::Signal) {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        panic!("{pid} is not a process id");
    };
    if let Err(e) = rustix::process::kill_process(pid, signal) {
        panic!("cannot signal process {}: {e}", pid.as_raw_nonzero());
    }
}

/// The pid a command wrote to `path`, waiting up to 10 s for it.
pub fn read_pid(path: &Path) -> i32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the command never wrote its pid to {}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits up to 10 s for a child process to exit, and fails the test if it does not.
pub fn wait_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) => {}
            Err(e) => panic!("cannot wait for process {}: {e}", child.id()),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {} still running after 10 s",
            child.id()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Makes `command`'s process run as in a container whose seccomp policy hides Landlock:
/// its Landlock system calls (and those of everything it starts) fail with `ENOSYS`, as
/// on a kernel without Landlock. For tests of what toolhost does where its sandbox cannot
/// be enforced.
#[cfg(target_os = "linux")]
pub fn without_landlock(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let arch = match std::env::consts::ARCH.try_into() {
        Ok(arch) => arch,
        Err(e) => panic!("seccompiler does not know this architecture: {e:?}"),
    };
    let hidden = [
        libc::SYS_landlock_create_ruleset,
        libc::SYS_landlock_add_rule,
        libc::SYS_landlock_restrict_self,
    ];
    let filter = seccompiler::SeccompFilter::new(
        hidden.iter().map(|&n| (n, Vec::new())).collect(),
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    );
    let program: seccompiler::BpfProgram = match filter.and_then(TryInto::try_into) {
        Ok(p) => p,
        Err(e) => panic!("cannot build the filter that hides Landlock: {e}"),
    };
    let hook = move || {
        seccompiler::apply_filter(&program).map_err(|e| std::io::Error::other(e.to_string()))
    };
    // SAFETY: the hook runs between fork and exec and only makes the prctl and seccomp
    // system calls on a program built before the fork (it allocates only to report an
    // error, after which the child exits).
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(hook);
    }
}

/// Copies the files of folder `from` (not its subfolders) into `to`, made if missing: a
/// package folder, for a test or bench that must not change the shared fixture.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("create {}: {e}", to.display()));
    let entries =
        std::fs::read_dir(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_file() {
            std::fs::copy(&path, to.join(entry.file_name()))
                .unwrap_or_else(|e| panic!("copy {}: {e}", path.display()));
        }
    }
}

/// A program `cargo xtask test` installs and names in `var`; `None` (the test skips)
/// when it is not set and the run does not require it (`TOOLHOST_TEST_REQUIRE_PEERS`).
pub fn peer(var: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(path) => Some(path.into()),
        None => {
            assert!(
                std::env::var_os("TOOLHOST_TEST_REQUIRE_PEERS").is_none(),
                "{var} is not set: run the tests with cargo xtask test, which installs it"
            );
            eprintln!("skipped: {var} is not set (cargo xtask test installs it)");
            None
        }
    }
}

/// An HTTP server on 127.0.0.1 that answers every request with `body`; returns its port and
/// how many connections reached it (a test of the egress proxy counts them at the target).
pub fn web_server(body: &'static str) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap_or_else(|e| panic!("no loopback port for a test server: {e}"));
    let port = l.local_addr().map(|a| a.port()).unwrap_or_default();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for mut stream in l.incoming().flatten() {
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, hits)
}

/// The `wat-noop` component's package (under `components`, as `cargo xtask test` builds
/// it) written to `into` at `version` (five characters, `2.0.1`): the version patched in
/// the component's data, the manifest's version and checksum written to match, or, with
/// `tampered`, the checksum left as it was (a package that must be refused).
pub fn wat_noop_package(components: &Path, into: &Path, version: &str, tampered: bool) {
    assert_eq!(
        version.len(),
        5,
        "the component's version string has five characters"
    );
    let from = components.join("packages/wat-noop");
    std::fs::create_dir_all(into).unwrap_or_else(|e| panic!("{}: {e}", into.display()));
    let mut wasm = std::fs::read(from.join("wat-noop.wasm")).unwrap_or_default();
    let marker = b"\x0b\x051.0.0";
    let Some(at) = wasm.windows(marker.len()).position(|w| w == marker) else {
        panic!("no version in wat-noop's data");
    };
    wasm[at + 2..at + 7].copy_from_slice(version.as_bytes());
    let component = into.join("wat-noop.wasm");
    std::fs::write(&component, &wasm).unwrap_or_else(|e| panic!("{}: {e}", component.display()));
    let manifest =
        std::fs::read_to_string(from.join(plugin_host::MANIFEST_FILE)).unwrap_or_default();
    let mut manifest = manifest.replacen(
        "version = \"1.0.0\"",
        &format!("version = \"{version}\""),
        1,
    );
    if !tampered {
        let sha = digest::sha256_file(&component).unwrap_or_default();
        let line = manifest
            .lines()
            .find(|l| l.starts_with("sha256"))
            .unwrap_or_default()
            .to_string();
        manifest = manifest.replace(&line, &format!("sha256 = \"{sha}\""));
    }
    let path = into.join(plugin_host::MANIFEST_FILE);
    std::fs::write(&path, manifest).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

#[cfg(test)]
mod tests {
    use super::cpu_time;

    #[test]
    fn cpu_time_counts_this_process_finer_than_a_clock_tick() {
        let own = std::process::id();
        let before = cpu_time(own).expect("this process has a CPU clock");
        let started = std::time::Instant::now();
        let mut spun = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(30) {
            spun = std::hint::black_box(spun.wrapping_add(1));
        }
        let spent = cpu_time(own).expect("this process has a CPU clock") - before;
        assert!(spent > std::time::Duration::ZERO, "spinning spent no CPU");
        // In ticks it would be a multiple of 10 ms; the clock keeps nanoseconds.
        assert_ne!(spent.as_nanos() % 10_000_000, 0, "{spent:?} is whole ticks");
    }

    #[test]
    fn cpu_time_of_a_process_that_is_gone_is_none() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("start true");
        let pid = child.id();
        child.wait().expect("wait for true");
        assert_eq!(cpu_time(pid), None);
    }
}
