//! The `toolhost` binary's memory allocator (feature `mimalloc`, on by default; Linux with
//! glibc): mimalloc for everything toolhost runs itself, the system allocator in a plugin
//! worker (`toolhost plugin-worker`).
//!
//! - **Why mimalloc**: a call allocates and frees a few dozen small blocks (its message,
//!   its input, its events, its answer) and a few large ones (its future); glibc's
//!   allocator spent about a tenth of `serve --mcp`'s CPU on them, part of it merging free
//!   blocks (`malloc_consolidate`) whenever a large block was asked for. Measured side by
//!   side, see `docs/performance.md`.
//! - **Plain blocks the plain way**: the `mimalloc` crate asks `mi_malloc_aligned` for
//!   every block; a block that needs no more than 8-byte alignment (nearly all of them)
//!   is asked of `mi_malloc` here, whose every block is 8-aligned. Counted with callgrind,
//!   an allocation took 60 instructions instead of 98, and a `word_count` call over stdio
//!   1,100 fewer (31,315 from 32,426).
//! - **Committed as used**: mimalloc's arenas are committed as they are used
//!   (`arena_eager_commit` off). Committed at once, the kernel backs them with transparent
//!   huge pages, and an idle server held 8 MiB more.
//! - **Freed memory given back when quiet**: mimalloc gives freed memory back to the system
//!   10 ms after it was freed, but only when it next runs, which an idle server does not:
//!   [`release_free_memory`] runs once the server's client falls quiet
//!   (`toolhost::quiet`).
//! - **Why not in a worker**: a worker limits its own address space (`RLIMIT_AS`, 1 GiB by
//!   default) once it starts, and mimalloc reserves a gigabyte of address space for its
//!   first arena: every later mapping (the plugin's library, a thread's stack) would fail
//!   (the isolated-plugin tests in `toolhost/tests/cli.rs` fail that way when a worker
//!   uses mimalloc: "failed to map segment from shared object").
//!
//! Which allocator a process uses is decided once, before its first allocation, from its
//! first argument (glibc passes `main`'s arguments to the functions in `.init_array`, which
//! run before `main`), and never changes after; if anything allocated before that (no
//! dependency runs code before `main` today), mimalloc is kept, so every block is always
//! freed by the allocator that gave it.
//!
//! The only unsafe code of this crate, at its boundary with C: mimalloc's functions and
//! glibc's start-up convention.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{CStr, c_char, c_int, c_long, c_void};
use std::sync::atomic::{AtomicU8, Ordering};

use mimalloc::MiMalloc;

/// The binary's allocator.
pub struct Allocator;

const UNDECIDED: u8 = 0;
const MIMALLOC: u8 = 1;
const SYSTEM: u8 = 2;

static CHOSEN: AtomicU8 = AtomicU8::new(UNDECIDED);

/// mimalloc's `mi_option_arena_eager_commit`: its place in `mi_option_t` (`mimalloc.h`,
/// v3, the version `libmimalloc-sys` builds; the unit test checks the version).
const ARENA_EAGER_COMMIT: c_int = 4;

unsafe extern "C" {
    /// mimalloc's `mi_option_set` (in the library `libmimalloc-sys` links).
    fn mi_option_set(option: c_int, value: c_long);
    /// mimalloc's `mi_malloc`: a block of at least `size` bytes, aligned to 8 at least.
    fn mi_malloc(size: usize) -> *mut c_void;
    /// mimalloc's `mi_zalloc`: the same, zeroed.
    fn mi_zalloc(size: usize) -> *mut c_void;
    /// mimalloc's `mi_realloc`: `p` (from mimalloc) resized to `size` bytes.
    fn mi_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    /// mimalloc's `mi_collect`: frees the calling thread's empty pages and, with `force`,
    /// gives every arena's free memory back to the system now, not after its delay.
    fn mi_collect(force: bool);
}

/// The alignment every block mimalloc's plain `mi_malloc` gives has (its smallest blocks
/// are 8 bytes, each block class a multiple of that). A layout that asks no more goes to
/// `mi_malloc` rather than `mi_malloc_aligned`, whose extra checks cost about two fifths
/// of every allocation's instructions here (98 against 60).
const PLAIN_ALIGN: usize = 8;

#[cfg(test)]
unsafe extern "C" {
    /// mimalloc's `mi_option_get`.
    fn mi_option_get(option: c_int) -> c_long;
    /// Whether mimalloc gave the block at `p`.
    fn mi_is_in_heap_region(p: *const std::ffi::c_void) -> bool;
    /// mimalloc's version, as `major * 10000 + minor * 100 + patch`.
    fn mi_version() -> c_int;
}

/// Gives the memory mimalloc holds free back to the system now (its pages on this thread,
/// and every arena's), rather than when it next allocates after its purge delay: what a
/// server runs once its client falls quiet (`toolhost::quiet`). Nothing in a process that
/// uses the system allocator.
pub fn release_free_memory() {
    if !system() {
        // SAFETY: `mi_collect` takes no pointer; it may run on any thread at any time.
        unsafe { mi_collect(true) }
    }
}

/// The allocator this process uses (mimalloc if nothing decided before).
#[inline]
fn system() -> bool {
    match CHOSEN.load(Ordering::Relaxed) {
        SYSTEM => true,
        MIMALLOC => false,
        _ => {
            decide(MIMALLOC);
            CHOSEN.load(Ordering::Relaxed) == SYSTEM
        }
    }
}

/// Decides, unless already decided.
fn decide(choice: u8) {
    if CHOSEN
        .compare_exchange(UNDECIDED, choice, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
        && choice == MIMALLOC
    {
        // SAFETY: `mi_option_set` takes any option index and value; set before
        // mimalloc's first allocation, it applies to its first arena.
        unsafe { mi_option_set(ARENA_EAGER_COMMIT, 0) }
    }
}

/// Runs before `main`, with `main`'s arguments (glibc's convention for `.init_array`).
extern "C" fn choose(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) {
    let worker = argc > 1 && !argv.is_null() && {
        // SAFETY: glibc passes `main`'s `argc` and `argv` (checked non-null): `argv` holds
        // `argc` pointers to NUL-terminated strings, and argc > 1, so `argv[1]` is one.
        let first = unsafe { CStr::from_ptr(*argv.add(1)) };
        first.to_bytes() == toolhost::PLUGIN_WORKER.as_bytes()
    };
    decide(if worker { SYSTEM } else { MIMALLOC });
}

#[used]
#[unsafe(link_section = ".init_array")]
static CHOOSE: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = choose;

// SAFETY: every block is allocated, resized and freed by the same allocator: the choice is
// made before the first allocation and never changes (`decide` sets it once).
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on; every block of `mi_malloc`
        // is 8-aligned, all that a layout it is given asks.
        unsafe {
            if system() {
                System.alloc(layout)
            } else if layout.align() <= PLAIN_ALIGN {
                mi_malloc(layout.size()).cast()
            } else {
                MiMalloc.alloc(layout)
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe {
            if system() {
                System.alloc_zeroed(layout)
            } else if layout.align() <= PLAIN_ALIGN {
                mi_zalloc(layout.size()).cast()
            } else {
                MiMalloc.alloc_zeroed(layout)
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`; `ptr` came from the same allocator,
        // since the choice never changes.
        unsafe {
            if system() {
                System.dealloc(ptr, layout)
            } else {
                MiMalloc.dealloc(ptr, layout)
            }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`; `ptr` came from the same allocator.
        unsafe {
            if system() {
                System.realloc(ptr, layout, new_size)
            } else if layout.align() <= PLAIN_ALIGN {
                mi_realloc(ptr.cast(), new_size).cast()
            } else {
                MiMalloc.realloc(ptr, layout, new_size)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_is_not_a_worker_uses_mimalloc_with_arenas_committed_as_used() {
        assert_eq!(CHOSEN.load(Ordering::Relaxed), MIMALLOC);
        let block = Box::new([7u8; 100]);
        // SAFETY: mimalloc's getters take any option index, and any pointer to look up.
        let (version, eager, ours) = unsafe {
            (
                mi_version(),
                mi_option_get(ARENA_EAGER_COMMIT),
                mi_is_in_heap_region(block.as_ptr().cast()),
            )
        };
        assert!(ours, "a block the binary allocated is not mimalloc's");
        assert!(
            (30000..40000).contains(&version),
            "mimalloc {version}: ARENA_EAGER_COMMIT is v3's option index; check it in mimalloc.h"
        );
        assert_eq!(eager, 0);
    }

    /// This process's resident memory, in bytes (`/proc/self/statm`'s second field).
    fn resident() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
        let pages: usize = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .expect("resident pages");
        pages * 4096
    }

    #[test]
    fn memory_freed_is_kept_until_released_then_given_back_to_the_system() {
        const BLOCKS: usize = 512;
        const SIZE: usize = 64 << 10;
        // 32 MiB in blocks of 64 KiB, each written (so resident), then all freed.
        let blocks: Vec<Vec<u8>> = (0..BLOCKS).map(|i| vec![i as u8 | 1; SIZE]).collect();
        let held = resident();
        drop(std::hint::black_box(blocks));
        let freed = resident();
        release_free_memory();
        let released = resident();
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        assert!(
            held.saturating_sub(released) >= BLOCKS * SIZE * 3 / 4,
            "resident {:.1} MiB while held, {:.1} MiB when released",
            mib(held),
            mib(released)
        );
        assert!(
            freed.saturating_sub(released) >= BLOCKS * SIZE / 2,
            "resident {:.1} MiB once freed, {:.1} MiB when released: freeing gave it back \
             already, so the release is not what an idle server needs",
            mib(freed),
            mib(released)
        );
    }

    #[test]
    fn every_block_has_its_layouts_alignment_and_keeps_its_bytes_when_resized() {
        // Plain blocks (alignment up to 8) come from `mi_malloc`, the rest from
        // `mi_malloc_aligned`: both ways, every size class a call uses.
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in (1..=600).chain([4095, 4096, 70_000, 3 << 20]) {
                let layout = Layout::from_size_align(size, align).expect("a layout");
                // SAFETY: `layout` has a non-zero size; each block is written within its
                // size, resized and freed with the layout it was given.
                unsafe {
                    for zeroed in [false, true] {
                        let p = if zeroed {
                            Allocator.alloc_zeroed(layout)
                        } else {
                            Allocator.alloc(layout)
                        };
                        assert!(!p.is_null(), "{size} bytes aligned to {align}");
                        assert_eq!(p as usize % align, 0, "{size} bytes aligned to {align}");
                        if zeroed {
                            let bytes = std::slice::from_raw_parts(p, size);
                            assert!(bytes.iter().all(|&b| b == 0), "{size} zeroed bytes");
                        }
                        p.write_bytes(0xA5, size);
                        let bigger = size * 2 + 8;
                        let q = Allocator.realloc(p, layout, bigger);
                        assert_eq!(
                            q as usize % align,
                            0,
                            "{size} → {bigger} aligned to {align}"
                        );
                        let kept = std::slice::from_raw_parts(q, size);
                        assert!(kept.iter().all(|&b| b == 0xA5), "{size} bytes kept");
                        let grown = Layout::from_size_align(bigger, align).expect("a layout");
                        Allocator.dealloc(q, grown);
                    }
                }
            }
        }
    }
}
