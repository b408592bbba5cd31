//! A directory's entries read straight from the kernel.

use std::io;
use std::os::fd::OwnedFd;

use super::FsError;

/// Reads the entries of an open directory (`getdents64`, into a buffer on the stack),
/// without `.` and `..`, and hands each to `each` as `(name, is a directory)`: the kind
/// comes with the entry, or from an `lstat` where the filesystem does not say. A symlink
/// is not a directory, whatever it points to. Each name is copied once, by `each`.
pub(super) fn each_entry(
    fd: &OwnedFd,
    mut each: impl FnMut(&[u8], bool) -> Result<(), FsError>,
    io_err: impl Fn(io::Error) -> FsError,
) -> Result<(), FsError> {
    use rustix::fs::FileType;
    // Room for at least 30 of the longest entries (a name of 255 bytes and its header).
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
    let mut entries = rustix::fs::RawDir::new(fd, &mut buf);
    while let Some(entry) = entries.next() {
        let entry = entry.map_err(|e| io_err(e.into()))?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Unknown => {
                let stat = rustix::fs::statat(fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| io_err(e.into()))?;
                FileType::from_raw_mode(stat.st_mode)
            }
            known => known,
        };
        each(name.to_bytes(), kind == FileType::Directory)?;
    }
    Ok(())
}

/// An entry's name, owned: the bytes as they are where they are UTF-8 (almost every name,
/// checked in one pass), else with U+FFFD for what is not; a directory's ends with `/`.
pub(super) fn owned_name(name: &[u8], is_dir: bool) -> String {
    let mut owned = String::with_capacity(name.len() + usize::from(is_dir));
    match std::str::from_utf8(name) {
        Ok(text) => owned.push_str(text),
        Err(_) => owned.push_str(&String::from_utf8_lossy(name)),
    }
    if is_dir {
        owned.push('/');
    }
    owned
}

/// `names` sorted in byte order, the order of `str::cmp`, each made an `N` as it takes its
/// place. Up to [`KEYED`] names are sorted by their first eight bytes read as one integer,
/// each name's read once, and the whole names compared only where those are equal: names
/// in one directory mostly differ there, so most comparisons are one integer's and not a
/// `memcmp` (a listing of 20 took about 5,100 instructions to sort by `str::cmp`, 3,300
/// this way). A name shorter than eight bytes is padded with zeros, below any byte it
/// could go on with, so a prefix sorts first.
pub(super) fn sorted<N: From<String>>(mut names: Vec<String>) -> Vec<N> {
    if names.len() > KEYED {
        names.sort_unstable();
        return names.into_iter().map(N::from).collect();
    }
    let mut keys = [(0u64, 0u16); KEYED];
    let keys = &mut keys[..names.len()];
    for (i, (key, name)) in keys.iter_mut().zip(names.iter()).enumerate() {
        // At most KEYED (64) names: the index fits.
        *key = (head(name), i as u16);
    }
    keys.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| names[usize::from(a.1)].cmp(&names[usize::from(b.1)]))
    });
    keys.iter()
        .map(|&(_, i)| N::from(std::mem::take(&mut names[usize::from(i)])))
        .collect()
}

/// How many names [`sorted`] sorts by key, on the stack.
const KEYED: usize = 64;

/// The first eight bytes of `name` as a big-endian integer, zeros after a shorter name.
fn head(name: &str) -> u64 {
    match name.as_bytes().first_chunk::<8>() {
        Some(first) => u64::from_be_bytes(*first),
        None => {
            let mut padded = [0u8; 8];
            padded[..name.len()].copy_from_slice(name.as_bytes());
            u64::from_be_bytes(padded)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_in_the_order_of_str_cmp() {
        let table: &[&str] = &[
            "b",
            "a",
            "",
            "ab",
            "ab/",
            "ab\0",
            "abcdefgh",
            "abcdefg",
            "abcdefghi",
            "abcdefgh/",
            "abcdefgh\0",
            "abcdefgZ",
            "ABCDEFGH",
            "é",
            "\u{FFFD}x",
            "zzzzzzzzzzzz",
            "zzzzzzzzzzzy",
            "Cargo.toml",
            "Cargo.lock",
            "src/",
            ".git/",
        ];
        let small: Vec<String> = table.iter().map(|s| s.to_string()).collect();
        // Over the 64 sorted by key: the same order by the other way.
        let large: Vec<String> = (0..5)
            .flat_map(|i| table.iter().map(move |s| format!("{s}{i}")))
            .collect();
        for names in [small, large] {
            let mut by_str_cmp = names.clone();
            by_str_cmp.sort();
            assert_eq!(sorted::<String>(names), by_str_cmp);
        }
    }

    #[test]
    fn a_name_that_is_not_utf8_is_kept_with_replacement_characters() {
        assert_eq!(owned_name(b"plain.txt", false), "plain.txt");
        assert_eq!(owned_name(b"dir", true), "dir/");
        assert_eq!(owned_name(b"caf\xe9.txt", false), "caf\u{FFFD}.txt");
        assert_eq!(owned_name(b"\xff", true), "\u{FFFD}/");
    }
}
