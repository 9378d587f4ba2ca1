//! MISSION L7: the static check that no code under src/ judges elapsed time by the wall clock
//! (`.ci/check-clock`) passes on this tree and fails on a tree that does.

use std::path::Path;
use std::process::Command;

fn run_check(root: &Path) -> std::process::Output {
    Command::new("bash")
        .arg(root.join(".ci/check-clock"))
        .output()
        .expect("run .ci/check-clock")
}

/// MISSION L7: the check passes on the real tree (the wall clock is read only in
/// src/display_time.rs, to render timestamps).
#[test]
fn l7_check_passes_on_this_tree() {
    let out = run_check(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// MISSION L7: the same check fails on a tree where src/ subtracts wall-clock readings.
#[test]
fn l7_check_fails_on_wall_clock_elapsed_time() {
    let tmp = tempfile::Builder::new()
        .prefix("zmesh-l7-")
        .tempdir()
        .expect("dir");
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join(".ci")).expect("dir");
    std::fs::create_dir_all(dir.join("src")).expect("dir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/check-clock");
    std::fs::copy(&script, dir.join(".ci/check-clock")).expect("copy script");
    std::fs::write(
        dir.join("src/deadline.rs"),
        "fn expired(start: std::time::SystemTime) -> bool {\n    \
         std::time::SystemTime::now().duration_since(start).map(|d| d.as_secs() > 15).unwrap_or(false)\n}\n",
    )
    .expect("write");
    let out = run_check(dir);
    assert!(
        !out.status.success(),
        "the check let wall-clock elapsed time through"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("src/deadline.rs"));
}
