//! Payloads: round trips, the allow-list of registered types, and hostile
//! input that must fail one message with a typed error, never the process
//! (DISTRIBUTION.md: "decoding is depth-limited; an unknown type, an
//! undecodable or oversized message is dead-lettered with its own
//! reason").

use bytes::BytesMut;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use troubadour_remote::codec::{
    decode_payload, encode_message, type_id, DecodeError, MessageError, RegisterError, Registry,
    DEFAULT_MAX_DEPTH,
};
use troubadour_remote::frame::{EncodeError, FrameDecoder, Kind, Lane, Limits, HEADER_LEN};
use troubadour_remote::handshake::{Handshake, PROTOCOL_VERSION};

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Post {
    room: u32,
    author: String,
    text: String,
    tags: Vec<String>,
    reply_to: Option<u64>,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Ping(u64);

/// A recursive type: each `Deeper` is one more level, one byte `0x01` on
/// the wire.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
enum Nest {
    Leaf,
    Deeper(Box<Nest>),
}

impl Nest {
    fn depth(levels: usize) -> Nest {
        (0..levels).fold(Nest::Leaf, |n, _| Nest::Deeper(Box::new(n)))
    }
}

impl Drop for Nest {
    // Dropping a deep `Nest` recursively would itself overflow the stack.
    fn drop(&mut self) {
        let mut next = match self {
            Nest::Deeper(inner) => std::mem::replace(&mut **inner, Nest::Leaf),
            Nest::Leaf => return,
        };
        while let Nest::Deeper(inner) = &mut next {
            next = std::mem::replace(&mut **inner, Nest::Leaf);
        }
    }
}

fn post() -> Post {
    Post {
        room: 7,
        author: "ada".into(),
        text: "hello".into(),
        tags: vec!["a".into(), "b".into()],
        reply_to: Some(3),
    }
}

fn registry() -> (Registry, u64, u64) {
    let mut registry = Registry::new();
    let post = registry.register::<Post>("chat::Post").unwrap();
    let ping = registry.register::<Ping>("chat::Ping").unwrap();
    (registry, post, ping)
}

#[test]
fn a_registered_message_round_trips_through_a_frame() {
    let (registry, post_id, _) = registry();
    let limits = Limits::default();
    let mut wire = BytesMut::new();
    let lane = encode_message(&mut wire, post_id, 11, 22, &post(), &limits).unwrap();
    assert_eq!(lane, Lane::User);
    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&wire);
    let frame = decoder.decode().unwrap().unwrap();
    assert_eq!((frame.header.sender, frame.header.receiver), (11, 22));
    let message = registry.decode(&frame).unwrap();
    assert_eq!(message.downcast_ref::<Post>(), Some(&post()));
}

#[test]
fn an_unknown_type_id_fails_that_message_only_and_the_stream_goes_on() {
    let (registry, post_id, ping_id) = registry();
    let limits = Limits::default();
    let unknown = type_id("chat::NotRegisteredHere");
    let mut wire = Vec::new();
    encode_message(&mut wire, post_id, 1, 2, &post(), &limits).unwrap();
    encode_message(&mut wire, unknown, 1, 2, &post(), &limits).unwrap();
    encode_message(&mut wire, ping_id, 1, 2, &Ping(5), &limits).unwrap();

    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&wire);
    let mut results = Vec::new();
    while let Some(frame) = decoder.decode().expect("no framing error") {
        results.push(registry.decode(&frame));
    }
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok());
    let err = results[1].as_ref().unwrap_err();
    assert_eq!(err, &MessageError::UnknownType { type_id: unknown });
    assert!(err.to_string().contains("register"), "{err}");
    assert_eq!(
        results[2].as_ref().unwrap().downcast_ref::<Ping>(),
        Some(&Ping(5))
    );
    assert_eq!(decoder.finish(), Ok(()));
}

#[test]
fn a_payload_that_does_not_decode_fails_that_message_only() {
    let (registry, post_id, ping_id) = registry();
    let limits = Limits::default();
    let mut wire = Vec::new();
    // A Ping's payload under Post's type id: the sender's type differs.
    encode_message(&mut wire, post_id, 1, 2, &Ping(u64::MAX), &limits).unwrap();
    // A Post's payload under Ping's type id: decodes a prefix, bytes left.
    encode_message(&mut wire, ping_id, 1, 2, &post(), &limits).unwrap();
    encode_message(&mut wire, ping_id, 1, 2, &Ping(1), &limits).unwrap();
    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&wire);
    let frames: Vec<_> = std::iter::from_fn(|| decoder.decode().unwrap()).collect();
    assert!(matches!(
        registry.decode(&frames[0]),
        Err(MessageError::Decode {
            name: "chat::Post",
            error: DecodeError::Invalid { .. }
        })
    ));
    assert!(matches!(
        registry.decode(&frames[1]),
        Err(MessageError::Decode {
            name: "chat::Ping",
            error: DecodeError::TrailingBytes { .. }
        })
    ));
    assert!(registry.decode(&frames[2]).is_ok());
}

#[test]
fn one_megabyte_of_nested_variant_tags_is_a_typed_error_not_a_stack_overflow() {
    // 1 MB of 0x01: "Deeper" a million times. Without a depth limit
    // postcard recurses once per byte and overflows this test thread's
    // stack, aborting the process.
    let hostile = vec![1u8; 1 << 20];
    assert_eq!(
        decode_payload::<Nest>(&hostile, DEFAULT_MAX_DEPTH),
        Err(DecodeError::TooDeep {
            limit: DEFAULT_MAX_DEPTH
        })
    );

    let mut registry = Registry::new();
    let id = registry.register::<Nest>("test::Nest").unwrap();
    let limits = Limits::default().with_large_cap(2 << 20);
    let mut wire = Vec::new();
    troubadour_remote::frame::encode_frame(
        &mut wire,
        &troubadour_remote::frame::Header {
            lane: Lane::Large,
            ..troubadour_remote::frame::Header::message(id, 1, 2)
        },
        &hostile,
        &limits,
    )
    .unwrap();
    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&wire);
    let frame = decoder.decode().unwrap().unwrap();
    let err = registry.decode(&frame).unwrap_err();
    assert_eq!(
        err,
        MessageError::Decode {
            name: "test::Nest",
            error: DecodeError::TooDeep {
                limit: DEFAULT_MAX_DEPTH
            }
        }
    );
    assert!(err.to_string().contains("deeper than"), "{err}");
}

#[test]
fn nesting_within_the_limit_decodes_and_one_level_more_does_not() {
    // Each `Deeper` costs two levels (the enum, then its newtype variant's
    // Box goes straight through), the leaf one: find the deepest value
    // that decodes and check the next one is refused.
    let limit = 40;
    let mut deepest = None;
    for levels in 0..limit {
        let bytes = postcard::to_allocvec(&Nest::depth(levels)).unwrap();
        match decode_payload::<Nest>(&bytes, limit) {
            Ok(nest) => {
                assert_eq!(nest, Nest::depth(levels));
                deepest = Some(levels);
            }
            Err(e) => {
                assert_eq!(e, DecodeError::TooDeep { limit });
                break;
            }
        }
    }
    let deepest = deepest.unwrap();
    assert!(
        deepest + 1 >= limit / 2,
        "legitimate nesting refused too early: {deepest}"
    );
    let one_more = postcard::to_allocvec(&Nest::depth(deepest + 1)).unwrap();
    assert_eq!(
        decode_payload::<Nest>(&one_more, limit),
        Err(DecodeError::TooDeep { limit })
    );
}

#[test]
fn the_default_limit_fits_a_small_thread_stack_with_room_to_spare() {
    // The deepest value the default limit lets through decodes on a
    // 256 KiB stack, an eighth of a default thread's: the limit is far
    // below the codec's stack limit, not just under it.
    let bytes = postcard::to_allocvec(&Nest::depth(DEFAULT_MAX_DEPTH - 1)).unwrap();
    let hostile = vec![1u8; 1 << 20];
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let _ = decode_payload::<Nest>(&bytes, DEFAULT_MAX_DEPTH);
            assert_eq!(
                decode_payload::<Nest>(&hostile, DEFAULT_MAX_DEPTH),
                Err(DecodeError::TooDeep {
                    limit: DEFAULT_MAX_DEPTH
                })
            );
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn nested_sequences_and_maps_count_as_levels_too() {
    type Deep = Vec<Vec<Vec<Vec<Vec<u8>>>>>;
    let value: Deep = vec![vec![vec![vec![vec![1, 2]]]]];
    let bytes = postcard::to_allocvec(&value).unwrap();
    assert_eq!(decode_payload::<Deep>(&bytes, 5), Ok(value));
    assert_eq!(
        decode_payload::<Deep>(&bytes, 4),
        Err(DecodeError::TooDeep { limit: 4 })
    );
    let map: std::collections::BTreeMap<u8, Option<Vec<u8>>> = [(1, Some(vec![2]))].into();
    let bytes = postcard::to_allocvec(&map).unwrap();
    assert_eq!(decode_payload(&bytes, 3), Ok(map.clone()));
    assert!(matches!(
        decode_payload::<std::collections::BTreeMap<u8, Option<Vec<u8>>>>(&bytes, 2),
        Err(DecodeError::TooDeep { .. })
    ));
}

#[test]
fn a_message_over_the_user_cap_takes_the_large_lane() {
    let (registry, post_id, _) = registry();
    let limits = Limits::default();
    let big = Post {
        text: "x".repeat(300 * 1024),
        ..post()
    };
    let mut wire = Vec::new();
    assert_eq!(
        encode_message(&mut wire, post_id, 1, 2, &big, &limits),
        Ok(Lane::Large)
    );
    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&wire);
    let frame = decoder.decode().unwrap().unwrap();
    assert_eq!(
        (frame.header.lane, frame.header.kind),
        (Lane::Large, Kind::Message)
    );
    assert_eq!(
        registry.decode(&frame).unwrap().downcast_ref::<Post>(),
        Some(&big)
    );
}

#[test]
fn an_oversized_message_is_refused_on_the_sender_and_leaves_the_buffer_as_it_was() {
    let (_, post_id, _) = registry();
    let limits = Limits::default().with_large_cap(512 * 1024);
    let mut wire = Vec::new();
    encode_message(&mut wire, post_id, 1, 2, &post(), &limits).unwrap();
    let before = wire.clone();
    let huge = Post {
        text: "x".repeat(1 << 20),
        ..post()
    };
    let err = encode_message(&mut wire, post_id, 1, 2, &huge, &limits).unwrap_err();
    assert!(
        matches!(
            err,
            EncodeError::TooLong {
                lane: Lane::Large,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(wire, before, "nothing of the refused frame stays behind");
    // The next message still goes out after the refused one.
    encode_message(&mut wire, post_id, 1, 2, &post(), &limits).unwrap();
    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&wire);
    assert!(decoder.decode().unwrap().is_some());
    assert!(decoder.decode().unwrap().is_some());
    assert_eq!(decoder.decode(), Ok(None));
}

#[test]
fn a_failing_serialize_impl_is_a_typed_error_and_writes_nothing() {
    struct Refuses;
    impl Serialize for Refuses {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("not today"))
        }
    }
    let mut wire = vec![9];
    let err = encode_message(&mut wire, 1, 0, 0, &Refuses, &Limits::default()).unwrap_err();
    assert!(matches!(err, EncodeError::Serialize { .. }), "{err:?}");
    assert_eq!(wire, vec![9]);
}

#[test]
fn one_name_cannot_be_registered_twice() {
    let mut registry = Registry::new();
    let id = registry.register::<Ping>("chat::Ping").unwrap();
    assert_eq!(
        registry.register::<Post>("chat::Ping"),
        Err(RegisterError::Taken {
            name: "chat::Ping",
            existing: "chat::Ping",
            type_id: id
        })
    );
    assert_eq!(registry.name(id), Some("chat::Ping"));
}

#[test]
fn type_ids_are_stable_across_builds() {
    // The wire contract: FNV-1a 64 of the stable name. These values must
    // never change, or nodes of two builds stop understanding each other.
    assert_eq!(type_id(""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(type_id("a"), 0xaf63_dc4c_8601_ec8c);
    assert_ne!(type_id("chat::Post"), type_id("chat::Ping"));
}

#[test]
fn a_handshake_round_trips_on_the_control_lane() {
    let limits = Limits::default();
    let hello = Handshake {
        cluster: "fleet".into(),
        protocol_version: PROTOCOL_VERSION,
        node_name: "node-a".into(),
        incarnation: 0x1234_5678_9abc,
    };
    let mut wire = Vec::new();
    hello.encode(&mut wire, &limits).unwrap();
    assert!(wire.len() > HEADER_LEN);
    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&wire);
    let frame = decoder.decode().unwrap().unwrap();
    assert_eq!(
        (frame.header.lane, frame.header.kind),
        (Lane::Control, Kind::Handshake)
    );
    assert_eq!(Handshake::decode(&frame), Some(Ok(hello)));
}

proptest! {
    #[test]
    fn any_post_round_trips(
        room in any::<u32>(),
        author in ".{0,20}",
        text in ".{0,200}",
        tags in proptest::collection::vec(".{0,8}", 0..5),
        reply_to in any::<Option<u64>>(),
    ) {
        let (registry, post_id, _) = registry();
        let post = Post { room, author, text, tags, reply_to };
        let mut wire = Vec::new();
        encode_message(&mut wire, post_id, 1, 2, &post, &Limits::default()).unwrap();
        let mut decoder = FrameDecoder::new(Limits::default());
        decoder.feed(&wire);
        let frame = decoder.decode().unwrap().unwrap();
        let decoded = registry.decode(&frame).unwrap();
        prop_assert_eq!(decoded.downcast_ref::<Post>(), Some(&post));
    }

    #[test]
    fn any_payload_gives_a_value_or_a_typed_error(
        payload in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let _ = decode_payload::<Post>(&payload, DEFAULT_MAX_DEPTH);
        let _ = decode_payload::<Nest>(&payload, DEFAULT_MAX_DEPTH);
        let _ = decode_payload::<Handshake>(&payload, DEFAULT_MAX_DEPTH);
    }
}

#[test]
fn a_handshake_over_the_control_cap_is_refused_naming_the_control_lane() {
    let limits = Limits::default().with_control_cap(64);
    let hello = Handshake {
        cluster: "c".repeat(100),
        protocol_version: PROTOCOL_VERSION,
        node_name: "n".into(),
        incarnation: 1,
    };
    let mut wire = Vec::new();
    assert!(matches!(
        hello.encode(&mut wire, &limits),
        Err(EncodeError::TooLong {
            lane: Lane::Control,
            cap: 64,
            ..
        })
    ));
    assert!(wire.is_empty());
}
