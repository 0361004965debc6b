//! Attribute mistakes are compile errors on the key or value at fault,
//! saying what to write instead. Each case is in `ui/`, with the compiler's
//! output checked in beside it (`TRYBUILD=overwrite cargo test -p
//! troubadour-macros` rewrites them after a deliberate change).
//!
//! The derives in use, with the real traits, are tested in
//! troubadour-remote's `tests/derive.rs`; here `pass/` checks only which
//! paths the expansions name, against stand-in traits, so these projects
//! build nothing but this crate.

#[test]
fn attribute_mistakes_are_errors_that_say_what_to_write() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}

#[test]
fn remote_expansions_name_only_troubadour_remote_and_crate_overrides_the_path() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/pass/*.rs");
}
