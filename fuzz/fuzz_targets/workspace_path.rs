//! Workspace path resolution: whatever path a model or a plugin names, the workspace file
//! API never reads, lists, writes or reports anything outside the workspace root, through
//! `..`, absolute paths, symlinks leading out, or anything else.
#![cfg_attr(fuzzing, no_main)]
#![cfg(not(test))] // see shared/target.rs

#[macro_use]
#[path = "shared/target.rs"]
mod target;

use std::path::PathBuf;
use std::sync::OnceLock;

use dispatcher_core::Workspace;

const SECRET: &str = "OUTSIDE-SECRET-31f9";

struct Setup {
    _dir: tempfile::TempDir,
    outside: PathBuf,
    workspace: Workspace,
}

/// A workspace with a file, a directory, a link inside and links leading out (to a
/// directory with a secret, and to the secret itself), beside that outside directory.
fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let outside = dir.path().join("outside");
        let root = dir.path().join("ws");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::create_dir_all(root.join("sub/deeper")).expect("workspace");
        std::fs::write(outside.join("secret"), SECRET).expect("secret");
        std::fs::write(root.join("file.txt"), "inside\n").expect("file");
        std::fs::write(root.join("sub/deeper/a.txt"), "a\n").expect("file");
        std::os::unix::fs::symlink(&outside, root.join("out")).expect("link");
        std::os::unix::fs::symlink(outside.join("secret"), root.join("sub/leak")).expect("link");
        std::os::unix::fs::symlink("../outside", root.join("rel_out")).expect("link");
        std::os::unix::fs::symlink("sub/deeper", root.join("in")).expect("link");
        let workspace = Workspace::open(&root).expect("the workspace");
        Setup {
            _dir: dir,
            outside,
            workspace,
        }
    })
}

fn outside_untouched(s: &Setup) {
    let names: Vec<_> = std::fs::read_dir(&s.outside)
        .expect("outside")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names.len(), 1, "something was written outside: {names:?}");
    assert_eq!(
        std::fs::read_to_string(s.outside.join("secret")).expect("secret"),
        SECRET
    );
}

fuzz_target!(|path: &str| {
    let s = setup();
    let ws = &s.workspace;
    if let Ok(rel) = ws.resolve(path) {
        assert!(rel.is_relative(), "{path:?} resolved to {rel:?}");
        assert!(
            rel.components().all(|c| matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )),
            "{path:?} resolved to {rel:?}"
        );
    }
    if ws.check(path).is_ok() {
        // What exists of it is inside.
        let mut probe = ws.root().join(ws.resolve(path).expect("checked"));
        while !probe.exists() && probe.pop() {}
        if let Ok(real) = std::fs::canonicalize(&probe) {
            assert!(real.starts_with(ws.root()), "{path:?} reaches {real:?}");
        }
    }
    if let Ok(text) = ws.read(path) {
        assert!(!text.contains(SECRET), "{path:?} read the secret");
    }
    if let Ok(names) = ws.list(path) {
        assert!(
            !names.iter().any(|n| n == "secret"),
            "{path:?} listed outside"
        );
    }
    if ws.write(path, "fuzz").is_ok() {
        let _ = ws.delete(path);
    }
    outside_untouched(s);
});
