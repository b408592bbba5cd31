//! `cargo xtask`: see the library docs for the commands.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use xtask::plugin::{self, Inspector};
use xtask::steps::{Result, fail};

const USAGE: &str = "usage: cargo xtask <command>

  test                               build what the tests need, run every test
  ci                                 fmt --check, clippy -D warnings, then test
  demo                               package the example plugins and run toolhost over them
  plugin new NAME [--path DIR]       scaffold a plugin crate with a sample tool and test
  plugin build PATH [--release]      build the plugin crate at PATH
  plugin package PATH [--out DIR]    build (release) and package it: DIR/NAME-VERSION-TARGET.tar.gz (default dist/)
  plugin verify PACKAGE              load a package in a child process and report its tools and verdicts
  plugin install PACKAGE [--dir DIR] verify, then copy into DIR (default ~/.local/share/toolhost/plugins)";

/// Takes `--flag VALUE` out of `args`.
fn option(args: &mut Vec<String>, flag: &str) -> Option<String> {
    let i = args.iter().position(|a| a == flag)?;
    args.remove(i);
    (i < args.len()).then(|| args.remove(i))
}

/// Takes `--flag` out of `args`.
fn switch(args: &mut Vec<String>, flag: &str) -> bool {
    let before = args.len();
    args.retain(|a| a != flag);
    args.len() != before
}

fn positional(args: &[String], what: &str) -> Result<PathBuf> {
    match args {
        [one] => Ok(PathBuf::from(one)),
        [] => fail("read the arguments", format!("missing {what}\n\n{USAGE}")),
        more => fail(
            "read the arguments",
            format!("unexpected arguments {:?}\n\n{USAGE}", &more[1..]),
        ),
    }
}

fn plugin_command(mut args: Vec<String>) -> Result {
    let sub = if args.is_empty() {
        String::new()
    } else {
        args.remove(0)
    };
    match sub.as_str() {
        "new" => {
            let path = option(&mut args, "--path");
            let name = positional(&args, "NAME")?;
            let dir = plugin::new(&name.to_string_lossy(), path.as_deref().map(Path::new))?;
            println!(
                "created {}\nnext: cd {} && cargo test",
                dir.display(),
                dir.display()
            );
            Ok(())
        }
        "build" => {
            let release = switch(&mut args, "--release");
            let path = positional(&args, "PATH")?;
            let lib = plugin::build(&path, release, None)?;
            println!("{}", lib.display());
            Ok(())
        }
        "package" => {
            let out = option(&mut args, "--out")
                .map_or_else(|| xtask::steps::root().join("dist"), PathBuf::from);
            let path = positional(&args, "PATH")?;
            let archive = plugin::package_crate(&path, &out, &Inspector::child(), None)?;
            println!("{}", archive.display());
            Ok(())
        }
        "verify" => {
            let package = positional(&args, "PACKAGE")?;
            print!("{}", plugin::verify(&package, &Inspector::child())?);
            Ok(())
        }
        "install" => {
            let dir = option(&mut args, "--dir");
            let package = positional(&args, "PACKAGE")?;
            let dest =
                plugin::install(&package, dir.as_deref().map(Path::new), &Inspector::child())?;
            let dir = dest.parent().map(Path::to_path_buf).unwrap_or_default();
            println!(
                "installed {}\nload it with: toolhost --plugins {} list   (or plugin_dirs = [\"{}\"] in toolhost.toml)",
                dest.display(),
                dir.display(),
                dir.display()
            );
            Ok(())
        }
        other => fail(
            "read the arguments",
            format!("unknown plugin command '{other}'\n\n{USAGE}"),
        ),
    }
}

/// The child side of `Inspector::Child`: prints JSON or exits 1 with the reason.
fn child(what: &str, arg: Option<&String>) -> ExitCode {
    let Some(arg) = arg else {
        eprintln!("{what} needs a path");
        return ExitCode::from(2);
    };
    let result = match what {
        "__inspect" => plugin::inspect_here(Path::new(arg)),
        _ => plugin::verify_here(Path::new(arg)),
    };
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

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let command = if args.is_empty() {
        String::new()
    } else {
        args.remove(0)
    };
    let result = match command.as_str() {
        "test" => xtask::test(),
        "ci" => xtask::ci(),
        "demo" => xtask::demo::demo(),
        "plugin" => plugin_command(args),
        "__inspect" | "__verify" => return child(&command, args.first()),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("cargo xtask: unknown command '{other}'\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\ncargo xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
