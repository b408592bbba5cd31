//! A toolhost plugin author's commands, as a library: what `toolhost plugin new|build|
//! package|verify|keygen|sign|publish` run for an author in a repository of their own, and
//! what this repository's `cargo xtask plugin` runs for its examples and tests.
//!
//! ```text
//! new NAME [--path DIR]       a plugin crate (sample tool, tests, clippy rules, CI workflow)
//!                             that depends on tool-api by version      -> scaffold, wasm_scaffold
//! build PATH [--release]      cargo build; the plugin library it made  -> cargo_build
//! package PATH [--out DIR]    build (release), check as a host checks, pack
//!                             DIR/NAME-VERSION-TARGET.tar.gz           -> package, component
//! verify PACKAGE              load it in a child process and report    -> verify, inspect
//! keygen FILE / sign PACKAGE  a signing key; plugin.sig over a package -> signing
//! publish PACKAGE REF         push it to an OCI registry               -> publish
//! install PACKAGE --dir DIR   verify, copy into a plugin directory     -> install
//! ```
//!
//! Loading a library can crash the process that loads it, so packaging and verifying load it
//! in a child process ([`Inspector::Child`]): the program that runs these commands answers
//! `__inspect LIB` with [`inspect_here`] and `__verify PACKAGE` with [`verify_here`].
//! Progress goes to stderr; what a command answers (a path, a report) is returned.

mod cargo_build;
#[cfg(feature = "wasm")]
mod component;
mod error;
mod inspect;
mod install;
mod package;
mod publish;
mod scaffold;
mod signing;
mod verify;
mod wasm_scaffold;

pub use cargo_build::{build, cargo, crate_version};
#[cfg(feature = "wasm")]
pub use component::{describe, package_component, package_component_folder};
pub use error::{Error, Result, announce, fail, io};
pub use inspect::{Inspector, inspect, inspect_here, this_program};
pub use install::{Installed, default_install_dir, install};
pub use package::{package_crate, package_library};
pub use publish::publish;
pub use scaffold::new;
pub use signing::{keygen, sign};
pub use verify::{verify, verify_here};
pub use wasm_scaffold::{WIT_BINDGEN, new_rust as new_component};
