//! `toolhost`: run LLM agent tools safely from the command line.
//!
//! ```text
//! toolhost list [--json] [--workspace DIR]
//! toolhost call NAME --input JSON [--workspace DIR] [--yes] [--json]
//! toolhost plugins
//! toolhost sandbox [--json] [--workspace DIR]
//! toolhost serve --mcp [--control ADDR] | --http ADDR   (see `serve.rs`)
//! ```
//!
//! Global options: `--config FILE` (else `./toolhost.toml`, else the user's config dir),
//! `--plugins DIR` (repeatable; added to the config's `plugin_dirs`).
//! Exit codes: 0 the call succeeded, 1 the call returned an error result, 2 bad usage or
//! configuration. Logs go to stderr (`TOOLHOST_LOG=debug` for more).

fn main() -> std::process::ExitCode {
    #[cfg(all(feature = "mimalloc", target_os = "linux", target_env = "gnu"))]
    toolhost::quiet::set_release(allocator::release_free_memory);
    toolhost::cli::main()
}

#[cfg(all(feature = "mimalloc", target_os = "linux", target_env = "gnu"))]
mod allocator;

#[cfg(all(feature = "mimalloc", target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: allocator::Allocator = allocator::Allocator;
