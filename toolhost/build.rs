//! Link options for the `toolhost` binary on x86_64 Linux with glibc, where Rust links with
//! its own LLD: the code an idle server never runs goes after the rest (`link/cold-code.ld`),
//! and relative relocations are packed (`-z pack-relative-relocs`, when the glibc the binary
//! is built against, 2.36 or later, can load them). Both keep an idle server's resident
//! memory down: the loader no longer reads a megabyte of relocation entries at every start.
//! Elsewhere (another target, a cross build) the binary links as Cargo would link it.
//!
//! Optimized builds (release, dist, bench: what ships and what is measured) also gather
//! the code an idle server runs at the front (`link/idle-code.ld`) and, before it, the code
//! `serve --http` runs for each call, alone and as a gateway, hottest first
//! (`link/call-code.ld`: spread through 21 MB of code, it cost 3 to 5% more CPU a call).
//! Not unoptimized ones: the idle script's two thousand patterns, matched against every
//! function section of a debug build, made each debug link of `toolhost` take 40 s instead
//! of 2, once in every test build and on the demo's path.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/cold-code.ld");
    println!("cargo:rerun-if-changed=link/idle-code.ld");
    println!("cargo:rerun-if-changed=link/call-code.ld");
    println!("cargo:rerun-if-env-changed=TOOLHOST_PLAIN_LINK");
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    if target != "x86_64-unknown-linux-gnu"
        || target != host
        || std::env::var_os("TOOLHOST_PLAIN_LINK").is_some()
    {
        return;
    }
    let link =
        std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("link");
    println!("cargo:rerun-if-env-changed=PROFILE");
    let optimized = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let scripts: &[&str] = if optimized {
        &["call-code.ld", "idle-code.ld", "cold-code.ld"]
    } else {
        &["cold-code.ld"]
    };
    for script in scripts {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,-T,{}",
            link.join(script).display()
        );
    }
    if glibc_at_least(2, 36) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this machine's glibc (`getconf GNU_LIBC_VERSION`: `glibc 2.36`) is at least
/// `major.minor`.
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= (major, minor)
}
