//! A Docker config file read for a registry (plugin-oci's `credentials/lookup.rs`,
//! compiled in from its source): a registry name and the file's text, split at the first
//! NUL byte. Any bytes are read without a panic; a helper it names to run is a helper's
//! name (`docker-credential-NAME`, never a path); and what it finds in `auths` is what
//! the file holds for that registry.
#![no_main]

#[allow(dead_code, missing_docs, unreachable_pub)]
#[path = "../../plugin-oci/src/credentials/lookup.rs"]
mod lookup;

use libfuzzer_sys::fuzz_target;
use lookup::{Found, lookup};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (registry, config) = text.split_once('\0').unwrap_or(("r.example", text));
    match lookup(config, registry) {
        Ok(Found::Helper(name)) => {
            assert!(!name.is_empty(), "an empty helper name");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
                "a helper name that is not a name: {name:?}"
            );
            assert!(config.contains(&name), "{name:?} is not in the file");
        }
        Ok(Found::Basic(user, pass)) => {
            // From the file's own fields, or its base64 `auth`: never made up.
            assert!(
                config.contains(&user) || config.contains("\"auth\""),
                "{user:?} from nowhere"
            );
            let _ = pass;
        }
        Ok(Found::Anonymous) | Err(_) => {}
    }
});
