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
