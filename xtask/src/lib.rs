//! `cargo xtask`: the project's own commands, as a library (the binary parses arguments
//! with clap).
//!
//! ```text
//! cargo xtask test                          every test, doctests included
//! cargo xtask ci                            fmt --check, clippy -D warnings, then test
//! cargo xtask demo                          package the example plugins, run toolhost over them
//! cargo xtask dist [--binary B] [--out DIR] the release archive: toolhost-VERSION-TARGET.tar.gz
//! cargo xtask fuzz [TARGET…] [--seconds N]  the fuzz targets (nightly), from their seeds
//! cargo xtask bench [--write-readme]        every benchmark and its peers: one table
//! cargo xtask bench --mcp-only               the MCP servers and the gateway's rows alone
//! cargo xtask plugin keygen FILE            a signing key (FILE, FILE.pub)
//! cargo xtask plugin sign PACKAGE --key FILE    sign a package (plugin.sig)
//! cargo xtask plugin new NAME [--path DIR]  scaffold a plugin crate (builds and tests as is)
//! cargo xtask plugin build PATH [--release] build a plugin crate, print its library
//! cargo xtask plugin package PATH [--out DIR]   check, then -> DIR/NAME-VERSION-TARGET.tar.gz
//!                                           (default DIR: the crate's own dist/)
//! cargo xtask plugin verify PACKAGE         load it in a child process and report
//! cargo xtask plugin install PACKAGE [--dir DIR]  verify, then install into DIR, replacing
//!                                           an older version of the same plugin
//! cargo xtask plugin publish PACKAGE REF    push it to an OCI registry (REF: host/repo:tag)
//! ```
//!
//! `cargo xtask --help` (at any level) lists the commands and their options.

#[cfg(feature = "components")]
pub mod bench;
#[cfg(feature = "components")]
pub mod call_code;
#[cfg(feature = "components")]
pub mod components;
pub mod demo;
pub mod dist;
pub mod fuzz;
#[cfg(feature = "components")]
pub mod idle_code;
pub mod plugin;
pub mod python;
pub mod registry;
pub mod steps;
#[cfg(feature = "components")]
mod suite;
#[cfg(feature = "components")]
mod symbols;

#[cfg(feature = "components")]
pub use suite::{ci, ensure_browser, ensure_redis, test, test_peers};
/// The registries' installs, in the launcher: `cargo xtask test` starts them beside its
/// build, before this tool exists.
pub use xtask_launcher::peers;
