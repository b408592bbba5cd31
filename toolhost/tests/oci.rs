//! Plugins through a real OCI registry (Debian's `docker-registry`, started per test):
//! published with the library `cargo xtask plugin publish` runs, installed and updated with
//! the `toolhost` binary as a user would, pinned in `toolhost.lock`.
#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use plugin_host::Manifest;
use plugin_host::trust::SecretKey;
use plugin_oci::artifact::PackageFiles;
use plugin_oci::lock::Lock;
use tool_api::SideEffect;
use toolhost_tests::oci_registry::{self, OciRegistry};
use toolhost_tests::text;

/// A user's machine: a config file, a data folder for the store, no Docker credentials.
struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    fn new(config: &str) -> Machine {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("toolhost.toml"), config).unwrap();
        Machine { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn config_file(&self) -> PathBuf {
        self.path().join("toolhost.toml")
    }

    fn config(&self) -> String {
        std::fs::read_to_string(self.config_file()).unwrap()
    }

    fn lock(&self) -> Lock {
        Lock::read(&self.path().join("toolhost.lock")).unwrap()
    }

    /// Forgets every installed package (a fresh machine with the same config and lock).
    fn wipe_store(&self) {
        let _ = std::fs::remove_dir_all(self.path().join("data"));
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        let config = self.config_file();
        command
            .arg("--config")
            .arg(&config)
            .args(args)
            .current_dir(self.path())
            .env("XDG_DATA_HOME", self.path().join("data"))
            .env("XDG_CONFIG_HOME", self.path().join("no-user-config"))
            .env("XDG_CACHE_HOME", self.path().join("cache"))
            .env("XDG_STATE_HOME", self.path().join("state"))
            .env("DOCKER_CONFIG", self.path().join("docker"))
            .stdin(Stdio::null());
        command
    }

    fn toolhost(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }
}

fn ok(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn failed(out: &Output) -> String {
    assert_ne!(out.status.code(), Some(0), "stdout: {}", text(&out.stdout));
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// The `good` fixture plugin as a package folder under `into`, its manifest changed by
/// `edit` (the library stays as built).
fn package(into: &Path, edit: impl FnOnce(&mut Manifest)) -> PathBuf {
    let built = toolhost_tests::package_library(
        &toolhost_tests::fixtures().library("good"),
        &into.join("built"),
        "good",
    );
    let file = built.join(plugin_host::MANIFEST_FILE);
    let mut manifest = Manifest::parse(&file, &std::fs::read_to_string(&file).unwrap()).unwrap();
    edit(&mut manifest);
    let library = built.join(&manifest.library);
    let dir_name = format!("{}-{}-{}", manifest.name, manifest.version, manifest.target);
    toolhost_tests::write_package(&library, &manifest, into, &dir_name)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Publishes a package folder as `cargo xtask plugin publish` does.
fn publish(registry: &OciRegistry, folder: &Path, reference: &str) -> plugin_oci::Published {
    publish_as(
        registry,
        folder,
        reference,
        plugin_oci::RegistryAuth::Anonymous,
    )
}

fn publish_as(
    _registry: &OciRegistry,
    folder: &Path,
    reference: &str,
    auth: plugin_oci::RegistryAuth,
) -> plugin_oci::Published {
    let files = PackageFiles::read(folder).unwrap();
    let reference = plugin_oci::parse_reference(reference).unwrap();
    runtime()
        .block_on(plugin_oci::Registry::with_auth(&reference, auth).publish(&files, &reference))
        .unwrap()
}

fn tool_names(machine: &Machine) -> Vec<String> {
    let out = machine.toolhost(&["list", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&ok(&out)).unwrap();
    listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect()
}

fn fixture_tools() -> Vec<String> {
    let scratch = tempfile::tempdir().unwrap();
    let folder = package(scratch.path(), |_| {});
    let file = folder.join(plugin_host::MANIFEST_FILE);
    let manifest = Manifest::parse(&file, &std::fs::read_to_string(&file).unwrap()).unwrap();
    manifest.tools.into_iter().map(|t| t.name).collect()
}

#[test]
fn a_published_plugin_installs_by_tag_is_pinned_and_loads() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let machine = Machine::new("# my settings stay as written\nmax_concurrency = 4\n");
    let folder = package(machine.path(), |_| {});
    let reference = format!("{}/tools/good:0.1.0", registry.host());
    let published = publish(&registry, &folder, &reference);
    assert_eq!(published.targets, [plugin_host::HOST_TARGET]);

    let said = ok(&machine.toolhost(&["plugin", "install", &reference]));
    assert!(
        said.contains("installed") && said.contains(&published.digest),
        "{said}"
    );
    let config = machine.config();
    assert!(
        config.starts_with("# my settings stay as written\nmax_concurrency = 4\n"),
        "{config}"
    );
    assert!(
        config.contains(&format!("[[plugins.sources]]\noci = \"{reference}\"")),
        "{config}"
    );
    let lock = machine.lock();
    let pin = lock.get(&reference).unwrap();
    assert_eq!(
        (pin.digest.as_str(), pin.artifact.as_str()),
        (published.digest.as_str(), published.artifact.as_str())
    );
    assert_eq!(pin.tag, "0.1.0");

    let names = tool_names(&machine);
    for tool in fixture_tools() {
        assert!(names.contains(&tool), "{tool} not in {names:?}");
    }
}

#[test]
fn a_digest_reference_installs_exactly_that_artifact() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let machine = Machine::new("");
    let folder = package(machine.path(), |_| {});
    let published = publish(
        &registry,
        &folder,
        &format!("{}/tools/good:0.1.0", registry.host()),
    );
    let by_digest = format!("{}/tools/good@{}", registry.host(), published.digest);
    ok(&machine.toolhost(&["plugin", "install", &by_digest]));
    assert_eq!(
        machine.lock().get(&by_digest).unwrap().artifact,
        published.artifact
    );
    assert!(!tool_names(&machine).is_empty());
}

#[test]
fn a_tampered_blob_is_refused_and_nothing_is_installed() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let machine = Machine::new("");
    let folder = package(machine.path(), |_| {});
    let reference = format!("{}/tools/good:0.1.0", registry.host());
    publish(&registry, &folder, &reference);
    let files = PackageFiles::read(&folder).unwrap();
    let blob = registry.blob_file(&format!("sha256:{}", files.manifest.sha256));
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();

    let said = failed(&machine.toolhost(&["plugin", "install", &reference]));
    assert!(said.contains("digest") || said.contains("Digest"), "{said}");
    assert_eq!(
        machine.config(),
        "",
        "the config is not changed by a failed install"
    );
    assert!(machine.lock().plugins.is_empty());
}

#[test]
fn an_unsigned_artifact_is_refused_where_signatures_are_required() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let key = SecretKey::from_seed([7; 32]);
    let machine = Machine::new(&format!(
        "require_signatures = true\ntrusted_keys = [\"{}\"]\n",
        key.public()
    ));
    let unsigned = package(&machine.path().join("unsigned"), |_| {});
    let reference = format!("{}/tools/good:0.1.0", registry.host());
    publish(&registry, &unsigned, &reference);
    let said = failed(&machine.toolhost(&["plugin", "install", &reference]));
    assert!(
        said.contains("not signed") && said.contains("require_signatures"),
        "{said}"
    );
    assert!(!machine.config().contains("plugins.sources"));

    let signed = package(&machine.path().join("signed"), |_| {});
    plugin_host::trust::sign(&signed, &key).unwrap();
    publish(&registry, &signed, &reference);
    let said = ok(&machine.toolhost(&["plugin", "install", &reference]));
    assert!(
        said.contains(&format!("signed by trusted key {}", key.public().id())),
        "{said}"
    );
}

#[test]
fn a_tag_moved_after_install_is_refused_until_the_user_updates() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let machine = Machine::new("");
    let reference = format!("{}/tools/good:0.1.0", registry.host());
    let first = publish(
        &registry,
        &package(&machine.path().join("a"), |_| {}),
        &reference,
    );
    ok(&machine.toolhost(&["plugin", "install", &reference]));

    // The same tag, other content (now signed).
    let moved = package(&machine.path().join("b"), |_| {});
    plugin_host::trust::sign(&moved, &SecretKey::from_seed([9; 32])).unwrap();
    let second = publish(&registry, &moved, &reference);
    assert_ne!(first.digest, second.digest);

    let said = failed(&machine.toolhost(&["plugin", "install", &reference]));
    assert!(
        said.contains(&second.digest)
            && said.contains(&first.digest)
            && said.contains("toolhost plugin update"),
        "{said}"
    );
    assert_eq!(machine.lock().get(&reference).unwrap().digest, first.digest);
    // What is pinned still loads, without asking the registry.
    assert!(!tool_names(&machine).is_empty());

    ok(&machine.toolhost(&["plugin", "install", &reference, "--update"]));
    assert_eq!(
        machine.lock().get(&reference).unwrap().digest,
        second.digest
    );
}

#[test]
fn an_update_moves_within_the_range_and_asks_before_a_class_widens() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let machine = Machine::new("");
    let repo = format!("{}/tools/good", registry.host());
    let at = |version: &str| format!("{repo}:{version}");
    let version = |v: &str| {
        let v = semver::Version::parse(v).unwrap();
        move |m: &mut Manifest| m.version = v
    };
    publish(
        &registry,
        &package(&machine.path().join("1"), version("0.1.0")),
        &at("0.1.0"),
    );
    ok(&machine.toolhost(&["plugin", "install", &at("0.1.0")]));

    // 0.1.1 widens its first tool's class; 0.2.0 is outside ^0.1.0.
    let widened = |m: &mut Manifest| {
        m.version = semver::Version::new(0, 1, 1);
        m.tools[0].side_effects = SideEffect::Execute;
    };
    publish(
        &registry,
        &package(&machine.path().join("2"), widened),
        &at("0.1.1"),
    );
    publish(
        &registry,
        &package(&machine.path().join("3"), version("0.2.0")),
        &at("0.2.0"),
    );

    let said = failed(&machine.toolhost(&["plugin", "update"]));
    assert!(said.contains("(wider)") && said.contains("--yes"), "{said}");
    assert_eq!(machine.lock().get(&at("0.1.0")).unwrap().tag, "0.1.0");

    let said = ok(&machine.toolhost(&["plugin", "update", "--yes"]));
    assert!(
        said.contains("0.1.0 -> 0.1.1") && said.contains("(wider)"),
        "{said}"
    );
    let pin = machine.lock().get(&at("0.1.0")).unwrap().clone();
    assert_eq!(
        (pin.tag.as_str(), pin.version.to_string().as_str()),
        ("0.1.1", "0.1.1")
    );

    let said = ok(&machine.toolhost(&["plugin", "update"]));
    assert!(said.contains("up to date"), "{said}");
}

#[test]
fn a_machine_with_the_lock_and_not_the_package_installs_what_is_pinned() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let machine = Machine::new("");
    let reference = format!("{}/tools/good:0.1.0", registry.host());
    let first = publish(
        &registry,
        &package(&machine.path().join("a"), |_| {}),
        &reference,
    );
    ok(&machine.toolhost(&["plugin", "install", &reference]));
    // The tag moves; the store is lost. Starting installs the pinned artifact, not the tag's.
    let moved = package(&machine.path().join("b"), |_| {});
    plugin_host::trust::sign(&moved, &SecretKey::from_seed([3; 32])).unwrap();
    publish(&registry, &moved, &reference);
    machine.wipe_store();
    assert!(!tool_names(&machine).is_empty());
    let pin = machine.lock().get(&reference).unwrap().clone();
    assert_eq!(pin.digest, first.digest);
    let installed = machine
        .path()
        .join("data/toolhost/oci")
        .join(pin.artifact.replace(':', "-"))
        .join(&pin.name);
    assert!(installed.join(plugin_host::MANIFEST_FILE).is_file());
    assert!(
        !installed.join(plugin_host::trust::SIGNATURE_FILE).exists(),
        "the pinned artifact is the unsigned one"
    );
}

#[test]
fn a_package_for_another_target_is_refused_naming_the_targets_there_are() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let machine = Machine::new("");
    let other = package(machine.path(), |m| m.target = "aarch64-apple-darwin".into());
    let reference = format!("{}/tools/good:0.1.0", registry.host());
    let published = publish(&registry, &other, &reference);
    assert_eq!(published.targets, ["aarch64-apple-darwin"]);
    let said = failed(&machine.toolhost(&["plugin", "install", &reference]));
    assert!(
        said.contains(&format!("no package for {}", plugin_host::HOST_TARGET))
            && said.contains("aarch64-apple-darwin"),
        "{said}"
    );
    // Publishing this host's package to the same tag adds it beside the other.
    let here = publish(
        &registry,
        &package(&machine.path().join("here"), |_| {}),
        &reference,
    );
    assert_eq!(here.targets.len(), 2);
    ok(&machine.toolhost(&["plugin", "install", &reference]));
}

#[test]
fn a_registry_with_basic_auth_takes_credentials_from_the_docker_config() {
    let Some(registry) = OciRegistry::start_with_auth() else {
        return;
    };
    let machine = Machine::new("");
    let folder = package(machine.path(), |_| {});
    let reference = format!("{}/tools/good:0.1.0", registry.host());
    publish_as(
        &registry,
        &folder,
        &reference,
        plugin_oci::RegistryAuth::Basic(oci_registry::USER.into(), oci_registry::PASSWORD.into()),
    );
    let said = failed(&machine.toolhost(&["plugin", "install", &reference]));
    assert!(
        said.contains(&format!("docker login {}", registry.host())),
        "{said}"
    );
    registry.docker_config(&machine.path().join("docker"));
    ok(&machine.toolhost(&["plugin", "install", &reference]));
    assert!(!tool_names(&machine).is_empty());
}

#[test]
fn a_config_source_that_is_not_a_reference_is_refused_naming_the_key() {
    let machine = Machine::new("[[plugins.sources]]\noci = \"r.example/grep:not a tag\"\n");
    let said = failed(&machine.toolhost(&["list"]));
    assert!(
        said.contains("plugins.sources[0].oci") && said.contains("not a tag"),
        "{said}"
    );
}

#[test]
fn a_component_is_one_artifact_in_the_webassembly_oci_layout_and_installs() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let Some(components) = toolhost_tests::peer("TOOLHOST_TEST_COMPONENTS") else {
        return;
    };
    let machine = Machine::new("");
    let folder = components.join("packages/wat-noop");
    let reference = format!("{}/tools/wat-noop:1.0.0", registry.host());
    let published = publish(&registry, &folder, &reference);
    assert_eq!(
        published.digest, published.artifact,
        "the tag names the component's manifest itself"
    );

    // What a component tool that knows nothing of toolhost sees.
    let parsed = plugin_oci::parse_reference(&reference).unwrap();
    let client = plugin_oci::Registry::with_auth(&parsed, plugin_oci::RegistryAuth::Anonymous);
    let (pulled, _) = runtime().block_on(client.resolve(&parsed)).unwrap();
    let plugin_oci::artifact::Pulled::Manifest(image) = pulled else {
        panic!("a component's tag names a manifest, not an index");
    };
    assert_eq!(
        image.config.media_type,
        "application/vnd.wasm.config.v0+json"
    );
    let layers: Vec<&str> = image.layers.iter().map(|l| l.media_type.as_str()).collect();
    assert_eq!(layers, ["application/wasm"]);
    let wasm = std::fs::read(folder.join("wat-noop.wasm")).unwrap();
    assert_eq!(
        image.layers[0].digest,
        plugin_oci::artifact::digest_of(&wasm)
    );
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(registry.blob_file(&image.config.digest)).unwrap())
            .unwrap();
    assert_eq!(
        (config["architecture"].as_str(), config["os"].as_str()),
        (Some("wasm"), Some("wasip2"))
    );
    assert_eq!(config["layerDigests"][0], image.layers[0].digest.as_str());

    ok(&machine.toolhost(&["plugin", "install", &reference]));
    assert!(tool_names(&machine).contains(&"wat_noop".to_string()));
}

#[test]
fn credentials_come_from_a_docker_credential_helper() {
    let Some(registry) = OciRegistry::start_with_auth() else {
        return;
    };
    let machine = Machine::new("");
    let folder = package(machine.path(), |_| {});
    let reference = format!("{}/tools/good:0.1.0", registry.host());
    publish_as(
        &registry,
        &folder,
        &reference,
        plugin_oci::RegistryAuth::Basic(oci_registry::USER.into(), oci_registry::PASSWORD.into()),
    );
    // A helper as `docker-credential-pass` or `-secretservice` answers: the registry on
    // stdin, its credential as JSON on stdout.
    let bin = machine.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let helper = bin.join("docker-credential-toolhost-test");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread registry\n[ \"$registry\" = \"{}\" ] || {{ echo 'credentials not found in native keychain'; exit 1; }}\necho '{{\"ServerURL\":\"'$registry'\",\"Username\":\"{}\",\"Secret\":\"{}\"}}'\n",
            registry.host(),
            oci_registry::USER,
            oci_registry::PASSWORD
        ),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(machine.path().join("docker")).unwrap();
    std::fs::write(
        machine.path().join("docker/config.json"),
        format!(
            r#"{{"credHelpers":{{"{}":"toolhost-test"}}}}"#,
            registry.host()
        ),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = machine
        .command(&["plugin", "install", &reference])
        .env("PATH", path)
        .output()
        .unwrap();
    ok(&out);
}

#[test]
fn a_source_that_cannot_be_installed_is_reported_and_the_others_still_load() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let reference = format!("{}/tools/good:0.1.0", registry.host());
    let machine = Machine::new(&format!(
        "[[plugins.sources]]\noci = \"127.0.0.1:1/tools/gone:0.1.0\"\n\n[[plugins.sources]]\noci = \"{reference}\"\n"
    ));
    publish(&registry, &package(machine.path(), |_| {}), &reference);
    let out = machine.toolhost(&["plugins"]);
    let said = failed(&out);
    assert!(
        said.contains("refused  plugin source 127.0.0.1:1/tools/gone:0.1.0")
            && said.contains("Connection refused"),
        "{said}"
    );
    assert!(
        said.contains("loaded") && said.contains("fixture-good"),
        "{said}"
    );
    assert!(
        machine.lock().get(&reference).is_some(),
        "the source that installed is pinned"
    );
}

#[test]
fn a_store_shared_by_two_configs_keeps_what_either_lock_pins() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let a = Machine::new("");
    let b = Machine::new("");
    let at = |version: &str| format!("{}/tools/good:{version}", registry.host());
    publish(
        &registry,
        &package(&a.path().join("1"), |_| {}),
        &at("0.1.0"),
    );
    let newer = |m: &mut Manifest| m.version = semver::Version::new(0, 1, 1);
    publish(
        &registry,
        &package(&a.path().join("2"), newer),
        &at("0.1.1"),
    );
    // Both install into A's store (one user, two projects).
    let shared = a.path().join("data");
    let in_shared = |machine: &Machine, args: &[&str]| {
        machine
            .command(args)
            .env("XDG_DATA_HOME", &shared)
            .output()
            .unwrap()
    };
    ok(&in_shared(&a, &["plugin", "install", &at("0.1.0")]));
    ok(&in_shared(&b, &["plugin", "install", &at("0.1.0")]));
    ok(&in_shared(&a, &["plugin", "update", "--yes"]));
    assert_eq!(a.lock().get(&at("0.1.0")).unwrap().tag, "0.1.1");
    // B's pin is still in the store: it loads with the registry gone.
    drop(registry);
    let listed = ok(&in_shared(&b, &["plugins"]));
    assert!(listed.contains("fixture-good"), "{listed}");
}

#[test]
fn a_digest_installs_from_a_repository_without_version_tags() {
    let Some(registry) = OciRegistry::start() else {
        return;
    };
    let machine = Machine::new("");
    let latest = format!("{}/tools/good:latest", registry.host());
    let published = publish(&registry, &package(machine.path(), |_| {}), &latest);
    let by_digest = format!("{}/tools/good@{}", registry.host(), published.digest);
    let said = ok(&machine.toolhost(&["plugin", "install", &by_digest]));
    assert!(
        said.contains(&published.digest) && !said.contains(", tag"),
        "{said}"
    );
    let pin = machine.lock().get(&by_digest).unwrap().clone();
    assert_eq!(
        (pin.tag.as_str(), pin.digest.as_str()),
        ("", published.digest.as_str())
    );
    assert!(ok(&machine.toolhost(&["plugin", "update"])).contains("up to date"));
}
