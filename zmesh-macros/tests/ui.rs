//! Compile-time checks of `#[zmesh::service]` (MISSION A1, K4): every rejected trait is a
//! compile error with a span and a message (tests/ui/*.rs and their .stderr), and a public
//! service in a crate that denies missing docs compiles (tests/pass).

#[test]
fn a1_rejected_service_traits_are_compile_errors() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}

#[test]
fn a1_generated_items_are_documented() {
    let t = trybuild::TestCases::new();
    t.pass("tests/pass/*.rs");
}
