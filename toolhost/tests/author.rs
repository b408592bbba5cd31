//! A plugin authored where an author works: a folder with no toolhost checkout above it,
//! `tool-api` from a registry (the packaged crate, served by a directory source that stands
//! in for crates.io, its dependencies vendored from the machine's cargo cache), and only the
//! `toolhost` command. Created, tested, packaged, verified and called by the README's "Your
//! first plugin" block as written, then signed and published to a real OCI registry; installed from it and called by a user who trusts the key.
#![cfg(test)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use toolhost_tests::oci_registry::OciRegistry;
use toolhost_tests::{repo_root, text};

/// A command as it runs on the author's machine: none of what `cargo test` set for this
/// test, only where the tools and their caches are; cargo never goes online.
fn on_the_machine(program: impl AsRef<OsStr>, dir: &Path) -> Command {
    let mut command = Command::new(program);
    command.env_clear();
    for name in [
        "PATH",
        "HOME",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
        "TMPDIR",
    ] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
        .env("CARGO_NET_OFFLINE", "true")
        .current_dir(dir)
        .stdin(Stdio::null());
    command
}

fn succeeded(what: &str, out: Output) -> String {
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{what}: {said}");
    text(&out.stdout)
}

/// A registry that stands in for crates.io: `tool-api` as `cargo package` makes it, and
/// what it and the scaffold depend on, vendored from the machine's cargo cache, in a
/// directory source at `registry`.
fn stand_in_registry(scratch: &Path, registry: &Path) {
    // The dependencies: what a crate needing tool-api (from this checkout) and serde
    // resolves to, vendored.
    let needs = scratch.join("needs");
    std::fs::create_dir_all(needs.join("src")).unwrap();
    std::fs::write(needs.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        needs.join("Cargo.toml"),
        format!(
            "[package]\nname = \"needs\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n\
             [dependencies]\ntool-api = {{ path = \"{}\" }}\n\
             serde = {{ version = \"1\", features = [\"derive\"] }}\n\n[workspace]\n",
            repo_root().join("tool-api").display()
        ),
    )
    .unwrap();
    succeeded(
        "cargo vendor",
        on_the_machine("cargo", &needs)
            .args(["vendor", "--quiet", "--versioned-dirs"])
            .arg(registry)
            .output()
            .unwrap(),
    );
    // tool-api itself, as a registry would serve it.
    let target = scratch.join("package-target");
    succeeded(
        "cargo package -p tool-api",
        on_the_machine("cargo", &repo_root())
            .args([
                "package",
                "-p",
                "tool-api",
                "--allow-dirty",
                "--no-verify",
                "--quiet",
                "--target-dir",
            ])
            .arg(&target)
            .output()
            .unwrap(),
    );
    let version = tool_api::TOOL_API_VERSION;
    let crate_file = target.join(format!("package/tool-api-{version}.crate"));
    succeeded(
        "tar xzf",
        Command::new("tar")
            .arg("xzf")
            .arg(&crate_file)
            .current_dir(registry)
            .output()
            .unwrap(),
    );
    let digest = plugin_host::digest::sha256_file(&crate_file).unwrap();
    std::fs::write(
        registry.join(format!("tool-api-{version}/.cargo-checksum.json")),
        format!(r#"{{"files":{{}},"package":"{digest}"}}"#),
    )
    .unwrap();
}

/// The author's `toolhost`, run in `dir`.
fn toolhost(dir: &Path, args: &[&str]) -> Output {
    on_the_machine(env!("CARGO_BIN_EXE_toolhost"), dir)
        .args(args)
        .output()
        .unwrap()
}

/// A user's machine: its config in `home`, no Docker credentials.
fn user(home: &Path, args: &[&str]) -> Output {
    let mut command = on_the_machine(env!("CARGO_BIN_EXE_toolhost"), home);
    command
        .arg("--config")
        .arg(home.join("toolhost.toml"))
        .args(args)
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("DOCKER_CONFIG", home.join("docker"));
    command.output().unwrap()
}

#[test]
fn a_plugin_authored_outside_the_checkout_is_tested_packaged_signed_published_installed_and_called()
{
    let Some(oci) = OciRegistry::start() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    assert!(
        !scratch.path().starts_with(repo_root()),
        "the author's folder must have no checkout above it"
    );
    let registry = scratch.path().join("registry");
    stand_in_registry(scratch.path(), &registry);
    let author = scratch.path().join("author");
    std::fs::create_dir_all(author.join(".cargo")).unwrap();
    std::fs::write(
        author.join(".cargo/config.toml"),
        format!(
            "[source.crates-io]\nreplace-with = \"stand-in\"\n\n[source.stand-in]\ndirectory = \"{}\"\n",
            registry.display()
        ),
    )
    .unwrap();

    // The README's first plugin, as written: created, tested, packaged, verified and
    // called, with `toolhost` and cargo from PATH.
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_toolhost")).parent().unwrap();
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let block = toolhost_tests::docs::block("## Your first plugin", "sh");
    let said = {
        let out = on_the_machine("sh", &author)
            .args(["-e", "-c", &block])
            .env("PATH", path)
            .output()
            .unwrap();
        let said = text(&out.stdout) + &text(&out.stderr);
        assert!(out.status.success(), "{block}\n{said}");
        said
    };
    assert!(
        said.contains("2 passed"),
        "the scaffold's tests ran: {said}"
    );
    assert!(said.contains("verdict: OK"), "{said}");
    assert!(said.contains("Hello, Ada!"), "{said}");

    // Made with tool-api by version, nothing that points at a checkout.
    let plugin = author.join("my-tools");
    let manifest = std::fs::read_to_string(plugin.join("Cargo.toml")).unwrap();
    let v = semver::Version::parse(tool_api::TOOL_API_VERSION).unwrap();
    assert!(
        manifest.contains(&format!("tool-api = \"{}.{}\"", v.major, v.minor)),
        "{manifest}"
    );
    assert!(
        !manifest.contains("[patch") && !manifest.contains(&repo_root().display().to_string()),
        "{manifest}"
    );
    let workflow = std::fs::read_to_string(plugin.join(".github/workflows/ci.yml")).unwrap();
    for runner in ["ubuntu-24.04", "ubuntu-24.04-arm", "macos-15"] {
        assert!(workflow.contains(runner), "{workflow}");
    }
    assert!(workflow.contains("toolhost plugin package"), "{workflow}");
    // Tested against tool-api from the registry.
    let lock = std::fs::read_to_string(plugin.join("Cargo.lock")).unwrap();
    let entry = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"tool-api\""))
        .unwrap();
    assert!(
        entry.contains("source = \"registry+https://github.com/rust-lang/crates.io-index\""),
        "tool-api came from the registry, not a path:\n{entry}"
    );

    // Packaged where the README's `plugin package` puts it; then signed and published.
    let archive = plugin.join(format!(
        "dist/my-tools-0.1.0-{}.tar.gz",
        plugin_host::HOST_TARGET
    ));
    assert!(archive.is_file(), "{said}");
    let key = author.join("signing.key");
    let public = succeeded(
        "toolhost plugin keygen",
        toolhost(&author, &["plugin", "keygen", key.to_str().unwrap()]),
    );
    let public = public.lines().next().unwrap().to_string();
    succeeded(
        "toolhost plugin sign",
        toolhost(
            &plugin,
            &[
                "plugin",
                "sign",
                archive.to_str().unwrap(),
                "--key",
                key.to_str().unwrap(),
            ],
        ),
    );
    let verified = succeeded(
        "toolhost plugin verify",
        toolhost(&plugin, &["plugin", "verify", archive.to_str().unwrap()]),
    );
    assert!(
        verified.contains("signature: valid") && verified.contains("verdict: OK"),
        "{verified}"
    );
    let reference = format!("{}/author/my-tools:0.1.0", oci.host());
    let published = succeeded(
        "toolhost plugin publish",
        toolhost(
            &plugin,
            &["plugin", "publish", archive.to_str().unwrap(), &reference],
        ),
    );
    assert!(
        published.contains("published my-tools 0.1.0") && published.contains("signed by"),
        "{published}"
    );

    // A user who trusts the author's key installs it and calls its tool, in process.
    let home = scratch.path().join("user");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("toolhost.toml"),
        format!("trusted_keys = [\"{public}\"]\nrequire_signatures = true\n"),
    )
    .unwrap();
    succeeded(
        "toolhost plugin install",
        user(&home, &["plugin", "install", &reference]),
    );
    let plugins = succeeded("toolhost plugins", user(&home, &["plugins"]));
    assert!(
        plugins.contains("loaded   my-tools 0.1.0") && plugins.contains("[in_process, signed by"),
        "{plugins}"
    );
    let called = succeeded(
        "toolhost call",
        user(
            &home,
            &["call", "my_tools_greet", "--input", r#"{"name": "Ada"}"#],
        ),
    );
    assert_eq!(called.trim(), "Hello, Ada!");
}
