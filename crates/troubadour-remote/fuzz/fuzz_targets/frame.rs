//! The frame decoder, fed the input in pieces whose sizes come from the
//! input's first byte, with every complete frame handed to the message
//! registry and the handshake decoder. Nothing may panic, and the pieces
//! must not change the outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use troubadour_remote::codec::Registry;
use troubadour_remote::frame::{FrameDecoder, Limits};
use troubadour_remote::handshake::Handshake;

#[derive(Deserialize)]
#[allow(dead_code)]
struct Ping(u64);

#[derive(Deserialize)]
#[allow(dead_code)]
enum Nest {
    Leaf,
    Deeper(Box<Nest>),
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Post {
    room: u32,
    author: String,
    tags: Vec<String>,
    reply_to: Option<u64>,
}

fn run(input: &[u8], piece: usize) -> String {
    let mut registry = Registry::new();
    registry.register::<Ping>("corpus::Ping").unwrap();
    registry.register::<Nest>("corpus::Nest").unwrap();
    registry.register::<Post>("corpus::Post").unwrap();
    let mut decoder = FrameDecoder::new(Limits::default());
    let mut outcome = String::new();
    for chunk in input.chunks(piece.max(1)) {
        decoder.feed(chunk);
        loop {
            match decoder.decode() {
                Ok(Some(frame)) => match Handshake::decode(&frame) {
                    Some(h) => outcome.push_str(&format!("{:?};", h.is_ok())),
                    None => match registry.decode(&frame) {
                        // Dropped here: a decoded value is within the
                        // depth limit, so its recursive drop is too.
                        Ok(_) => outcome.push_str("ok;"),
                        Err(e) => outcome.push_str(&format!("{e:?};")),
                    },
                },
                Ok(None) => break,
                Err(e) => return outcome + &format!("{e:?}"),
            }
        }
    }
    outcome + &format!("{:?}", decoder.finish())
}

fuzz_target!(|data: &[u8]| {
    let whole = run(data, usize::MAX);
    if let Some((&first, _)) = data.split_first() {
        let split = run(data, first as usize % 40 + 1);
        assert_eq!(whole, split);
    }
});
