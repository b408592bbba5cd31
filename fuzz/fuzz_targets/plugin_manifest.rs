//! Plugin manifests (`plugin.toml`), read before anything of a package is trusted: any text
//! is a manifest or an error naming what is wrong, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = plugin_host::Manifest::parse(std::path::Path::new("plugin.toml"), text);
});
