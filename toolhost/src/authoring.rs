//! `toolhost plugin new|build|package|verify|keygen|sign|publish`: a plugin author's
//! commands, in the `toolhost` an author installs anyway to try a plugin (the wheel, the
//! release archive, `cargo install`), run by the library this repository's `cargo xtask
//! plugin` runs too ([`plugin_dev`]). And the two commands a child process answers while
//! they run (`__inspect`, `__verify`): loading a library can crash the process that loads
//! it, so that process is not this one.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use plugin_dev::Inspector;

/// An author's plugin commands (beside `plugin install` and `plugin update`, which a
/// plugin's users run).
#[derive(Subcommand)]
pub(crate) enum AuthorCommand {
    /// Create a plugin crate: a sample tool and its tests (they pass as generated), clippy
    /// rules for what the sandbox refuses, a README and a GitHub Actions workflow. It
    /// depends on tool-api by version, from crates.io or the registry your cargo config
    /// names.
    New {
        /// The crate name (letters, digits, '-' and '_', starting with a letter), or a path
        /// whose last part is one, as with `cargo new`.
        name: String,
        /// Where to create it (default: ./NAME).
        #[arg(long, value_name = "DIR")]
        path: Option<PathBuf>,
        /// A Rust WebAssembly component (wit-bindgen) instead of a native plugin; building
        /// it needs the `wasm32-wasip2` target.
        #[arg(long)]
        wasm: bool,
        /// Take tool-api from this folder (a toolhost checkout's `tool-api`) instead of a
        /// registry: the scaffold gets a `[patch.crates-io]` saying so.
        #[arg(long, value_name = "DIR", conflicts_with = "wasm")]
        tool_api_path: Option<PathBuf>,
    },
    /// Build the plugin crate at PATH (cargo build, run in PATH) and print its library.
    Build {
        /// The plugin crate (default: the current directory).
        #[arg(default_value = ".")]
        path: PathBuf,
        /// Build with the release profile.
        #[arg(long)]
        release: bool,
    },
    /// Build (release), check as a host checks and package a plugin: the crate at PATH, or
    /// a built WebAssembly component (a `.wasm` file). Writes
    /// DIR/NAME-VERSION-TARGET.tar.gz and prints its path; refuses, with the reason, what a
    /// host would refuse.
    Package {
        /// The plugin crate or `.wasm` component (default: the current directory).
        #[arg(default_value = ".")]
        path: PathBuf,
        /// Where to write the archive (default: dist/ in the crate, or beside the `.wasm`).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// A component only: let its calls run in instances kept from earlier calls
        /// (`instances = "reused"`); what a call leaves in memory, the next may see.
        #[arg(long)]
        reuse_instances: bool,
    },
    /// Load a package (folder or archive) in a child process and report its tools,
    /// signature, sandbox and verdict. Exit code 1 if a host would refuse it.
    Verify {
        /// A package folder or archive.
        package: PathBuf,
    },
    /// Make a signing key: FILE (secret, mode 0600, never overwritten) and FILE.pub (the
    /// public key users list in trusted_keys).
    Keygen {
        /// Where to write the secret key.
        file: PathBuf,
    },
    /// Sign a package folder or archive with a key from `keygen` (plugin.sig over the
    /// manifest and library digests). Hosts that trust the key load it in process.
    Sign {
        /// A package folder or archive.
        package: PathBuf,
        /// The secret key file.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
    },
    /// Push a package to an OCI registry as REF (registry/repository:tag): one artifact per
    /// target under the tag (publish each target's package to the same REF). Credentials
    /// come from Docker's config (`docker login`); a registry on a loopback address is
    /// spoken to over HTTP. Users install it with `toolhost plugin install REF`.
    Publish {
        /// A package archive (from `plugin package`) or folder.
        package: PathBuf,
        /// Where: registry/repository:tag, e.g. ghcr.io/acme/grep:0.3.1.
        reference: String,
    },
}

/// The hidden commands a child process answers for [`Inspector::Child`].
pub(crate) const CHILD_COMMANDS: [&str; 2] = ["__inspect", "__verify"];

/// Answers `__inspect LIB` (what a library exports, as JSON) or `__verify PACKAGE` (the
/// verification report) on stdout; the reason on stderr and exit code 1 if refused.
pub(crate) fn child(command: &str, path: &std::path::Path) -> ExitCode {
    let answer = if command == CHILD_COMMANDS[0] {
        plugin_dev::inspect_here(path)
    } else {
        plugin_dev::verify_here(path, None)
    };
    match answer {
        Ok(text) => {
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("{why}");
            ExitCode::FAILURE
        }
    }
}

/// Runs an author's command; `this` is how the running program starts itself again (the
/// child that inspects and verifies). Exit code 0 done, 1 the step failed (said why).
pub(crate) fn run(command: AuthorCommand, this: (PathBuf, Vec<OsString>)) -> ExitCode {
    let inspector = Inspector::Child {
        program: this.0,
        args: this.1,
    };
    match answer(command, &inspector) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolhost plugin: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a command prints on success.
fn answer(command: AuthorCommand, inspector: &Inspector) -> plugin_dev::Result<String> {
    Ok(match command {
        AuthorCommand::New {
            name,
            path,
            wasm: false,
            tool_api_path,
        } => {
            let tool_api_path = tool_api_path.map(absolute);
            let dir = plugin_dev::new(&name, path.as_deref(), tool_api_path.as_deref())?;
            format!(
                "created {}\nnext: cd {} && cargo test && toolhost plugin package\n",
                dir.display(),
                dir.display()
            )
        }
        AuthorCommand::New {
            name,
            path,
            wasm: true,
            ..
        } => {
            let dir = plugin_dev::new_component(&name, path.as_deref())?;
            format!(
                "created {}\nnext: cd {} && rustup target add wasm32-wasip2 && cargo build --release --target wasm32-wasip2 (see its README)\n",
                dir.display(),
                dir.display()
            )
        }
        AuthorCommand::Build { path, release } => {
            let library = plugin_dev::build(plugin_dev::cargo(), &absolute(path), release)?;
            format!("{}\n", library.display())
        }
        AuthorCommand::Package {
            path,
            out,
            reuse_instances,
        } => {
            let path = absolute(path);
            let archive = if is_component(&path) {
                package_component(&path, out, reuse_instances)?
            } else if reuse_instances {
                return plugin_dev::fail(
                    "package",
                    format!(
                        "--reuse-instances applies to WebAssembly components only, and {} is a native plugin crate (a native library has one instance per process)",
                        path.display()
                    ),
                );
            } else {
                let out = out.map_or_else(|| path.join("dist"), absolute);
                plugin_dev::package_crate(plugin_dev::cargo, &path, &out, inspector, true)?
            };
            format!("{}\n", archive.display())
        }
        AuthorCommand::Verify { package } => plugin_dev::verify(&package, inspector)?,
        AuthorCommand::Keygen { file } => {
            let public = plugin_dev::keygen(&file)?;
            format!(
                "{public}\nsecret key: {} (keep it private)\npublic key: {}.pub; users trust it with\n  trusted_keys = [\"{public}\"]\nin toolhost.toml\n",
                file.display(),
                file.display()
            )
        }
        AuthorCommand::Sign { package, key } => {
            let public = plugin_dev::sign(&package, &key)?;
            format!("signed {} with key {}\n", package.display(), public.id())
        }
        AuthorCommand::Publish { package, reference } => {
            // The registry's requests, on a runtime of their own.
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .or_else(|e| plugin_dev::fail("publish the package", e))?
                .block_on(plugin_dev::publish(&package, &reference))?
        }
    })
}

/// A built component: a `.wasm` file.
fn is_component(path: &std::path::Path) -> bool {
    path.is_file() && path.extension().is_some_and(|e| e == "wasm")
}

#[cfg(feature = "wasm")]
fn package_component(
    component: &std::path::Path,
    out: Option<PathBuf>,
    reuse_instances: bool,
) -> plugin_dev::Result<PathBuf> {
    let out = out.map_or_else(
        || component.parent().unwrap_or(component).join("dist"),
        absolute,
    );
    let instances = if reuse_instances {
        plugin_host::Instances::Reused
    } else {
        plugin_host::Instances::Fresh
    };
    // Where a host on this machine caches compiled components: it starts this one at once.
    let compiled = plugin_host::default_cache_dir().join(plugin_host::COMPILED_DIR);
    plugin_dev::package_component(component, &out, instances, &compiled)
}

#[cfg(not(feature = "wasm"))]
fn package_component(
    component: &std::path::Path,
    _: Option<PathBuf>,
    _: bool,
) -> plugin_dev::Result<PathBuf> {
    plugin_dev::fail(
        &format!("package {}", component.display()),
        "this toolhost was built without WebAssembly components (its `wasm` feature, on by default)",
    )
}

/// A path the user gave, made absolute against the directory the command was run in.
fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}
