//! Plugin manifests (`plugin.toml`), read before anything of a package is trusted: any text
//! is a manifest or an error naming what is wrong, never a panic.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

fuzz_target!(|text: &str| {
    let _ = plugin_host::Manifest::parse(std::path::Path::new("plugin.toml"), text);
});
