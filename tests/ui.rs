//! Compile-fail and compile-pass tests of the typed API (trybuild). Host-only: no RDMA device
//! is needed, since compile-fail tests never run and the pass tests never touch a device at run
//! time.
//!
//! Regenerate the expected diagnostics with `TRYBUILD=overwrite cargo test --test ui`, then
//! read every changed `.stderr` before accepting it.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui-tests/fail/*/*.rs");
    t.pass("ui-tests/pass/*.rs");
}
