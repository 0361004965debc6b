//! The frame decoder and encoder, against the contract of
//! DISTRIBUTION.md ("a frame's length is checked before anything is
//! allocated"; "only a framing error closes the connection") and decision
//! 0017.

use bytes::BytesMut;
use proptest::prelude::*;
use troubadour_remote::frame::{
    encode_frame, EncodeError, Frame, FrameDecoder, FrameError, Header, Kind, Lane, Limits,
    HEADER_LEN, MAGIC, VERSION,
};

fn encode(frames: &[(Header, Vec<u8>)], limits: &Limits) -> Vec<u8> {
    let mut wire = Vec::new();
    for (header, payload) in frames {
        encode_frame(&mut wire, header, payload, limits).unwrap();
    }
    wire
}

/// Decodes everything available; panics on a framing error.
fn drain(decoder: &mut FrameDecoder) -> Vec<Frame> {
    let mut out = Vec::new();
    while let Some(frame) = decoder.decode().unwrap() {
        out.push(frame);
    }
    out
}

/// A raw header as a hostile peer would write it.
fn raw_header(lane: u8, kind: u8, len: u32) -> Vec<u8> {
    let mut h = vec![MAGIC, VERSION, lane, kind];
    h.extend_from_slice(&len.to_le_bytes());
    h.extend_from_slice(&[0; 24]);
    h
}

#[test]
fn frames_round_trip_with_every_field() {
    let limits = Limits::default();
    let frames = vec![
        (Header::handshake(), b"hello".to_vec()),
        (Header::message(u64::MAX, 1 << 44 | 5, 7), vec![1, 2, 3]),
        (Header::control(9, 3, u64::MAX), Vec::new()),
    ];
    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&encode(&frames, &limits));
    let got = drain(&mut decoder);
    assert_eq!(got.len(), 3);
    for (frame, (header, payload)) in got.iter().zip(&frames) {
        assert_eq!(&frame.header, header);
        assert_eq!(&frame.payload[..], &payload[..]);
    }
    assert_eq!(decoder.finish(), Ok(()));
}

#[test]
fn a_frame_fed_one_byte_at_a_time_appears_only_when_complete() {
    let limits = Limits::default();
    let wire = encode(&[(Header::message(3, 1, 2), vec![42; 100])], &limits);
    let mut decoder = FrameDecoder::new(limits);
    for &byte in &wire[..wire.len() - 1] {
        decoder.feed(&[byte]);
        assert_eq!(decoder.decode(), Ok(None));
    }
    decoder.feed(&wire[wire.len() - 1..]);
    let frame = decoder.decode().unwrap().expect("complete now");
    assert_eq!(&frame.payload[..], &[42; 100][..]);
}

#[test]
fn a_frame_announcing_one_gib_is_refused_from_its_header_alone() {
    let limits = Limits::default();
    let mut decoder = FrameDecoder::new(limits);
    // Only the header: the peer never sends the payload. A decoder that
    // waited for it (or allocated it) instead of checking the cap would
    // return Ok(None) here.
    decoder.feed(&raw_header(Lane::User as u8, Kind::Message as u8, 1 << 30));
    let err = decoder.decode().unwrap_err();
    assert_eq!(
        err,
        FrameError::TooLong {
            lane: Lane::User,
            len: 1 << 30,
            cap: 256 * 1024
        }
    );
    assert!(err.to_string().contains("cap"), "{err}");
    // Nothing was reserved for the payload.
    assert!(decoder.buffer_mut().capacity() < 1 << 20);
    // The connection is done: the error sticks, more bytes change nothing.
    decoder.feed(&[0; 64]);
    assert_eq!(decoder.decode(), Err(err.clone()));
    assert_eq!(decoder.finish(), Err(err));
}

#[test]
fn the_length_is_checked_as_soon_as_its_eight_bytes_are_there() {
    // Decision 0017: a hostile length costs 8 bytes, not a whole header.
    let header = raw_header(Lane::User as u8, Kind::Message as u8, 1 << 30);
    let mut decoder = FrameDecoder::new(Limits::default());
    decoder.feed(&header[..7]);
    assert_eq!(decoder.decode(), Ok(None));
    decoder.feed(&header[7..8]);
    assert!(matches!(decoder.decode(), Err(FrameError::TooLong { .. })));
}

#[test]
fn the_large_lane_has_its_own_cap() {
    let limits = Limits::default().with_large_cap(1 << 20);
    let mut decoder = FrameDecoder::new(limits);
    let mut wire = raw_header(Lane::Large as u8, Kind::Message as u8, 300 * 1024);
    wire.extend(vec![0; 300 * 1024]);
    decoder.feed(&wire);
    let frame = decoder
        .decode()
        .unwrap()
        .expect("300 KiB fits the large lane");
    assert_eq!(frame.header.lane, Lane::Large);

    decoder.feed(&raw_header(
        Lane::Large as u8,
        Kind::Message as u8,
        (1 << 20) + 1,
    ));
    assert!(matches!(
        decoder.decode(),
        Err(FrameError::TooLong { lane: Lane::Large, cap, .. }) if cap == 1 << 20
    ));
}

#[test]
fn the_control_lane_has_its_own_cap() {
    let mut decoder = FrameDecoder::new(Limits::default());
    decoder.feed(&raw_header(
        Lane::Control as u8,
        Kind::Control as u8,
        128 * 1024,
    ));
    assert!(matches!(
        decoder.decode(),
        Err(FrameError::TooLong {
            lane: Lane::Control,
            ..
        })
    ));
}

#[test]
fn a_truncated_frame_waits_for_more_bytes_and_is_reported_at_the_end_of_the_stream() {
    let limits = Limits::default();
    let wire = encode(&[(Header::message(3, 1, 2), vec![7; 50])], &limits);
    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&wire[..wire.len() - 10]);
    assert_eq!(decoder.decode(), Ok(None));
    assert_eq!(decoder.decode(), Ok(None), "still waiting, not failing");
    assert_eq!(
        decoder.finish(),
        Err(FrameError::Truncated {
            received: wire.len() - 10,
            needed: wire.len()
        })
    );
    decoder.feed(&wire[wire.len() - 10..]);
    assert!(decoder.decode().unwrap().is_some());
    assert_eq!(decoder.finish(), Ok(()));
}

#[test]
fn a_truncated_header_is_reported_at_the_end_of_the_stream() {
    let limits = Limits::default();
    let wire = encode(&[(Header::control(1, 0, 0), Vec::new())], &limits);
    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&wire[..HEADER_LEN - 1]);
    assert_eq!(decoder.decode(), Ok(None));
    assert_eq!(
        decoder.finish(),
        Err(FrameError::Truncated {
            received: HEADER_LEN - 1,
            needed: HEADER_LEN
        })
    );
}

#[test]
fn garbage_after_a_good_frame_is_a_framing_error_after_that_frame() {
    let limits = Limits::default();
    let mut wire = encode(&[(Header::message(3, 1, 2), b"ok".to_vec())], &limits);
    wire.extend_from_slice(b"GET / HTTP/1.1\r\n");
    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&wire);
    let first = decoder.decode().unwrap().expect("the good frame first");
    assert_eq!(&first.payload[..], b"ok");
    assert_eq!(decoder.decode(), Err(FrameError::BadMagic { found: b'G' }));
}

#[test]
fn garbage_is_refused_on_its_first_byte() {
    let mut decoder = FrameDecoder::new(Limits::default());
    decoder.feed(b"G");
    assert_eq!(decoder.decode(), Err(FrameError::BadMagic { found: b'G' }));
}

#[test]
fn every_bad_header_field_is_its_own_framing_error() {
    let cases: Vec<(Vec<u8>, FrameError)> = vec![
        (vec![MAGIC, 9], FrameError::UnsupportedVersion { found: 9 }),
        (
            vec![MAGIC, VERSION, 3],
            FrameError::UnknownLane { found: 3 },
        ),
        (
            vec![MAGIC, VERSION, 1, 7],
            FrameError::UnknownKind { found: 7 },
        ),
        (
            raw_header(Lane::Control as u8, Kind::Message as u8, 0),
            FrameError::KindNotOnLane {
                kind: Kind::Message,
                lane: Lane::Control,
            },
        ),
        (
            raw_header(Lane::User as u8, Kind::Handshake as u8, 0),
            FrameError::KindNotOnLane {
                kind: Kind::Handshake,
                lane: Lane::User,
            },
        ),
    ];
    for (bytes, expected) in cases {
        let mut decoder = FrameDecoder::new(Limits::default());
        decoder.feed(&bytes);
        assert_eq!(decoder.decode(), Err(expected));
    }
}

#[test]
fn the_encoder_refuses_what_the_receiver_would_close_the_connection_for() {
    let limits = Limits::default();
    let mut out = b"earlier frames".to_vec();
    let too_long = vec![0; 256 * 1024 + 1];
    assert_eq!(
        encode_frame(&mut out, &Header::message(1, 0, 0), &too_long, &limits),
        Err(EncodeError::TooLong {
            lane: Lane::User,
            len: too_long.len(),
            cap: 256 * 1024
        })
    );
    let wrong_lane = Header {
        lane: Lane::User,
        ..Header::control(1, 0, 0)
    };
    assert_eq!(
        encode_frame(&mut out, &wrong_lane, b"", &limits),
        Err(EncodeError::KindNotOnLane {
            kind: Kind::Control,
            lane: Lane::User
        })
    );
    assert_eq!(
        out, b"earlier frames",
        "a refused frame leaves nothing behind"
    );
}

#[test]
fn frames_encode_into_bytes_mut_as_into_vec() {
    let limits = Limits::default();
    let mut a = Vec::new();
    let mut b = BytesMut::new();
    encode_frame(&mut a, &Header::message(5, 6, 7), b"same", &limits).unwrap();
    encode_frame(&mut b, &Header::message(5, 6, 7), b"same", &limits).unwrap();
    assert_eq!(&a[..], &b[..]);
}

fn lane_kind() -> impl Strategy<Value = (Lane, Kind)> {
    prop_oneof![
        Just((Lane::Control, Kind::Handshake)),
        Just((Lane::Control, Kind::Control)),
        Just((Lane::User, Kind::Message)),
        Just((Lane::Large, Kind::Message)),
    ]
}

fn frame() -> impl Strategy<Value = (Header, Vec<u8>)> {
    (
        lane_kind(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|((lane, kind), code, sender, receiver, payload)| {
            (
                Header {
                    lane,
                    kind,
                    code,
                    sender,
                    receiver,
                },
                payload,
            )
        })
}

proptest! {
    #[test]
    fn frames_split_at_random_points_decode_to_the_same_frames(
        frames in proptest::collection::vec(frame(), 0..12),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let limits = Limits::default();
        let wire = encode(&frames, &limits);
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
        points.push(0);
        points.push(wire.len());
        points.sort_unstable();
        let mut decoder = FrameDecoder::new(limits);
        let mut got = Vec::new();
        for piece in points.windows(2) {
            decoder.feed(&wire[piece[0]..piece[1]]);
            got.extend(drain(&mut decoder));
        }
        prop_assert_eq!(decoder.finish(), Ok(()));
        let got: Vec<(Header, Vec<u8>)> =
            got.into_iter().map(|f| (f.header, f.payload.to_vec())).collect();
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn any_bytes_in_any_pieces_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..2000),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        points.push(0);
        points.push(bytes.len());
        points.sort_unstable();
        let mut decoder = FrameDecoder::new(Limits::default());
        for piece in points.windows(2) {
            decoder.feed(&bytes[piece[0]..piece[1]]);
            while let Ok(Some(_)) = decoder.decode() {}
        }
        let _ = decoder.finish();
    }

    #[test]
    fn a_valid_prefix_then_garbage_yields_the_valid_frames_then_an_error(
        frames in proptest::collection::vec(frame(), 1..5),
        garbage in proptest::collection::vec(any::<u8>(), 1..40),
    ) {
        prop_assume!(garbage[0] != MAGIC);
        let limits = Limits::default();
        let mut wire = encode(&frames, &limits);
        wire.extend_from_slice(&garbage);
        let mut decoder = FrameDecoder::new(limits);
        decoder.feed(&wire);
        for _ in &frames {
            prop_assert!(decoder.decode().unwrap().is_some());
        }
        prop_assert_eq!(decoder.decode(), Err(FrameError::BadMagic { found: garbage[0] }));
    }
}
