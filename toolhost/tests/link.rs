//! How the `toolhost` binary is linked (`toolhost/build.rs`): on x86_64 Linux with glibc,
//! the code an idle server runs sits in a section of its own before the rest in an
//! optimized build (`link/idle-code.ld`, written by `cargo xtask idle-code`; a debug build
//! leaves it out, its link 20 times faster), the code it never runs in one after the rest,
//! and the relative relocations are packed when the glibc it was built against can load
//! them.
#![cfg(test)]
#![cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]

/// The section names of an ELF64 little-endian file.
fn section_names(elf: &[u8]) -> Vec<String> {
    let u16_at = |at: usize| usize::from(u16::from_le_bytes([elf[at], elf[at + 1]]));
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap()) as usize;
    assert_eq!(&elf[..5], b"\x7fELF\x02", "not an ELF64 file");
    let (table, entry, count, names_index) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let names = u64_at(table + names_index * entry + 0x18);
    (0..count)
        .map(|i| {
            let start = names + u32_at(table + i * entry);
            let end = start + elf[start..].iter().position(|b| *b == 0).unwrap();
            String::from_utf8_lossy(&elf[start..end]).into_owned()
        })
        .collect()
}

/// Whether this machine's glibc is 2.36 or later (`getconf GNU_LIBC_VERSION`).
fn glibc_loads_packed_relocations() -> bool {
    let out = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .expect("getconf runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.trim().trim_start_matches("glibc ");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (2, 36)
}

#[test]
fn the_code_an_idle_server_runs_comes_first_the_code_it_never_runs_last_and_relocations_are_packed()
{
    if std::env::var_os("TOOLHOST_PLAIN_LINK").is_some() {
        eprintln!("TOOLHOST_PLAIN_LINK is set: the binary was linked as cargo links it");
        return;
    }
    let elf = std::fs::read(env!("CARGO_BIN_EXE_toolhost")).unwrap();
    let names = section_names(&elf);
    let at = |name: &str| names.iter().position(|n| n == name);
    let (text, cold) = (at(".text").unwrap(), at(".text.cold_at_idle"));
    assert!(
        cold.is_some_and(|cold| cold > text),
        "no .text.cold_at_idle after .text: {names:?}"
    );
    // Optimized (the tests built with `--release`), the code an idle server runs comes
    // first; the script's patterns leave the hashes out, so they match such a build too.
    if cfg!(debug_assertions) {
        assert!(
            at(".text.hot_at_idle").is_none(),
            "a debug build links without idle-code.ld: {names:?}"
        );
    } else {
        assert!(
            at(".text.hot_at_idle").is_some_and(|hot| hot < text),
            "no .text.hot_at_idle before .text: {names:?}"
        );
    }
    assert_eq!(
        at(".relr.dyn").is_some(),
        glibc_loads_packed_relocations(),
        "{names:?}"
    );
}
