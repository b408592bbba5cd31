//! Plugin packages loaded through the real dispatcher: each fixture's exact verdict, and the
//! host keeps serving after every fault.
#![cfg(test)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::plugin_env::PluginEnv;
use common::{allow_all, next_of};
use dispatcher_core::{Dispatcher, DispatcherConfig, ErrorClass, SessionSpec, ToolUse};
use plugin_host::{Isolation, Manifest, Outcome, PluginHost, Refusal, digest, package};
use serde_json::json;
use toolhost_tests::{fixtures, package_library, write_package};

fn env() -> PluginEnv {
    env_with(Dispatcher::builder().policy(allow_all()).build())
}

/// The built-in tools and plugins, in `dispatcher`.
fn env_with(dispatcher: Dispatcher) -> PluginEnv {
    for f in builtin_tools::factories() {
        dispatcher.register(f).unwrap();
    }
    PluginEnv::new(dispatcher)
}

/// Loads the plugin directory in the mode under test: in process, or isolated when
/// `TOOLHOST_TEST_ISOLATION=process` (`cargo xtask test` runs this suite both ways).
fn load(env: &PluginEnv) -> plugin_host::LoadReport {
    load_as(env, common::isolation_under_test())
}

/// Loads the plugin directory in process, for behaviour only that mode has.
fn load_in_process(env: &PluginEnv) -> plugin_host::LoadReport {
    load_as(env, Isolation::InProcess)
}

fn load_as(env: &PluginEnv, isolation: Isolation) -> plugin_host::LoadReport {
    let report = load_into(env, &env.dispatcher, isolation);
    for package in report.loaded() {
        let Outcome::Loaded { isolation: ran, .. } = &package.outcome else {
            unreachable!()
        };
        assert_eq!(*ran, isolation, "{:?}", report.lines());
    }
    report
}

/// A start over the plugin directory, with this environment's cache (what earlier starts
/// remembered), into `dispatcher`.
fn load_into(
    env: &PluginEnv,
    dispatcher: &Dispatcher,
    isolation: Isolation,
) -> plugin_host::LoadReport {
    common::plugin_host([env.dir()], isolation)
        .cache_dir(env.cache.path())
        .load_into(dispatcher)
}

fn edit_manifest(package: &Path, edit: impl FnOnce(&mut Manifest)) {
    let path = package.join("plugin.toml");
    let mut m = Manifest::parse(&path, &std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut m);
    std::fs::write(&path, m.to_toml()).unwrap();
}

fn only_refusal(report: &plugin_host::LoadReport) -> Refusal {
    let refused: Vec<_> = report.refused().collect();
    assert_eq!(refused.len(), 1, "{:?}", report.lines());
    refused[0].1.clone()
}

#[tokio::test]
async fn good_package_loads_and_its_tools_dispatch_like_builtins() {
    let env = env();
    env.add("good", "good");
    let report = load(&env);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let Outcome::Loaded { name, tools, .. } = &report.packages[0].outcome else {
        unreachable!()
    };
    assert_eq!(name, "fixture-good");
    assert_eq!(tools.len(), 5);
    let r = env.call("echo_upper", json!({"text": "abc"})).await;
    assert_eq!((r.text().as_str(), r.is_error()), ("ABC", false));
    let listing = env.dispatcher.listing_for_session(&env.session());
    let src = listing
        .iter()
        .find(|l| l.definition.name == "echo_upper")
        .unwrap();
    assert_eq!(src.source, "plugin:fixture-good");
    // Validation applies to plugin tools like any other.
    let bad = env.call("echo_upper", json!({"text": 5})).await;
    assert_eq!(bad.error_class, Some(ErrorClass::ValidationError));
}

#[tokio::test]
async fn archive_package_is_unpacked_to_a_cache_named_by_its_checksum() {
    let env = env();
    let staging = tempfile::tempdir().unwrap();
    let folder = package_library(&fixtures().library("good"), staging.path(), "good");
    let m = Manifest::parse(
        &folder.join("plugin.toml"),
        &std::fs::read_to_string(folder.join("plugin.toml")).unwrap(),
    )
    .unwrap();
    let archive = package::pack(&folder, &m, env.dir()).unwrap();
    assert!(
        archive
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("fixture-good-0.1.0-")
    );
    let report = load(&env);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let digest = digest::sha256_file(&archive).unwrap();
    assert!(
        env.cache
            .path()
            .join(&digest)
            .join("fixture-good/plugin.toml")
            .is_file()
    );
    assert_eq!(
        env.call("echo_upper", json!({"text": "z"})).await.text(),
        "Z"
    );
}

#[tokio::test]
async fn a_changed_copy_in_the_cache_is_unpacked_again_from_the_intact_archive() {
    let env = env();
    let staging = tempfile::tempdir().unwrap();
    let folder = package_library(&fixtures().library("good"), staging.path(), "good");
    let m = Manifest::parse(
        &folder.join("plugin.toml"),
        &std::fs::read_to_string(folder.join("plugin.toml")).unwrap(),
    )
    .unwrap();
    let archive = package::pack(&folder, &m, env.dir()).unwrap();
    // An earlier start unpacked it; then its copy in the cache was changed.
    let cached = package::unpack_cached(&archive, env.cache.path())
        .unwrap()
        .join(&m.library);
    let mut bytes = std::fs::read(&cached).unwrap();
    bytes.extend_from_slice(b"tampered");
    std::fs::write(&cached, &bytes).unwrap();
    let report = load(&env);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    assert_ne!(
        std::fs::read(&cached).unwrap(),
        bytes,
        "repaired in the cache"
    );
}

#[tokio::test]
async fn a_package_refused_from_a_fresh_copy_blames_the_archive() {
    let env = env();
    let staging = tempfile::tempdir().unwrap();
    let folder = package_library(&fixtures().library("good"), staging.path(), "good");
    edit_manifest(&folder, |m| m.sha256 = "0".repeat(64));
    let path = folder.join("plugin.toml");
    let m = Manifest::parse(&path, &std::fs::read_to_string(&path).unwrap()).unwrap();
    package::pack(&folder, &m, env.dir()).unwrap();
    let refusal = only_refusal(&load(&env));
    assert!(
        matches!(refusal, Refusal::ChecksumMismatch { .. }),
        "{refusal}"
    );
}

#[tokio::test]
async fn archive_with_path_traversal_entry_is_refused() {
    let env = env();
    let path = env.dir().join("evil.tar.gz");
    // Hand-made tar header: tar::Builder refuses '..' itself, which is the point.
    let mut header = [0u8; 512];
    let name = b"../../escaped.txt";
    header[..name.len()].copy_from_slice(name);
    header[100..107].copy_from_slice(b"0000644");
    header[124..135].copy_from_slice(b"00000000001");
    header[136..147].copy_from_slice(b"00000000000");
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    header[148..156].copy_from_slice(b"        ");
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    header[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let mut tar = header.to_vec();
    tar.extend_from_slice(b"x");
    tar.resize(1024, 0);
    tar.resize(2048, 0);
    let mut gz = flate2_encode(&tar);
    std::fs::write(&path, std::mem::take(&mut gz)).unwrap();
    let refusal = only_refusal(&load(&env));
    assert!(
        matches!(&refusal, Refusal::Archive { detail } if detail.contains("../../escaped.txt")),
        "{refusal}"
    );
    assert!(
        !env.cache
            .path()
            .parent()
            .unwrap()
            .join("escaped.txt")
            .exists()
    );
}

fn flate2_encode(bytes: &[u8]) -> Vec<u8> {
    // A gzip member with a stored (uncompressed) deflate block.
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    for (i, chunk) in bytes.chunks(65535).enumerate() {
        let last = (i + 1) * 65535 >= bytes.len();
        out.push(u8::from(last));
        let len = u16::try_from(chunk.len()).unwrap();
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    let crc = crc32(bytes);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap().to_le_bytes());
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for b in bytes {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[tokio::test]
async fn garbage_bytes_named_so_are_refused_as_not_a_library() {
    let env = env();
    let pkg = env.add("good", "garbage");
    let lib = pkg.join("libfixture_good.so");
    std::fs::write(&lib, b"this is not an ELF file at all").unwrap();
    let sha = digest::sha256_file(&lib).unwrap();
    edit_manifest(&pkg, |m| m.sha256 = sha);
    let refusal = only_refusal(&load(&env));
    assert!(matches!(refusal, Refusal::NotALibrary { .. }), "{refusal}");
    assert!(refusal.to_string().contains("cdylib"), "{refusal}");
}

#[tokio::test]
async fn library_without_entry_point_is_refused() {
    let env = env();
    let good = env.add("good", "template");
    let m = Manifest::parse(
        &good.join("plugin.toml"),
        &std::fs::read_to_string(good.join("plugin.toml")).unwrap(),
    )
    .unwrap();
    std::fs::remove_dir_all(&good).unwrap();
    let lib = fixtures().library("no-entry");
    let manifest = Manifest {
        library: lib.file_name().unwrap().to_string_lossy().into_owned(),
        sha256: digest::sha256_file(&lib).unwrap(),
        ..m
    };
    write_package(&lib, &manifest, env.dir(), "no-entry");
    let refusal = only_refusal(&load(&env));
    assert!(matches!(refusal, Refusal::NoEntryPoint { .. }), "{refusal}");
    assert!(refusal.to_string().contains("export_plugin!"), "{refusal}");
}

#[tokio::test]
async fn checksum_mismatch_is_refused_before_the_library_is_opened() {
    let env = env();
    let pkg = env.add("good", "tampered");
    edit_manifest(&pkg, |m| m.sha256 = "0".repeat(64));
    let refusal = only_refusal(&load(&env));
    assert!(
        matches!(refusal, Refusal::ChecksumMismatch { .. }),
        "{refusal}"
    );
    assert!(
        env.call("echo_upper", json!({"text": "a"}))
            .await
            .is_error()
    );
}

#[tokio::test]
async fn wrong_target_triple_is_refused() {
    let env = env();
    let pkg = env.add("good", "foreign");
    edit_manifest(&pkg, |m| m.target = "aarch64-apple-darwin".into());
    let refusal = only_refusal(&load(&env));
    assert_eq!(
        refusal.to_string(),
        format!(
            "built for target 'aarch64-apple-darwin', this host is '{}': build the plugin for {}",
            plugin_host::HOST_TARGET,
            plugin_host::HOST_TARGET
        )
    );
}

#[tokio::test]
async fn panic_abort_build_is_refused_before_loading() {
    let env = env();
    env.add("abort", "abort");
    let refusal = only_refusal(&load_in_process(&env));
    assert_eq!(refusal, Refusal::PanicAbort);
    assert!(refusal.to_string().contains("panic = \"unwind\""));
}

#[tokio::test]
async fn panic_abort_build_with_a_lying_manifest_is_refused_after_loading() {
    let env = env();
    let pkg = env.add("abort", "liar");
    edit_manifest(&pkg, |m| m.unwinds = true);
    assert_eq!(only_refusal(&load_in_process(&env)), Refusal::PanicAbort);
    assert!(
        env.call("abort_echo", json!({})).await.is_error(),
        "no tool of it was registered"
    );
}

#[tokio::test]
async fn tool_name_clash_is_refused_naming_both_owners_and_registers_nothing() {
    let env = env();
    env.add("dup-name", "dup");
    let refusal = only_refusal(&load(&env));
    let text = refusal.to_string();
    assert!(
        text.contains("read_file")
            && text.contains("builtin")
            && text.contains("plugin:fixture-dup-name"),
        "{text}"
    );
    assert_eq!(
        env.call("dup_unique", json!({})).await.error_class,
        Some(ErrorClass::NotFound)
    );
    assert_eq!(
        env.call("read_file", json!({"path": "x"})).await.text(),
        "'x' not found in the workspace"
    );
}

#[tokio::test]
async fn manifest_and_library_tool_lists_must_agree() {
    let env = env();
    let pkg = env.add("good", "extra-listed");
    edit_manifest(&pkg, |m| {
        m.tools.push(plugin_host::ManifestTool {
            name: "ghost".into(),
            side_effects: tool_api::SideEffect::None,
        });
        m.tools.retain(|t| t.name != "log_levels");
    });
    let text = only_refusal(&load(&env)).to_string();
    assert!(
        text.contains("listed but not in the library: ghost"),
        "{text}"
    );
    assert!(
        text.contains("in the library but not listed: log_levels"),
        "{text}"
    );
}

#[tokio::test]
async fn side_effects_must_match_the_manifest() {
    let env = env();
    let pkg = env.add("good", "understated");
    edit_manifest(&pkg, |m| {
        for t in &mut m.tools {
            if t.name == "ws_write" {
                t.side_effects = tool_api::SideEffect::Read;
            }
        }
    });
    let refusal = only_refusal(&load(&env));
    assert!(
        matches!(refusal, Refusal::SideEffectMismatch { .. }),
        "{refusal}"
    );
}

#[tokio::test]
async fn unknown_manifest_key_is_refused_naming_the_key() {
    let env = env();
    let pkg = env.add("good", "typo");
    let path = pkg.join("plugin.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("sha265 = \"x\"\n{text}")).unwrap();
    let text = only_refusal(&load(&env)).to_string();
    assert!(
        text.contains("sha265") && text.contains("plugin.toml") && text.contains("line 1"),
        "{text}"
    );
}

#[tokio::test]
async fn incompatible_major_version_says_what_to_rebuild_with() {
    let env = env();
    let pkg = env.add("good", "future-major");
    edit_manifest(&pkg, |m| m.tool_api = semver::Version::new(2, 0, 0));
    let text = only_refusal(&load(&env)).to_string();
    let host = semver::Version::parse(tool_api::TOOL_API_VERSION).unwrap();
    assert_eq!(
        text,
        format!(
            "built against tool-api 2.0.0, host provides {host}: rebuild with tool-api ^{}.{}",
            host.major, host.minor
        )
    );
}

#[tokio::test]
async fn plugin_built_against_an_older_minor_loads_in_a_newer_host() {
    let env = env();
    env.add("old-minor", "old");
    let report = load(&env);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let r = env.call("old_echo", json!({"text": "from 1.0"})).await;
    assert_eq!(r.text(), "from 1.0 (write ok: true, escape ok: false)");
    assert!(env.workspace.path().join("from-old-minor.txt").is_file());
}

#[tokio::test]
async fn plugin_built_against_a_newer_minor_loads_when_it_needs_nothing_new() {
    let env = env();
    env.add("new-minor", "new");
    let report = load(&env);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let r = env.call("new_echo", json!({"text": "from 1.9"})).await;
    assert_eq!(r.text(), "from 1.9 (write ok: true, escape ok: false)");
}

#[tokio::test]
async fn plugin_needing_a_newer_host_is_refused_with_a_clear_message() {
    let env = env();
    env.add("new-minor-needs", "needs");
    let refusal = only_refusal(&load(&env));
    assert_eq!(
        refusal.to_string(),
        format!(
            "needs tool-api 1.9.0 or newer, host provides {host}: upgrade toolhost, or rebuild the plugin against tool-api ^{host} without the features it needs from 1.9.0",
            host = tool_api::TOOL_API_VERSION
        )
    );
}

#[tokio::test]
async fn panic_in_definitions_refuses_the_package_and_others_still_load() {
    let env = env();
    let good = env.add("good", "b-good");
    let m = Manifest::parse(
        &good.join("plugin.toml"),
        &std::fs::read_to_string(good.join("plugin.toml")).unwrap(),
    )
    .unwrap();
    let lib = fixtures().library("bad-defs");
    let manifest = Manifest {
        name: "fixture-bad-defs".into(),
        library: lib.file_name().unwrap().to_string_lossy().into_owned(),
        sha256: digest::sha256_file(&lib).unwrap(),
        tools: vec![plugin_host::ManifestTool {
            name: "broken".into(),
            side_effects: tool_api::SideEffect::None,
        }],
        ..m
    };
    write_package(&lib, &manifest, env.dir(), "a-bad-defs");
    env.add("panicky", "c-panicky");
    let report = load(&env);
    assert_eq!(report.loaded().count(), 2, "{:?}", report.lines());
    let refusal = report.refusal_for(&env.dir().join("a-bad-defs")).unwrap();
    assert!(
        matches!(refusal, Refusal::BadDefinitions { detail } if detail.contains("definition exploded")),
        "{refusal}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_in_plugin_execute_and_factory_are_execution_errors_and_the_host_keeps_serving() {
    let env = env();
    env.add("panicky", "panicky");
    env.add("good", "good");
    assert_eq!(load(&env).loaded().count(), 2);
    let r = env.call("panic_execute", json!({})).await;
    assert_eq!(r.error_class, Some(ErrorClass::ExecutionError));
    assert!(!r.text().contains("sk-123"), "redacted: {}", r.text());
    let r = env.call("panic_factory", json!({})).await;
    assert_eq!(r.error_class, Some(ErrorClass::ExecutionError));
    assert_eq!(env.call("fine", json!({})).await.text(), "still fine");
    assert_eq!(
        env.call("echo_upper", json!({"text": "ok"})).await.text(),
        "OK"
    );
    assert_eq!(
        env.call("panic_execute", json!({})).await.error_class,
        Some(ErrorClass::ExecutionError)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_reaches_a_plugin_tool() {
    let env = env();
    env.add("good", "good");
    load(&env);
    let session = env.session();
    let mut events = session.subscribe();
    let (d, s) = (env.dispatcher.clone(), session.clone());
    let pending = tokio::spawn(async move {
        d.dispatch(ToolUse::new("tu", "wait_cancel", json!({})), &s)
            .await
    });
    next_of(&mut events, "tool.called").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    env.dispatcher.cancel_session_tools("s").await;
    let r = pending.await.unwrap();
    assert_eq!(r.error_class, Some(ErrorClass::Cancelled), "{r:?}");
    assert!(
        r.text()
            .contains("stopped by the signal; cancel() calls: 1"),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_tool_ignoring_cancellation_is_abandoned_and_the_host_keeps_serving() {
    let env = env_with(
        Dispatcher::builder()
            .config(DispatcherConfig {
                timeouts: dispatcher_core::Timeouts {
                    cancel_grace: Duration::from_millis(200),
                    ..dispatcher_core::Timeouts::default()
                },
                ..Default::default()
            })
            .build(),
    );
    env.add("panicky", "panicky");
    load(&env);
    let session = env.session();
    let mut events = session.subscribe();
    let (d, s) = (env.dispatcher.clone(), session.clone());
    let pending = tokio::spawn(async move {
        d.dispatch(ToolUse::new("tu", "ignores_cancel", json!({})), &s)
            .await
    });
    next_of(&mut events, "tool.called").await;
    let started = Instant::now();
    env.dispatcher.cancel_session_tools("s").await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        pending.await.unwrap().error_class,
        Some(ErrorClass::Cancelled)
    );
    assert_eq!(env.call("fine", json!({})).await.text(), "still fine");
}

#[tokio::test]
async fn plugin_file_access_has_the_same_workspace_boundary() {
    let env = env();
    env.add("good", "good");
    load(&env);
    let r = env
        .call("ws_write", json!({"path": "../escape.txt", "content": "x"}))
        .await;
    assert_eq!(
        r.error_class,
        Some(ErrorClass::PermissionDenied),
        "{}",
        r.text()
    );
    assert!(
        !env.workspace
            .path()
            .parent()
            .unwrap()
            .join("escape.txt")
            .exists()
    );
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), env.workspace.path().join("out")).unwrap();
    let r = env
        .call("ws_write", json!({"path": "out/x.txt", "content": "x"}))
        .await;
    assert_eq!(
        r.error_class,
        Some(ErrorClass::PermissionDenied),
        "{}",
        r.text()
    );
    let r = env
        .call("ws_write", json!({"path": "in/x.txt", "content": "hello"}))
        .await;
    assert_eq!(r.text(), "wrote 5 bytes");
}

#[tokio::test]
async fn one_bad_package_never_stops_the_others() {
    let env = env();
    env.add("good", "1-good");
    let bad = env.add("good", "2-tampered");
    edit_manifest(&bad, |m| m.sha256 = "f".repeat(64));
    std::fs::create_dir(env.dir().join("3-empty")).unwrap();
    std::fs::copy(fixtures().library("good"), env.dir().join("4-bare.so")).unwrap();
    env.add("old-minor", "5-old");
    let report = load(&env);
    let lines = report.lines();
    assert_eq!(report.loaded().count(), 2, "{lines:?}");
    assert_eq!(report.refused().count(), 3, "{lines:?}");
    assert!(lines[2].contains("no plugin.toml"), "{lines:?}");
    assert!(lines[3].contains("bare library"), "{lines:?}");
    let missing = PluginHost::new(["/no/such/plugins"]).load_into(&env.dispatcher);
    assert!(matches!(
        missing.refused().next(),
        Some((_, Refusal::Directory { .. }))
    ));
}

#[tokio::test]
async fn a_package_folder_reached_through_a_symlink_loads_and_a_linked_bare_library_is_named() {
    let env = env();
    let elsewhere = tempfile::tempdir().unwrap();
    let package = package_library(&fixtures().library("good"), elsewhere.path(), "good");
    std::os::unix::fs::symlink(&package, env.dir().join("1-linked")).unwrap();
    std::os::unix::fs::symlink(fixtures().library("good"), env.dir().join("2-bare.so")).unwrap();
    let report = load(&env);
    let lines = report.lines();
    assert_eq!(report.loaded().count(), 1, "{lines:?}");
    assert!(lines[1].contains("bare library"), "{lines:?}");
}

#[tokio::test]
async fn a_library_that_is_missing_or_a_folder_is_not_in_the_package() {
    let env = env();
    let library = fixtures().library("good");
    let file_name = library.file_name().unwrap();
    let gone = env.add("good", "1-gone");
    std::fs::remove_file(gone.join(file_name)).unwrap();
    let folder = env.add("good", "2-folder");
    std::fs::remove_file(folder.join(file_name)).unwrap();
    std::fs::create_dir(folder.join(file_name)).unwrap();
    let report = load(&env);
    let lines = report.lines();
    assert_eq!(report.refused().count(), 2, "{lines:?}");
    for line in &lines {
        assert!(line.contains("is not in the package"), "{lines:?}");
    }
}

#[tokio::test]
async fn a_manifest_that_is_a_folder_is_an_invalid_plugin_toml_not_a_missing_one() {
    let env = env();
    let package = env.dir().join("odd");
    std::fs::create_dir_all(package.join("plugin.toml")).unwrap();
    let report = load(&env);
    let lines = report.lines();
    assert!(
        matches!(report.refused().next(), Some((_, Refusal::Manifest { .. }))),
        "{lines:?}"
    );
    assert!(lines[0].contains("invalid plugin.toml"), "{lines:?}");
}

#[tokio::test]
async fn a_later_start_where_one_library_changed_loads_every_package_in_directory_order() {
    let env = env();
    for n in 1..=4 {
        env.add("good", &format!("{n}-good"));
    }
    let first = load(&env);
    assert_eq!(first.loaded().count(), 1, "{:?}", first.lines());
    // Same bytes in a new file renamed over it (never rewritten in place: this process
    // has it mapped): this start hashes it, and checks the packages after it in parallel.
    let library = fixtures().library("good");
    let second = env.dir().join("2-good").join(library.file_name().unwrap());
    let copy = second.with_extension("new");
    std::fs::copy(&second, &copy).unwrap();
    std::fs::rename(&copy, &second).unwrap();
    let later = Dispatcher::new();
    let report = load_into(&env, &later, common::isolation_under_test());
    let paths: Vec<_> = report.packages.iter().map(|p| p.path.clone()).collect();
    let expected: Vec<_> = (1..=4)
        .map(|n| env.dir().join(format!("{n}-good")))
        .collect();
    assert_eq!(paths, expected, "{:?}", report.lines());
    assert_eq!(
        report.loaded().next().map(|p| p.path.clone()),
        Some(env.dir().join("1-good")),
        "copies of one version: the first in directory order loads, the rest clash: {:?}",
        report.lines()
    );
}

#[tokio::test]
async fn archive_with_too_many_entries_is_refused_not_unpacked() {
    let env = env();
    let staging = tempfile::tempdir().unwrap();
    let mut builder = tar::Builder::new(Vec::new());
    for i in 0..300 {
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, format!("pkg/f{i}.txt"), &b"x"[..])
            .unwrap();
    }
    let tar_bytes = builder.into_inner().unwrap();
    let path = staging.path().join("many.tar.gz");
    std::fs::write(&path, flate2_encode(&tar_bytes)).unwrap();
    std::fs::copy(&path, env.dir().join("many.tar.gz")).unwrap();
    let refusal = only_refusal(&load(&env));
    assert!(refusal.to_string().contains("256 entries"), "{refusal}");
}

fn order_log(env: &PluginEnv) -> Vec<String> {
    std::fs::read_to_string(env.workspace.path().join("order.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn at(log: &[String], entry: &str) -> usize {
    log.iter()
        .position(|l| l == entry)
        .unwrap_or_else(|| panic!("'{entry}' not in {log:?}"))
}

#[tokio::test]
async fn plugin_tool_judges_concurrency_safety_per_call() {
    let env = env();
    env.add("good", "good");
    assert_eq!(load(&env).loaded().count(), 1);
    let session = env.session();
    let step = |id: &str, dry: bool| {
        ToolUse::new(id, "steps", json!({"tag": id, "ms": 150, "dry_run": dry}))
    };
    let results = env
        .dispatcher
        .dispatch_batch(
            vec![
                step("a", true),
                step("b", true),
                step("c", false),
                step("d", false),
            ],
            &session,
        )
        .await;
    assert!(results.iter().all(|r| !r.is_error()), "{results:?}");
    let log = order_log(&env);
    assert!(
        at(&log, "start b") < at(&log, "end a"),
        "dry runs together: {log:?}"
    );
    assert!(at(&log, "start c") > at(&log, "end b"), "{log:?}");
    assert!(
        at(&log, "start d") > at(&log, "end c"),
        "real runs alone: {log:?}"
    );
}

#[tokio::test]
async fn plugin_tool_streams_live_output_through_the_host() {
    let env = env();
    env.add("good", "good");
    load(&env);
    let session = env.session();
    let mut events = session.subscribe();
    let r = env
        .dispatcher
        .dispatch(ToolUse::new("tu", "steps", json!({"tag": "p"})), &session)
        .await;
    assert_eq!(r.text(), "p done");
    let mut chunks = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let dispatcher_core::EventKind::OutputDelta { chunk } = &e.kind {
            chunks.push(chunk.clone());
        }
    }
    assert_eq!(chunks, ["p: step 1\n", "p: step 2\n"]);
}

#[tokio::test]
async fn of_two_versions_of_one_plugin_the_newer_loads_and_the_older_is_named_superseded() {
    let env = env();
    env.add("good", "current");
    let older = env.add("good", "older");
    edit_manifest(&older, |m| m.version = semver::Version::new(0, 0, 9));
    let report = load(&env);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let text = only_refusal(&report).to_string();
    assert!(
        text.contains("plugin 'fixture-good' 0.0.9 is superseded by 0.1.0")
            && text.contains("current")
            && text.contains("remove this one"),
        "{text}"
    );
    assert_eq!(
        env.call("echo_upper", json!({"text": "a"})).await.text(),
        "A"
    );
}

#[test]
fn definitions_a_host_refuses_are_named_before_the_manifest_is_compared() {
    let lib = plugin_host::library::Library {
        definitions: vec![
            tool_api::ToolDefinition::new(
                "twin",
                "x",
                tool_api::SideEffect::None,
                json!({"type": "object"}),
            ),
            tool_api::ToolDefinition::new(
                "twin",
                "y",
                tool_api::SideEffect::Read,
                json!({"type": "object"}),
            ),
        ],
        ..plugin_host::library::open(&fixtures().library("good")).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let manifest_path =
        package_library(&fixtures().library("good"), dir.path(), "g").join("plugin.toml");
    let manifest = Manifest::parse(
        &manifest_path,
        &std::fs::read_to_string(&manifest_path).unwrap(),
    )
    .unwrap();
    let text = plugin_host::compare(&manifest, &lib)
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("two exported tools are named 'twin' (declaring none and read)")
            && text.contains("fix the plugin")
            && !text.contains("re-package it with"),
        "{text}"
    );
}

#[tokio::test]
async fn a_plugin_tools_file_access_is_bounded_by_its_declared_class() {
    let env = env();
    env.add("probe", "probe");
    load(&env);
    let session = env.session();
    common::assert_file_access_follows_the_declared_class(
        &env.dispatcher,
        &session,
        |rel, text| std::fs::write(env.workspace.path().join(rel), text).unwrap(),
    )
    .await;
}

#[tokio::test]
async fn an_inline_plugin_tool_that_reads_a_file_works() {
    let env = env();
    env.add("probe", "probe");
    load(&env);
    std::fs::write(env.workspace.path().join("seen.txt"), "seen").unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        env.call("probe_inline_read", json!({})),
    )
    .await
    .expect("the call answers");
    assert_eq!(r.text(), "seen", "{r:?}");
}

#[tokio::test]
async fn a_passed_layout_check_is_remembered_for_those_bytes_and_a_later_start_uses_it() {
    let env = env();
    let package = env.add("good", "good");
    let first = load_in_process(&env);
    assert_eq!(first.loaded().count(), 1, "{:?}", first.lines());
    let file = env.cache.path().join(plugin_host::layouts::LAYOUTS_FILE);
    let library = fixtures().library("good");
    let sha = digest::sha256_file(&library).unwrap();
    let remembered = std::fs::read_to_string(&file).unwrap();
    assert!(remembered.contains(&sha), "{remembered}");
    assert!(
        remembered.contains(&plugin_host::layouts::host_identity().unwrap()),
        "the verdict names this host: {remembered}"
    );

    // A later start over the same bytes, with the verdict remembered: it loads and works.
    let later = Dispatcher::builder().policy(allow_all()).build();
    let report = load_into(&env, &later, Isolation::InProcess);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let session = later
        .open_session(SessionSpec::new("s", env.workspace.path()))
        .unwrap();
    let r = later
        .dispatch(
            ToolUse::new("t1", "echo_upper", json!({"text": "abc"})),
            &session,
        )
        .await;
    assert_eq!((r.text().as_str(), r.is_error()), ("ABC", false));

    // Other bytes in the same place have another digest: checked again, and the verdict
    // for bytes no longer there is dropped.
    std::fs::remove_dir_all(&package).unwrap();
    env.add("noisy", "good");
    let report = load_into(&env, &Dispatcher::new(), Isolation::InProcess);
    assert_eq!(report.loaded().count(), 1, "{:?}", report.lines());
    let other_sha = digest::sha256_file(&fixtures().library("noisy")).unwrap();
    let remembered = std::fs::read_to_string(&file).unwrap();
    assert!(remembered.contains(&other_sha), "{remembered}");
    assert!(!remembered.contains(&sha), "{remembered}");
}

#[tokio::test]
async fn a_library_replaced_under_a_path_this_process_opened_is_not_remembered_as_checked() {
    let env = env();
    let package = env.add("good", "good");
    let first = load_in_process(&env);
    assert_eq!(first.loaded().count(), 1, "{:?}", first.lines());
    // Other bytes under the same path, with a manifest that matches them: the loader hands
    // back the library it already holds for that path, so this process never checks them.
    let library = fixtures().library("good");
    let file_name = library.file_name().unwrap();
    let staging = tempfile::tempdir().unwrap();
    let other = staging.path().join(file_name);
    std::fs::copy(fixtures().library("noisy"), &other).unwrap();
    std::fs::remove_dir_all(&package).unwrap();
    package_library(&other, env.dir(), "good");
    let other_sha = digest::sha256_file(&other).unwrap();
    let again = load_into(&env, &Dispatcher::new(), Isolation::InProcess);
    assert_eq!(again.loaded().count(), 0, "{:?}", again.lines());
    let remembered =
        std::fs::read_to_string(env.cache.path().join(plugin_host::layouts::LAYOUTS_FILE))
            .unwrap_or_default();
    assert!(!remembered.contains(&other_sha), "{remembered}");
}
