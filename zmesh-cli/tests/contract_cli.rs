//! `zmesh contract check OLD.json NEW.json` over the built binary (MISSION K1): exit status 0
//! when nothing breaks, 1 when something does (and the breaking line names the method), 2 on
//! an unreadable or invalid input (and the message names the file).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use zmesh::proto::contract::{
    default_execution, MethodContract, NodeContract, Semantics, ServiceContract, Shape,
};

/// A fresh directory for one test's files, removed when the guard drops (even on a panic).
fn temp_dir(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("zmesh-contract-cli-{test}-"))
        .tempdir()
        .expect("temp dir")
}

/// A pump node whose `pressure` method has the given semantics.
fn pump(pressure: Option<Semantics>) -> NodeContract {
    let method = |name: &str, semantics| MethodContract {
        name: name.to_owned(),
        semantics,
        shape: Shape::Unary,
        execution: default_execution(semantics),
        conflate: false,
        guarded: None,
    };
    let mut contract = NodeContract::new("pump-1");
    contract.services.push(ServiceContract {
        methods: vec![
            method("dispense", Some(Semantics::NonRepeatableCommand)),
            method("pressure", pressure),
        ],
        ..ServiceContract::new("pump")
    });
    contract.normalize();
    contract
}

fn write(dir: &Path, name: &str, contract: &NodeContract) -> PathBuf {
    let path = dir.join(name);
    let json = contract.to_json_pretty().expect("serialises");
    std::fs::write(&path, json).expect("write contract");
    path
}

fn zmesh_check(old: &Path, new: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["contract", "check"])
        .arg(old)
        .arg(new)
        .args(extra)
        .output()
        .expect("run zmesh")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// MISSION K1: a compatible change (a method made less dangerous, a version bump) exits 0;
/// the same contract on both sides exits 0 and says there are no changes.
#[test]
fn k1_cli_compatible_change_exits_0() {
    let tmp = temp_dir("ok");
    let dir = tmp.path();
    let old = write(dir, "old.json", &pump(None));
    let mut newer = pump(Some(Semantics::Query));
    newer.services[0].version = "2".to_owned();
    let new = write(dir, "new.json", &newer);

    let out = zmesh_check(&old, &new, &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = stdout(&out);
    assert!(text.contains("less-dangerous"), "{text}");
    assert!(text.contains("none breaking"), "{text}");

    let same = zmesh_check(&old, &old, &[]);
    assert_eq!(same.status.code(), Some(0), "{same:?}");
    assert!(stdout(&same).contains("no changes"));
}

/// MISSION K1: a method that became more dangerous to repeat exits 1, and the breaking line
/// of the table names the channel and the method; `--json` prints the same report as JSON.
#[test]
fn k1_cli_more_dangerous_method_exits_1_and_names_it() {
    let tmp = temp_dir("breaking");
    let dir = tmp.path();
    let old = write(dir, "old.json", &pump(Some(Semantics::Query)));
    let new = write(
        dir,
        "new.json",
        &pump(Some(Semantics::NonRepeatableCommand)),
    );

    let out = zmesh_check(&old, &new, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.contains("more-dangerous"))
        .unwrap_or_else(|| panic!("no more-dangerous line in\n{text}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&cells[..4], ["pump", "pressure", "more-dangerous", "yes"]);
    assert!(line.contains("query -> non-repeatable-command"), "{line}");

    let out = zmesh_check(&old, &new, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let breaking: Vec<&serde_json::Value> = report["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter(|c| c["breaking"] == true)
        .collect();
    assert_eq!(breaking.len(), 1, "{report}");
    assert_eq!(breaking[0]["method"], "pressure");
    assert_eq!(breaking[0]["change"], "more-dangerous");
}

/// MISSION K1: an unreadable file, a file that is not JSON, an invalid contract and a contract
/// of another format each exit 2 with a message naming the file.
#[test]
fn k1_cli_unreadable_or_invalid_input_exits_2_naming_the_file() {
    let tmp = temp_dir("invalid");
    let dir = tmp.path();
    let good = write(dir, "good.json", &pump(None));
    let missing = dir.join("missing.json");
    let not_json = dir.join("not-json.json");
    std::fs::write(&not_json, "this is not json").expect("write");
    let mut conflating_query = pump(Some(Semantics::Query));
    conflating_query.services[0].methods[1].conflate = true;
    let invalid = write(dir, "invalid.json", &conflating_query);
    let future = dir.join("future.json");
    std::fs::write(&future, r#"{"format": 2, "rid": "x", "services": []}"#).expect("write");

    for (old, new, bad, says) in [
        (&missing, &good, &missing, "cannot read"),
        (&good, &not_json, &not_json, "not a zmesh contract"),
        (&good, &invalid, &invalid, "conflate"),
        (&future, &good, &future, "format 2"),
    ] {
        let out = zmesh_check(old, new, &[]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&bad.display().to_string()), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(out.stdout.is_empty());
    }
}
