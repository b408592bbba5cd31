//! `cargo xtask …` runs this first: it builds the `xtask` tool, showing progress from its
//! first second, then replaces itself with it (same arguments, exit code and signals).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let tool = xtask_launcher::tool::for_command(&args);
    // The test run's installs and fixture build start now, beside the build, and are
    // waited for before the tool takes over (which checks each and names what failed): one
    // left running here would race the tool's own into the same folder.
    let ahead = tool.tests_ahead.then(|| {
        let installs = std::thread::spawn(xtask_launcher::peers::install_ahead);
        let fixtures = xtask_launcher::fixture_workspace_build()
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        (installs, fixtures)
    });
    let built = xtask_launcher::build(tool.what, tool.why, &tool.args);
    if let Some((installs, fixtures)) = ahead {
        if built.is_err() && !installs.is_finished() {
            eprintln!("cargo xtask: waiting for the installs started beside the build to end");
        }
        if let Ok(Err(e)) = installs.join() {
            eprintln!(
                "cargo xtask: an install ahead of the tests failed ({e}); the tests try it again"
            );
        }
        // Its errors are the tool's to show: its own build of the fixtures repeats them.
        let _ = fixtures.and_then(|mut cargo| cargo.wait());
    }
    let tool = match built.map(|b| b.executable("xtask")) {
        Ok(Some(path)) => path,
        Ok(None) => {
            eprintln!("cargo xtask: cargo built no `xtask` executable");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("cargo xtask: {e}");
            return ExitCode::from(2);
        }
    };
    use std::os::unix::process::CommandExt as _;
    let mut command = std::process::Command::new(&tool);
    // What the tool starts (cargo, maturin, cargo-fuzz) sees the user's environment, not
    // this launcher's package's.
    for name in xtask_launcher::set_by_cargo_run() {
        command.env_remove(name);
    }
    let e = command.args(args).exec();
    eprintln!("cargo xtask: could not run {}: {e}", tool.display());
    ExitCode::from(2)
}
