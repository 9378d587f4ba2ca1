//! The JSON the CLI prints, validated against the schemas in docs/schemas/: `zmesh status
//! --json`, `zmesh node --events ndjson` and `zmesh peers --json` of real `zmesh node`
//! processes found through the embedded store.

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "common/discovery.rs"]
mod disc;

use std::path::Path;
use std::process::Command;

use disc::{mesh_ready, server, Mesh};
use serde_json::Value;
use zmesh::runtime::calls::CallOptions;
use zmesh::runtime::{Node, Target};

/// The schema files, by the `$id` they declare (their `$ref`s name each other relatively).
const SCHEMAS: [&str; 5] = [
    "defs.schema.json",
    "status.schema.json",
    "event.schema.json",
    "peers.schema.json",
    "call.schema.json",
];

fn schema_text(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/schemas")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// A validator per output, each with every schema file registered (offline: a `$ref` to
/// anything else fails to build).
struct Schemas {
    status: jsonschema::Validator,
    event: jsonschema::Validator,
    peers: jsonschema::Validator,
    call: jsonschema::Validator,
}

impl Schemas {
    fn load() -> Schemas {
        let mut registry = jsonschema::Registry::new();
        for name in SCHEMAS {
            let schema = schema_text(name);
            jsonschema::meta::validate(&schema)
                .unwrap_or_else(|e| panic!("{name} is not a valid JSON Schema: {e}"));
            let id = schema["$id"].as_str().expect("$id").to_owned();
            registry = registry.add(id, schema).expect("register schema");
        }
        let registry = registry.prepare().expect("registry");
        let build = |name: &str| {
            jsonschema::options()
                .offline()
                .with_registry(&registry)
                .build(&schema_text(name))
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        Schemas {
            status: build("status.schema.json"),
            event: build("event.schema.json"),
            peers: build("peers.schema.json"),
            call: build("call.schema.json"),
        }
    }
}

/// Panics with every violation of `v` against `schema`.
fn check(schema: &jsonschema::Validator, what: &str, v: &Value) {
    let errors: Vec<String> = schema
        .iter_errors(v)
        .map(|e| format!("  at {}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not match its schema:\n{}\n{}",
        errors.join("\n"),
        serde_json::to_string_pretty(v).unwrap_or_default()
    );
}

/// O1: the snapshot, every ndjson event line and the store's listing of two real `zmesh node`
/// processes (a call served, a record delivered, discovery events), and what `zmesh call`
/// prints for a call and for a failure (with its operations row), match docs/schemas/, in
/// which every generation and connection id is 16 hex digits, never a JSON number.
#[tokio::test]
async fn o1_status_events_and_peers_json_match_their_schemas() {
    let schemas = Schemas::load();
    let mesh = Mesh::new("schemas");
    let mut a = mesh.start_with(&mesh.config("a", server("orders")), &["--serve", "orders"]);
    // Started once a has read the store: their descriptors reach a as changes (the
    // `descriptor_put` events, with a generation).
    a.wait_line(0, "a's first read of the store", |v| {
        v["kind"] == "reloaded"
    })
    .await;
    let b = mesh.start(&mesh.config("b", server("orders")));
    // A third node in this process: it calls a's demo service and sends a a record.
    let c = Node::start(mesh.config("c", server("other")))
        .await
        .expect("node c");
    tokio::time::timeout(disc::BOUND, c.ready(Target::peer("a")))
        .await
        .expect("c ready with a in time")
        .expect("c ready with a");
    let echoed: String = c
        .call_with("orders", "echo", &"hi", CallOptions::default().peer("a"))
        .await
        .expect("a answers");
    assert_eq!(echoed, "hi");
    c.send("a", "demo", "hello a").await.expect("send to a");
    a.wait_line(0, "the record from c", |v| v["event"] == "delivery")
        .await;
    a.wait_line(0, "c's descriptor", |v| {
        v["kind"] == "descriptor_put" && v["rid"] == "c"
    })
    .await;

    let status = a
        .wait_status("ready with b and c", |s| mesh_ready(s, &["b", "c"]))
        .await;
    check(&schemas.status, "a's zmesh status --json", &status);
    check(&schemas.status, "b's zmesh status --json", &b.status());
    let own = serde_json::to_value(c.snapshot().await.expect("snapshot")).expect("json");
    check(&schemas.status, "c's Node::snapshot as JSON", &own);
    assert!(
        status["links"]
            .as_array()
            .is_some_and(|l| l.iter().any(|l| l["connection_id"].is_string())),
        "no link with a connection id to check: {status}"
    );

    let lines = a.take_lines().to_vec();
    for kind in ["state", "discovery", "call", "delivery"] {
        assert!(
            lines.iter().any(|v| v["event"] == kind),
            "no {kind} line to check among:\n{}",
            disc::lines_text(&lines)
        );
    }
    for line in &lines {
        check(&schemas.event, "an ndjson event line", line);
    }

    let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
        .args(["peers", "--json", "--store", &mesh.url])
        .output()
        .expect("zmesh peers");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peers: Value = serde_json::from_slice(&out.stdout).expect("peers JSON");
    assert_eq!(peers.as_array().map(Vec::len), Some(3), "{peers}");
    check(&schemas.peers, "zmesh peers --json", &peers);

    let d = mesh.config("d", Vec::new());
    let d_path = mesh.dir.path().join("d-call.toml");
    std::fs::write(&d_path, toml::to_string(&d).expect("toml")).expect("write");
    for (method, ok) in [("echo", true), ("fail", false)] {
        let out = Command::new(env!("CARGO_BIN_EXE_zmesh"))
            .args([
                "call",
                "--channel",
                "orders",
                "--method",
                method,
                "--args",
                "\"hi\"",
            ])
            .args(["--peer", "a", "--wait-ms", "20000", "--config"])
            .arg(&d_path)
            .output()
            .expect("zmesh call");
        let call: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(call["ok"], ok, "{call}");
        assert!(call["operation"].is_object(), "{call}");
        check(&schemas.call, "zmesh call", &call);
    }

    c.shutdown().await.expect("shutdown");
}
