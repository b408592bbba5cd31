//! Records the target triple the host is built for, which plugin packages must match.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=TOOLHOST_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
