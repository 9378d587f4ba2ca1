//! MISSION S1: the sans-IO core (`src/proto`, the node's parts under `src/proto/node`
//! included) keeps its determinism contract (`src/proto/mod.rs`): outside its tests it reads
//! no clock, touches no socket, file or environment, spawns no thread or task, sleeps never,
//! and imports neither the runtime (the shell) nor the configuration above it. The simulator
//! and the scenario tests drive the core with a clock of their own; one call of
//! `Instant::now()` in it would make a seed stop replaying.
//!
//! The check reads the source as text: each file of `src/proto` without its comments and
//! without the items marked `#[cfg(test)]`, against a list of what the contract forbids.

use std::path::{Path, PathBuf};

/// What the core's own code must never name, and why.
const FORBIDDEN: &[(&str, &str)] = &[
    ("crate::runtime", "the shell"),
    (
        "crate::config",
        "the configuration, which is above the core",
    ),
    ("zmq::", "libzmq"),
    ("tokio::", "tasks and async I/O"),
    ("mio::", "readiness I/O"),
    ("TcpStream", "sockets"),
    ("TcpListener", "sockets"),
    ("UdpSocket", "sockets"),
    ("ToSocketAddrs", "name resolution"),
    ("std::fs::", "files"),
    ("std::env::", "the environment"),
    ("std::thread::", "threads"),
    ("Instant::now", "the clock"),
    ("SystemTime", "the wall clock"),
    ("sleep(", "sleeping"),
];

/// Every `.rs` file under `dir`, but test modules (`tests.rs`, a `tests/` folder).
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src/proto")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if p.is_dir() {
            if name != "tests" {
                sources(&p, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(p);
        }
    }
}

/// `src` without `//` comments and without the items that follow `#[cfg(test)]` (up to the
/// brace that closes the item's first brace, or its `;`).
fn code_of(src: &str) -> String {
    let uncommented: String = src
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = uncommented.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let end = match (item.find('{'), item.find(';')) {
            (Some(open), Some(semi)) if semi < open => semi + 1,
            (Some(open), _) => {
                let mut depth = 0usize;
                let mut end = item.len();
                for (i, c) in item[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(semi)) => semi + 1,
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// What `code` names that the contract forbids: (line, what, why).
fn violations(code: &str) -> Vec<(usize, &'static str, &'static str)> {
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for (what, why) in FORBIDDEN {
            if line.contains(what) {
                found.push((n + 1, *what, *why));
            }
        }
    }
    found
}

/// MISSION S1: no file of the core names anything the determinism contract forbids.
#[test]
fn s1_the_core_reads_no_clock_touches_no_io_and_imports_no_shell() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/proto");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("node/link.rs")),
        "the node's parts are read too"
    );
    let mut report = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).expect("read a source file");
        for (line, what, why) in violations(&code_of(&src)) {
            report.push(format!(
                "{} (code line {line}): `{what}` ({why})",
                f.display()
            ));
        }
    }
    assert!(
        report.is_empty(),
        "the sans-IO core breaks its determinism contract:\n{}",
        report.join("\n")
    );
}

/// MISSION S1: the check is able to fail: it finds a clock read and an import of the shell
/// in the core's code, and ignores them in comments and in test items.
#[test]
fn s1_the_core_check_finds_a_clock_read_and_a_shell_import() {
    let src = "use crate::runtime::records;\n\
               // Instant::now() in a comment is fine\n\
               pub fn deadline() -> std::time::Instant {\n    \
                   std::time::Instant::now()\n\
               }\n\
               #[cfg(test)]\n\
               mod tests {\n    \
                   fn t() { let _ = std::time::Instant::now(); if true { } }\n\
               }\n\
               #[cfg(test)]\n\
               use std::fs::File;\n\
               pub fn after() {}\n";
    let found: Vec<&str> = violations(&code_of(src))
        .into_iter()
        .map(|(_, what, _)| what)
        .collect();
    assert_eq!(found, vec!["crate::runtime", "Instant::now"]);
    assert!(
        code_of(src).contains("pub fn after"),
        "code after a test item is read"
    );
}
