//! A Docker config file read for a registry (plugin-oci's `credentials/lookup.rs`,
//! compiled in from its source): a registry name and the file's text, split at the first
//! NUL byte. Any bytes are read without a panic; a helper it names to run is a helper's
//! name (`docker-credential-NAME`, never a path); and what it finds in `auths` is what
//! the file holds for that registry.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

#[allow(dead_code, missing_docs, unreachable_pub)]
#[path = "../../plugin-oci/src/credentials/lookup.rs"]
mod lookup;

use lookup::{Found, lookup};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (registry, config) = text.split_once('\0').unwrap_or(("r.example", text));
    let found = lookup(config, registry);
    // What the file holds, read as JSON (its strings unescaped, as the lookup reads them).
    let Ok(file) = serde_json::from_str::<serde_json::Value>(config) else {
        return;
    };
    match found {
        Ok(Found::Helper(name)) => {
            assert!(!name.is_empty(), "an empty helper name");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
                "a helper name that is not a name: {name:?}"
            );
            let named = file["credsStore"] == name.as_str()
                || file["credHelpers"]
                    .as_object()
                    .is_some_and(|helpers| helpers.values().any(|h| *h == name.as_str()));
            assert!(named, "{name:?} is not a helper the file names");
        }
        Ok(Found::Basic(user, _)) => {
            // From an entry's own fields, or its base64 `auth`: never made up.
            let from_file = file["auths"].as_object().is_some_and(|auths| {
                auths
                    .values()
                    .any(|e| e["username"] == user.as_str() || e.get("auth").is_some())
            });
            assert!(from_file, "{user:?} from nowhere");
        }
        Ok(Found::Anonymous) | Err(_) => {}
    }
});
