//! Every input in `fuzz-corpus/` through the frame decoder, the message
//! registry and the handshake decoder, whole and one byte at a time: none
//! may panic, and the named hostile cases end the way decision 0017 says.
//! The same directory seeds the cargo-fuzz targets (`fuzz/`), which add
//! what they find to it.

use std::path::Path;

use serde::{Deserialize, Serialize};
use troubadour_remote::codec::{DecodeError, MessageError, Registry};
use troubadour_remote::frame::{FrameDecoder, FrameError, Limits};
use troubadour_remote::handshake::Handshake;

#[derive(Serialize, Deserialize)]
struct Ping(u64);

#[derive(Serialize, Deserialize)]
enum Nest {
    Leaf,
    Deeper(Box<Nest>),
}

#[derive(Serialize, Deserialize)]
struct Post {
    room: u32,
    author: String,
    tags: Vec<String>,
    reply_to: Option<u64>,
}

/// What one input did: the per-message outcomes, then how the stream ended.
#[derive(Debug)]
struct Run {
    handshakes: Vec<Result<(), DecodeError>>,
    messages: Vec<Result<(), MessageError>>,
    end: Result<(), FrameError>,
}

fn run(input: &[u8], piece: usize) -> Run {
    let mut registry = Registry::new();
    registry.register::<Ping>("corpus::Ping").unwrap();
    registry.register::<Nest>("corpus::Nest").unwrap();
    registry.register::<Post>("corpus::Post").unwrap();
    let mut decoder = FrameDecoder::new(Limits::default());
    let mut messages = Vec::new();
    let mut handshakes = Vec::new();
    for chunk in input.chunks(piece.max(1)) {
        decoder.feed(chunk);
        loop {
            match decoder.decode() {
                Ok(Some(frame)) => match Handshake::decode(&frame) {
                    Some(handshake) => handshakes.push(handshake.map(drop)),
                    // Dropped at once: a decoded value is within the depth limit,
                    // so its recursive drop is too.
                    None => messages.push(registry.decode(&frame).map(drop)),
                },
                Ok(None) => break,
                Err(e) => {
                    return Run {
                        handshakes,
                        messages,
                        end: Err(e),
                    }
                }
            }
        }
    }
    Run {
        handshakes,
        messages,
        end: decoder.finish(),
    }
}

#[test]
fn no_corpus_input_panics_in_any_piece_size() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-corpus/frame");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let input = std::fs::read(&path).unwrap();
        for piece in [1, 7, 32, 33, input.len()] {
            let whole = run(&input, usize::MAX);
            let split = run(&input, piece);
            // Splitting never changes the outcome.
            assert_eq!(
                format!("{whole:?}"),
                format!("{split:?}"),
                "{} split in pieces of {piece}",
                path.display()
            );
        }
        count += 1;
    }
    assert!(
        count >= 20,
        "the corpus went missing: {count} inputs in {}",
        dir.display()
    );
}

fn corpus(name: &str) -> Run {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz-corpus/frame")
        .join(name);
    run(&std::fs::read(path).unwrap(), usize::MAX)
}

#[test]
fn the_named_hostile_inputs_end_as_decision_0017_says() {
    let r = corpus("handshake");
    assert_eq!((r.handshakes, r.end), (vec![Ok(())], Ok(())));
    let r = corpus("handshake-bad-utf8");
    assert!(matches!(
        r.handshakes[..],
        [Err(DecodeError::Invalid { .. })]
    ));
    assert_eq!(r.end, Ok(()));

    let r = corpus("two-pings");
    assert!(r.messages.iter().all(Result::is_ok) && r.messages.len() == 2);
    assert_eq!(r.end, Ok(()));

    assert!(matches!(
        corpus("one-gib-header").end,
        Err(FrameError::TooLong { .. })
    ));
    assert!(matches!(
        corpus("max-len-large").end,
        Err(FrameError::TooLong { .. })
    ));
    assert!(matches!(
        corpus("truncated-payload").end,
        Err(FrameError::Truncated { .. })
    ));
    assert!(matches!(
        corpus("truncated-header").end,
        Err(FrameError::Truncated { .. })
    ));
    assert!(matches!(
        corpus("http").end,
        Err(FrameError::BadMagic { .. })
    ));
    assert!(matches!(
        corpus("bad-version").end,
        Err(FrameError::UnsupportedVersion { found: 9 })
    ));

    let r = corpus("garbage-after-frame");
    assert_eq!(r.messages.len(), 1);
    assert!(matches!(r.end, Err(FrameError::BadMagic { found: b'G' })));

    // Per-message errors: the stream itself ends cleanly.
    for (name, check) in [
        (
            "unknown-type",
            (|e: &MessageError| matches!(e, MessageError::UnknownType { .. }))
                as fn(&MessageError) -> bool,
        ),
        ("nested-tags", |e| {
            matches!(
                e,
                MessageError::Decode {
                    error: DecodeError::TooDeep { .. },
                    ..
                }
            )
        }),
        ("post-trailing", |e| {
            matches!(
                e,
                MessageError::Decode {
                    error: DecodeError::TrailingBytes { .. },
                    ..
                }
            )
        }),
        ("post-huge-seq-len", |e| {
            matches!(
                e,
                MessageError::Decode {
                    error: DecodeError::Invalid { .. },
                    ..
                }
            )
        }),
    ] {
        let r = corpus(name);
        assert_eq!(r.end, Ok(()), "{name}");
        assert_eq!(r.messages.len(), 1, "{name}");
        assert!(
            check(r.messages[0].as_ref().unwrap_err()),
            "{name}: {:?}",
            r.messages[0]
        );
    }
}

/// The payload fuzz target's types: a recursive enum with every way of
/// nesting (variant, sequence, option).
#[derive(Serialize, Deserialize, Debug)]
enum Tree {
    Leaf,
    Deeper(Box<Tree>),
    Many(Vec<Tree>),
    Maybe(Option<Box<Tree>>),
}

#[test]
fn no_payload_corpus_input_panics_or_overflows_the_stack() {
    use troubadour_remote::codec::{decode_payload, DEFAULT_MAX_DEPTH};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-corpus/payload");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let input = std::fs::read(&path).unwrap();
        let _ = decode_payload::<Handshake>(&input, DEFAULT_MAX_DEPTH);
        let tree = decode_payload::<Tree>(&input, DEFAULT_MAX_DEPTH);
        if path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("deep-")
        {
            assert!(
                matches!(tree, Err(DecodeError::TooDeep { .. })),
                "{}: {tree:?}",
                path.display()
            );
        }
        count += 1;
    }
    assert!(
        count >= 7,
        "the payload corpus went missing: {count} inputs"
    );
    let handshake = std::fs::read(dir.join("handshake")).unwrap();
    assert!(decode_payload::<Handshake>(&handshake, DEFAULT_MAX_DEPTH).is_ok());
}
