//! Reading a callgrind profile of the shipped build and writing its functions as linker
//! script patterns, for `cargo xtask idle-code`'s two scripts ([`crate::idle_code`] and
//! [`crate::call_code`]): which functions of the binary ran and how much each ran itself,
//! how many instances a generic function has in the binary, and each function as a section
//! pattern that still matches after a change of compiler, dependency or profile.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::steps::{Result, fail, io};

/// The functions of object `binary` in a callgrind profile (`ob=`, `fn=` and `cfn=`
/// lines, names given once and then referred to by number, and the code in no object
/// valgrind knows, `???`, which is the binary's outside its `.text`),
/// each with the instructions it ran itself (its cost lines, not those of its calls).
pub(crate) fn costs_of(profile: &str, binary: &str) -> std::collections::BTreeMap<String, u64> {
    use std::collections::BTreeMap;
    let mut objects: BTreeMap<String, String> = BTreeMap::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut ours: BTreeMap<String, u64> = BTreeMap::new();
    let mut in_binary = false;
    let mut current: Option<String> = None;
    // The cost line after `calls=` is the call's, not the function's own.
    let mut of_a_call = false;
    // `(12) name` defines 12; `(12)` refers to it.
    let named = |value: &str, table: &mut BTreeMap<String, String>| -> Option<String> {
        let value = value.trim();
        let (id, rest) = match value.strip_prefix('(') {
            Some(v) => v.split_once(')')?,
            None => return Some(value.to_string()),
        };
        let rest = rest.trim();
        if rest.is_empty() {
            table.get(id).cloned()
        } else {
            table.insert(id.to_string(), rest.to_string());
            Some(rest.to_string())
        }
    };
    for line in profile.lines() {
        if let Some(v) = line.strip_prefix("ob=") {
            // Code in a section of the binary's own, outside `.text` (as the script's is),
            // is in no object valgrind knows: `???`.
            in_binary = named(v, &mut objects).is_some_and(|o| o == binary || o == "???");
        } else if let Some(v) = line.strip_prefix("cob=") {
            named(v, &mut objects);
        } else if let Some(v) = line.strip_prefix("fn=") {
            let name = named(v, &mut names);
            current = name.filter(|_| in_binary);
            if let Some(name) = &current {
                ours.entry(name.clone()).or_default();
            }
        } else if let Some(v) = line.strip_prefix("cfn=") {
            // Named here; counted where it is the function being described.
            named(v, &mut names);
        } else if line.starts_with("calls=") {
            of_a_call = true;
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            if std::mem::take(&mut of_a_call) {
                continue;
            }
            let ir = line
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse::<u64>().ok());
            if let (Some(name), Some(ir)) = (&current, ir) {
                *ours.entry(name.clone()).or_default() += ir;
            }
        }
    }
    ours
}

/// How many functions of `binary` each legacy name stands for once its hash is left out
/// (`…17h`): the instances of a generic function, from the binary's symbol table as `nm`
/// lists it.
pub(crate) fn legacy_instances(binary: &Path) -> Result<Instances> {
    let listed = io(
        "list the built toolhost's symbols (nm, from binutils)",
        Command::new("nm")
            .arg("--defined-only")
            .arg(binary)
            .stderr(Stdio::inherit())
            .output(),
    )?;
    if !listed.status.success() {
        return fail(
            "list the built toolhost's symbols",
            format!("nm {} failed ({})", binary.display(), listed.status),
        );
    }
    Ok(instances_of(&String::from_utf8_lossy(&listed.stdout)))
}

/// The legacy names of the functions in `nm`'s listing (`ADDRESS KIND NAME`, code being
/// kind `t`, `T` or `W`), each counted once per symbol, without its hash.
fn instances_of(listing: &str) -> Instances {
    let mut counts = Instances::new();
    for line in listing.lines() {
        let mut fields = line.split_whitespace();
        let (Some(_), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if matches!(kind, "t" | "T" | "W")
            && let Some((stem, _)) = legacy(name)
        {
            *counts.entry(stem.to_string()).or_default() += 1;
        }
    }
    counts
}

/// Functions of the binary by legacy name without its hash.
pub(crate) type Instances = std::collections::HashMap<String, usize>;

/// A legacy symbol (`_ZN…17h<16 hex>E`, then maybe `.llvm.N`) as its name without the
/// hash (`_ZN…17h`) and with it (`_ZN…17h<16 hex>E`).
fn legacy(name: &str) -> Option<(&str, &str)> {
    let at = name.rfind("17h").filter(|_| name.starts_with("_ZN"))?;
    let hash = name.get(at + 3..at + 20)?;
    (hash[..16].bytes().all(|b| b.is_ascii_hexdigit()) && hash.ends_with('E'))
        .then(|| (&name[..at + 3], &name[..at + 20]))
}

/// A symbol name as a section pattern that holds across builds: its hashes left out, but
/// for a legacy name the binary holds several functions of (a generic function's
/// instances: the hash tells them apart).
pub(crate) fn pattern(name: &str, instances: &Instances) -> Option<String> {
    // callgrind marks recursion levels (`name'2`).
    let name = name.split('\'').next()?;
    let symbol = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && !name.contains(|c: char| c.is_whitespace() || "(){};\"*?[]".contains(c));
    if !symbol {
        return None;
    }
    if let Some((stem, exact)) = legacy(name) {
        // A legacy name without its hash matches every instance of a generic function,
        // and the start runs the configuration's deserializers for a few types of the
        // hundreds they have instances for: kept, the hash matches only the instance that
        // ran, and only in a build by the same compiler from the same dependencies (where
        // it differs, that function stays in `.text`, as if never gathered).
        return Some(if instances.get(stem).is_some_and(|&n| n > 1) {
            format!("{exact}*")
        } else {
            format!("{stem}*")
        });
    }
    // A v0 or C name holds no `.`: what follows one is a suffix the compiler added to
    // tell apart copies of a function (`.1838` for an internal one under LTO, `.llvm.N`,
    // `.cold`), numbered anew by every build, so a pattern that kept it matched only the
    // build it was written from.
    let name = match name.split_once('.') {
        Some((bare, _)) if !name.starts_with("_ZN") => bare,
        _ => name,
    };
    if name.starts_with("_R") {
        // v0: every crate root `C` carries its disambiguator, `s<base62>_`.
        let mut out = String::new();
        let mut rest = name;
        while let Some(at) = rest.find("Cs") {
            out.push_str(&rest[..at + 2]);
            let after = &rest[at + 2..];
            match after.find('_') {
                Some(end) if after[..end].bytes().all(|b| b.is_ascii_alphanumeric()) => {
                    out.push_str("*_");
                    rest = &after[end + 1..];
                }
                _ => rest = after,
            }
        }
        out.push_str(rest);
        return Some(format!("{out}*"));
    }
    Some(format!("{name}*"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symbols_hashes_are_left_out_of_its_pattern() {
        let one_instance = Instances::from([(
            "_ZN10serde_core3ser12SerializeMap15serialize_entry17h".into(),
            1,
        )]);
        let cases = [
            (
                "_ZN10serde_core3ser12SerializeMap15serialize_entry17h1535b59fba97960dE'2",
                Some("_ZN10serde_core3ser12SerializeMap15serialize_entry17h*"),
            ),
            (
                "_ZN8tool_api6schema7Checker10check_node17hbe993b85718c8392E.llvm.123",
                Some("_ZN8tool_api6schema7Checker10check_node17h*"),
            ),
            (
                "_RNvMs16_NtCsjrHSEGnQ3l9_3std4pathNtB6_4Path13__strip_prefix",
                Some("_RNvMs16_NtCs*_3std4pathNtB6_4Path13__strip_prefix*"),
            ),
            (
                "_RNvMs0_NtNtNtCsjrHSEGnQ3l9_3std4sync4mpmc5wakerNtB5_9SyncWaker6notify.1848",
                Some("_RNvMs0_NtNtNtCs*_3std4sync4mpmc5wakerNtB5_9SyncWaker6notify*"),
            ),
            ("mi_free", Some("mi_free*")),
            ("mi_page_free.cold.2", Some("mi_page_free*")),
            ("(below main)", None),
            ("0x000000000058f230", None),
        ];
        for (name, expected) in cases {
            assert_eq!(pattern(name, &one_instance).as_deref(), expected, "{name}");
        }
    }

    #[test]
    fn the_instances_are_counted_from_the_code_symbols_of_nms_listing() {
        let listing = "\
0000000000401000 t _ZN4toml2de11deserialize17h0123456789abcdefE.llvm.77
0000000000402000 t _ZN4toml2de11deserialize17hfedcba9876543210E
0000000000403000 T _ZN4main4main17h00000000000000aaE
0000000000404000 r _ZN4toml2de11deserialize17h1111111111111111E
0000000000405000 T mi_free
";
        let instances = instances_of(listing);
        assert_eq!(instances.get("_ZN4toml2de11deserialize17h"), Some(&2));
        assert_eq!(instances.get("_ZN4main4main17h"), Some(&1));
        assert_eq!(instances.len(), 2, "{instances:?}");
    }

    #[test]
    fn a_generic_functions_instance_keeps_its_hash() {
        let instances = Instances::from([("_ZN4toml2de11deserialize17h".into(), 212)]);
        assert_eq!(
            pattern(
                "_ZN4toml2de11deserialize17h0123456789abcdefE.llvm.77",
                &instances
            )
            .as_deref(),
            Some("_ZN4toml2de11deserialize17h0123456789abcdefE*")
        );
    }

    #[inline(never)]
    fn instantiated<T: std::fmt::Debug>(value: T) -> String {
        format!("{value:?}")
    }

    #[test]
    fn the_instances_of_a_generic_function_are_counted_from_the_binarys_symbols() {
        assert_eq!(
            std::hint::black_box(instantiated(1u8)) + &instantiated("a"),
            "1\"a\""
        );
        let binary = std::env::current_exe().expect("the test binary");
        let instances = legacy_instances(&binary).expect("its symbols");
        let ours: Vec<_> = instances
            .iter()
            .filter(|(stem, _)| stem.contains("7symbols5tests12instantiated17h"))
            .collect();
        assert_eq!(ours.len(), 1, "{ours:?}");
        assert_eq!(*ours[0].1, 2, "{ours:?}");
    }

    #[test]
    fn a_functions_cost_is_what_it_ran_itself_not_what_it_called() {
        let profile = "ob=(1) /bin/toolhost\nfn=(1) outer\n3 10\n+1 5\ncfn=(2) inner\ncalls=4 0\n5 1000\n* 2\n\nfn=(2)\n7 250\n\nob=(2) /lib/libc.so.6\nfn=(3) memcpy\n1 99\n";
        let costs = costs_of(profile, "/bin/toolhost");
        assert_eq!(
            costs.into_iter().collect::<Vec<_>>(),
            [("inner".to_string(), 250), ("outer".to_string(), 17)]
        );
    }
}
