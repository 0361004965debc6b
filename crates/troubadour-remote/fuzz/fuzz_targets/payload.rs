//! Payload decoding straight from bytes: a handshake, a struct with
//! strings and sequences, and a recursive enum. Nothing may panic or
//! overflow the stack.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use troubadour_remote::codec::{decode_payload, DEFAULT_MAX_DEPTH};
use troubadour_remote::handshake::Handshake;

#[derive(Deserialize)]
#[allow(dead_code)]
enum Nest {
    Leaf,
    Deeper(Box<Nest>),
    Many(Vec<Nest>),
    Maybe(Option<Box<Nest>>),
}

fuzz_target!(|data: &[u8]| {
    let _ = decode_payload::<Handshake>(data, DEFAULT_MAX_DEPTH);
    if let Ok(nest) = decode_payload::<Nest>(data, DEFAULT_MAX_DEPTH) {
        // Within the depth limit, so dropping it recursively is fine.
        drop(nest);
    }
});
