//! Compile-time checks of `#[zmesh::service]` (MISSION A1, K4): every rejected trait is a
//! compile error with a span and a message (tests/ui/*.rs and their .stderr). The traits it
//! accepts are tested where they run, in zmesh's tests/typed.rs and tests/typed_docs.rs.

#[test]
fn a1_rejected_service_traits_are_compile_errors() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
