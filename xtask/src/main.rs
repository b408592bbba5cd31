//! `cargo xtask`: see the library docs for the commands.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use xtask::plugin;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "toolhost's project commands: tests, CI, the demo, and the plugin author's tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build what the tests need and run every test (doctests included).
    Test,
    /// fmt --check, clippy -D warnings, then test.
    Ci,
    /// Package the example plugins and run toolhost over them.
    Demo,
    /// Run every benchmark and the peers its targets compare with (installed under
    /// target/peers), then print one table: figure, measured, target, pass/fail.
    Bench {
        /// Also replace the performance table in docs/performance.md with the result.
        #[arg(long, conflicts_with_all = ["mcp_only", "discovery_only"])]
        write_readme: bool,
        /// Only the MCP servers side by side and the gateway in front of them (the rows
        /// of the MCP table): minutes, not the whole run's half hour.
        #[arg(long, conflicts_with = "discovery_only")]
        mcp_only: bool,
        /// Only progressive discovery's rows: recall over real MCP servers' tools, the
        /// tokens a model is handed, the search's latency.
        #[arg(long)]
        discovery_only: bool,
    },
    /// Fuzz the parsers of untrusted input (fuzz/: cargo-fuzz on nightly, installed under
    /// target/tools when missing) from their seed corpora. `cargo xtask test` only replays
    /// the seeds.
    Fuzz {
        /// The targets to run (default: all).
        targets: Vec<String>,
        /// Seconds per target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// Make the release archive: target/dist/toolhost-VERSION-TARGET.tar.gz (the binary,
    /// README, licenses) and its .sha256, from the dist profile's build.
    Dist {
        /// Archive this toolhost binary instead of building the dist profile's.
        #[arg(long, value_name = "FILE")]
        binary: Option<PathBuf>,
        /// Where to write the archive (default: target/dist).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Create, build, package, verify and install plugins.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Load a library in this process and print what it exports (used by `plugin` in a
    /// child process, so that a crashing library is reported, not suffered).
    #[command(name = "__inspect", hide = true)]
    Inspect { library: PathBuf },
    /// Verify a package in this process (the child side of `plugin verify`).
    #[command(name = "__verify", hide = true)]
    Verify { package: PathBuf },
    /// Build and package the WebAssembly components the tests load, and print where
    /// (`cargo xtask test` does this itself; for running one test file by hand:
    /// `TOOLHOST_TEST_COMPONENTS=$(cargo xtask wasm-fixtures) cargo test --test wasm`).
    #[command(name = "wasm-fixtures")]
    WasmFixtures,
    /// Profile an idle `serve --mcp` of the shipped build under callgrind and write
    /// toolhost/link/idle-code.ld, which gathers the code it runs at the front of the
    /// binary (an idle server's resident code is then a few 64 KiB runs, not 158); then
    /// profile `serve --http`'s calls (alone and as a gateway) and write
    /// toolhost/link/call-code.ld, which gathers theirs before it, hottest first.
    #[command(name = "idle-code")]
    IdleCode,
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Scaffold a plugin crate with a sample tool and its tests (builds and passes as is).
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
    },
    /// Build the plugin crate at PATH and print its library's path.
    Build {
        /// The plugin crate.
        path: PathBuf,
        /// Build with the release profile.
        #[arg(long)]
        release: bool,
    },
    /// Build (release), check and package the plugin crate at PATH:
    /// DIR/NAME-VERSION-TARGET.tar.gz. Refuses, with the reason, what `verify` would refuse.
    Package {
        /// The plugin crate; or a WebAssembly component: a `.wasm` file, or a folder with a
        /// Python `app.py` (built with componentize-py) or a JavaScript `app.js` (built with
        /// componentize-js).
        path: PathBuf,
        /// Where to write the archive (default: the crate's own dist/).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// A component only: let its calls run in instances kept from earlier calls
        /// (`instances = "reused"`), so its language runtime starts once per instance
        /// instead of once per call; what a call leaves in memory, the next may see.
        #[arg(long)]
        reuse_instances: bool,
    },
    /// Load a package in a child process and report its tools and verdicts.
    Verify {
        /// A package folder or archive.
        package: PathBuf,
    },
    /// Make a signing key: FILE (secret, mode 0600) and FILE.pub (the public key to list in
    /// a host's trusted_keys).
    Keygen {
        /// Where to write the secret key (never overwritten).
        file: PathBuf,
    },
    /// Sign a package folder or archive with a key from `keygen` (writes plugin.sig over
    /// the manifest and library digests). Hosts that trust the key load it in process.
    Sign {
        /// A package folder or archive.
        package: PathBuf,
        /// The secret key file.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
    },
    /// Push a package to an OCI registry as REF (registry/repository:tag): one artifact per
    /// target under the tag (publish each target's package to the same REF), a component
    /// once for all. Credentials come from Docker's config (`docker login`); a registry on
    /// a loopback address is spoken to over HTTP. Users install it with
    /// `toolhost plugin install REF`.
    Publish {
        /// A package archive (from `plugin package`) or folder.
        package: PathBuf,
        /// Where: registry/repository:tag, e.g. ghcr.io/acme/grep:0.3.1.
        reference: String,
    },
    /// Verify a package, then install it into DIR, replacing an older version of the same
    /// plugin (default DIR: ~/.local/share/toolhost/plugins).
    Install {
        /// A package folder or archive.
        package: PathBuf,
        /// The plugin directory to install into.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// The commands that build, load or test WebAssembly components, or package the example
/// plugins as the benches do.
#[cfg(feature = "components")]
fn with_components(command: Command) -> xtask::steps::Result {
    match command {
        Command::Test => xtask::test(),
        Command::Ci => xtask::ci(),
        Command::Bench {
            write_readme,
            mcp_only,
            discovery_only,
        } => match discovery_only {
            true => xtask::bench::discovery_only(),
            false => xtask::bench::bench(write_readme, mcp_only),
        },
        Command::IdleCode => xtask::idle_code::idle_code(),
        Command::WasmFixtures => {
            xtask::components::fixtures().map(|dir| println!("{}", dir.display()))
        }
        Command::Fuzz { .. }
        | Command::Dist { .. }
        | Command::Demo
        | Command::Plugin(_)
        | Command::Inspect { .. }
        | Command::Verify { .. } => unreachable!("handled in main"),
    }
}

/// Without the component tooling, the commands that need it say how to get it.
#[cfg(not(feature = "components"))]
fn with_components(_: Command) -> xtask::steps::Result {
    without_components("this command")
}

#[cfg(not(feature = "components"))]
fn without_components(what: &str) -> xtask::steps::Result {
    xtask::steps::fail(
        what,
        "this xtask was built without the WebAssembly component tooling (its `components` feature); run it as `cargo xtask …`, which builds that in for the commands that need it",
    )
}

#[cfg(feature = "components")]
fn package_component(
    path: &std::path::Path,
    out: &std::path::Path,
    instances: plugin_host::Instances,
) -> xtask::steps::Result<PathBuf> {
    xtask::components::package(path, out, instances, &xtask::components::default_compiled())
}

#[cfg(not(feature = "components"))]
fn package_component(
    path: &std::path::Path,
    _: &std::path::Path,
    _: plugin_host::Instances,
) -> xtask::steps::Result<PathBuf> {
    without_components(&format!("package the component {}", path.display()))
        .map(|()| PathBuf::new())
}

/// The child side of `Inspector::Child`: prints JSON or exits 1 with the reason.
fn child(result: Result<String, String>) -> ExitCode {
    match result {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// A path the user gave, made absolute against the directory the command was run in (cargo,
/// which the commands run, runs from the repository root).
fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

fn plugin_command(command: PluginCommand) -> xtask::steps::Result {
    let command = match command {
        PluginCommand::Build { path, release } => PluginCommand::Build {
            path: absolute(path),
            release,
        },
        PluginCommand::Package {
            path,
            out,
            reuse_instances,
        } => PluginCommand::Package {
            path: absolute(path),
            out: out.map(absolute),
            reuse_instances,
        },
        other => other,
    };
    match command {
        PluginCommand::New {
            name,
            path,
            wasm: false,
        } => {
            let dir = plugin::new(&name, path.as_deref())?;
            println!(
                "created {}\nnext: cd {} && cargo test",
                dir.display(),
                dir.display()
            );
        }
        PluginCommand::New {
            name,
            path,
            wasm: true,
        } => {
            let dir = plugin_dev::new_component(&name, path.as_deref())?;
            println!(
                "created {}\nnext: cd {} && rustup target add wasm32-wasip2 && cargo build --release --target wasm32-wasip2 (see its README)",
                dir.display(),
                dir.display()
            );
        }
        PluginCommand::Build { path, release } => {
            println!("{}", plugin::build(&path, release)?.display());
        }
        PluginCommand::Package {
            path,
            out,
            reuse_instances,
        } => {
            let component = xtask_launcher::tool::names_a_component(&path);
            if reuse_instances && !component {
                return xtask::steps::fail(
                    "package",
                    format!(
                        "--reuse-instances applies to WebAssembly components only, and {} is a native plugin crate (a native library has one instance per process)",
                        path.display()
                    ),
                );
            }
            let instances = if reuse_instances {
                plugin_host::Instances::Reused
            } else {
                plugin_host::Instances::Fresh
            };
            let archive = if component {
                let out = out.unwrap_or_else(|| {
                    path.parent()
                        .filter(|_| path.is_file())
                        .unwrap_or(&path)
                        .join("dist")
                });
                package_component(&path, &out, instances)?
            } else {
                let out = out.unwrap_or_else(|| path.join("dist"));
                plugin::package_crate(&path, &out, true)?
            };
            println!("{}", archive.display());
        }
        PluginCommand::Verify { package } => {
            print!("{}", plugin::verify(&package, &plugin::inspector())?);
        }
        PluginCommand::Keygen { file } => {
            let public = plugin::keygen(&file)?;
            println!(
                "{public}\nsecret key: {} (keep it private)\npublic key: {}.pub; trust it with\n  trusted_keys = [\"{public}\"]\nin toolhost.toml",
                file.display(),
                file.display()
            );
        }
        PluginCommand::Sign { package, key } => {
            let public = plugin::sign(&package, &key)?;
            println!("signed {} with key {}", package.display(), public.id());
        }
        PluginCommand::Publish { package, reference } => {
            print!("{}", plugin::publish(&package, &reference)?);
        }
        PluginCommand::Install { package, dir } => {
            let installed = plugin::install(&package, dir.as_deref(), &plugin::inspector())?;
            print!("{installed}");
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Fuzz { targets, seconds } => xtask::fuzz::fuzz(&targets, seconds),
        Command::Dist { binary, out } => {
            xtask::dist::dist(binary.as_deref(), out.as_deref()).map(|_| ())
        }
        Command::Demo => xtask::demo::demo(),
        Command::Plugin(command) => plugin_command(command),
        Command::Inspect { library } => return child(plugin::inspect_here(&library)),
        Command::Verify { package } => return child(plugin::verify_here(&package)),
        command => with_components(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\ncargo xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
