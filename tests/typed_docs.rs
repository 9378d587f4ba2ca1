//! A public service trait in a crate that denies missing docs (MISSION A1): this test
//! binary does not compile if the macro generates an undocumented public item. Its contract
//! says what the trait declares.
#![deny(missing_docs)]

use zmesh::proto::contract::Shape;
use zmesh::proto::contract::{ExecutionKind, Semantics};
use zmesh::runtime::calls::ServeError;
use zmesh::typed::{Context, Items};

/// A pump.
#[zmesh::service(channel = "pump", version = "2.1", execution = keyed(line), mailbox = 7)]
pub trait Pump {
    /// The pressure of `line`.
    #[query]
    async fn pressure(&self, line: u8) -> f64;
    /// Sets the setpoint of `line`.
    #[idempotent(conflate)]
    async fn set_setpoint(&self, line: u8, bar: f64) -> Result<f64, ServeError>;
    /// Dispenses on `line`.
    #[non_repeatable]
    async fn dispense(&self, ctx: Context, line: u8, litres: u32);
    /// Whatever it does, undeclared.
    async fn legacy(&self, line: u8);
    /// The pressures of `line`, as they are read.
    #[query]
    async fn watch(&self, line: u8, readings: Items<f64>) -> u32;
}

/// Every key of the attribute and every kind of method reaches the contract.
#[test]
fn a1_generated_items_are_documented() {
    let c = PumpClient::contract();
    assert_eq!(PumpClient::CHANNEL, "pump");
    assert_eq!(c.version, "2.1");
    assert_eq!(c.mailbox, 7);
    assert_eq!(c.execution, Some(ExecutionKind::Keyed));
    let m = |name: &str| c.method(name).cloned().expect(name);
    assert_eq!(m("pressure").semantics, Some(Semantics::Query));
    assert!(m("set_setpoint").conflate);
    assert_eq!(
        m("dispense").semantics,
        Some(Semantics::NonRepeatableCommand)
    );
    assert_eq!(m("legacy").semantics, None);
    assert_eq!(m("watch").shape, Shape::Stream);
    assert_eq!(m("pressure").shape, Shape::Unary);
}

/// README's "Typed services" shows examples/pump.rs whole (after its module docs), so the
/// program CI runs and the one a reader copies are the same.
#[test]
fn a1_readme_shows_the_pump_example_as_it_is() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let example = std::fs::read_to_string(format!("{root}/examples/pump.rs")).expect("example");
    let body: String = example
        .lines()
        .skip_while(|l| l.starts_with("//!"))
        .skip(1)
        .map(|l| format!("{l}\n"))
        .collect();
    let section = readme
        .split("## Typed services")
        .nth(1)
        .expect("README has a Typed services section");
    let block = section
        .split("```rust,no_run\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a rust block in it");
    assert_eq!(block, body);
}

/// README states how long the pump example is and how many string literals it holds, and
/// that none of them is a method name: the figures are those of examples/pump.rs.
#[test]
fn a1_readme_states_the_pump_example_s_lines_and_strings_truly() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let example = std::fs::read_to_string(format!("{root}/examples/pump.rs")).expect("example");
    let code: Vec<&str> = example
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("//!"))
        .collect();
    let literals = string_literals(&code.join("\n"));
    let methods: Vec<&str> = code
        .iter()
        .filter_map(|l| l.trim().strip_prefix("async fn "))
        .filter_map(|l| l.split('(').next())
        .collect();
    assert!(methods.contains(&"set_setpoint"), "{methods:?}");
    for literal in &literals {
        assert!(
            !methods.contains(&literal.as_str()),
            "{literal:?} names a method"
        );
    }
    let stated = format!(
        "{} lines as rustfmt lays them out, blank lines not counted",
        code.len()
    );
    assert!(readme.contains(&stated), "README should say {stated:?}");
    let stated = format!("{} string literals, none of them a method", literals.len());
    let flat = readme.replace('\n', " ");
    assert!(flat.contains(&stated), "README should say {stated:?}");
}

/// The string literals of `code` (plain `"..."` with escapes; the example has no raw
/// strings, and no character literal holds a quote).
fn string_literals(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.chars();
    while let Some(c) = chars.next() {
        if c == '/' && chars.as_str().starts_with('/') {
            // A comment runs to the end of the line.
            for c in chars.by_ref() {
                if c == '\n' {
                    break;
                }
            }
        } else if c == '"' {
            let mut literal = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => literal.extend(chars.next()),
                    '"' => break,
                    c => literal.push(c),
                }
            }
            out.push(literal);
        }
    }
    out
}
