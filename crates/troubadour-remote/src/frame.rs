//! Frames: the unit a connection reads and writes.
//!
//! Every frame is a fixed 32-byte header followed by its payload
//! (`docs/decisions/0017-remote-wire-format.md` has the reasons):
//!
//! | bytes  | field    | meaning |
//! |--------|----------|---------|
//! | 0      | magic    | [`MAGIC`]; anything else means the stream is not ours or lost sync |
//! | 1      | version  | [`VERSION`], the framing's version |
//! | 2      | lane     | [`Lane`]: control, user or large |
//! | 3      | kind     | [`Kind`]: handshake, message or control |
//! | 4..8   | length   | payload length, `u32` little-endian |
//! | 8..16  | code     | message type id, or control code, `u64` LE |
//! | 16..24 | sender   | sending actor's `ActorId::as_u64`, `u64` LE (0: none) |
//! | 24..32 | receiver | receiving actor's `ActorId::as_u64`, `u64` LE (0: none) |
//!
//! The decoder ([`FrameDecoder`]) checks everything in the header, the
//! length against its lane's cap included, as soon as the header's bytes are
//! there, before it keeps any payload byte; so a peer that announces 1 GiB
//! costs 32 bytes of buffer, not 1 GiB. Every check failing here is a
//! framing error: the byte stream cannot be trusted any more and the
//! connection must close. Errors about one message (an unknown type id, a
//! payload that does not decode) are found later, by the codec, and never
//! close the connection.

use std::fmt;

use bytes::{Bytes, BytesMut};

/// The first byte of every frame. Chosen outside ASCII so that a peer
/// speaking a text protocol (HTTP, a stray `telnet`) fails on its first byte.
pub const MAGIC: u8 = 0xA7;

/// The framing's version, checked on every frame. A change of header layout
/// takes a new version; the handshake's protocol version covers the rest.
pub const VERSION: u8 = 1;

/// Bytes in a frame's header.
pub const HEADER_LEN: usize = 32;

/// Default cap of a control-lane frame's payload: 64 KiB. Control payloads
/// (handshake, links, monitors, exits) are a few dozen bytes.
pub const DEFAULT_CONTROL_CAP: u32 = 64 * 1024;

/// Default cap of a user-lane frame's payload: 256 KiB.
pub const DEFAULT_USER_CAP: u32 = 256 * 1024;

/// Default cap of a large-lane frame's payload: 16 MiB.
pub const DEFAULT_LARGE_CAP: u32 = 16 * 1024 * 1024;

/// Which of a connection's three streams a frame belongs to.
///
/// Lanes exist so that traffic that must not wait does not wait: the
/// transport writes the control lane before the user lane, and a large
/// message travels on its own lane so that it can be given its own, higher
/// cap without raising the cap every ordinary frame is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Lane {
    /// Handshake, links, monitors, exits, heartbeats; never behind a user
    /// message.
    Control = 0,
    /// Ordinary messages, up to the user cap (256 KiB by default).
    User = 1,
    /// Messages over the user cap, up to the large cap.
    Large = 2,
}

impl Lane {
    fn from_byte(byte: u8) -> Option<Lane> {
        match byte {
            0 => Some(Lane::Control),
            1 => Some(Lane::User),
            2 => Some(Lane::Large),
            _ => None,
        }
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Lane::Control => "control",
            Lane::User => "user",
            Lane::Large => "large",
        })
    }
}

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// The first frame each side sends: cluster name, protocol version, node
    /// name and incarnation ([`crate::handshake::Handshake`]). Control lane
    /// only; `code`, `sender` and `receiver` are 0.
    Handshake = 0,
    /// A user message: `code` is its type id, the payload its encoding.
    /// User or large lane only.
    Message = 1,
    /// A control signal (link, monitor, exit, heartbeat): `code` says which.
    /// Control lane only.
    Control = 2,
    /// A request (`ask`): `code` is its type id, `sender` the request's
    /// number on this connection, the payload its encoding. User or large
    /// lane only.
    Ask = 3,
    /// The answer to an [`Ask`](Kind::Ask): `sender` is the request's
    /// number, `code` 0 for a reply (the payload is its encoding) or the
    /// reason there is none (the payload says more). User or large lane
    /// only.
    Reply = 4,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Kind> {
        match byte {
            0 => Some(Kind::Handshake),
            1 => Some(Kind::Message),
            2 => Some(Kind::Control),
            3 => Some(Kind::Ask),
            4 => Some(Kind::Reply),
            _ => None,
        }
    }

    /// Whether a frame of this kind may travel on `lane`.
    pub fn allowed_on(self, lane: Lane) -> bool {
        match self {
            Kind::Handshake | Kind::Control => lane == Lane::Control,
            Kind::Message | Kind::Ask | Kind::Reply => lane != Lane::Control,
        }
    }

    /// Whether frames of this kind carry a message's encoding, and so move
    /// to the large lane when over the user cap.
    pub fn carries_message(self) -> bool {
        matches!(self, Kind::Message | Kind::Ask | Kind::Reply)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Handshake => "handshake",
            Kind::Message => "message",
            Kind::Control => "control",
            Kind::Ask => "ask",
            Kind::Reply => "reply",
        })
    }
}

/// The caps on a frame's payload, one per lane.
///
/// Both ends of a connection should use the same caps: a frame over the
/// receiver's cap is a framing error and closes the connection, so the
/// sender's encoder refuses (per message) what the receiver would refuse
/// (for the whole connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    control: u32,
    user: u32,
    large: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            control: DEFAULT_CONTROL_CAP,
            user: DEFAULT_USER_CAP,
            large: DEFAULT_LARGE_CAP,
        }
    }
}

impl Limits {
    /// Sets the user lane's cap. The large lane's cap is raised to match
    /// if it was lower, so that every message the user lane refuses can
    /// still go on the large lane.
    pub fn with_user_cap(mut self, bytes: u32) -> Self {
        self.user = bytes;
        self.large = self.large.max(bytes);
        self
    }

    /// Sets the large lane's cap: the largest message this node sends or
    /// accepts. It is never below the user lane's cap.
    pub fn with_large_cap(mut self, bytes: u32) -> Self {
        self.large = bytes.max(self.user);
        self
    }

    /// Sets the control lane's cap.
    pub fn with_control_cap(mut self, bytes: u32) -> Self {
        self.control = bytes;
        self
    }

    /// The cap on a payload on `lane`, in bytes.
    pub fn cap(&self, lane: Lane) -> u32 {
        match lane {
            Lane::Control => self.control,
            Lane::User => self.user,
            Lane::Large => self.large,
        }
    }
}

/// A frame's header, less its length (which is the payload's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// The lane it travels on.
    pub lane: Lane,
    /// What it carries.
    pub kind: Kind,
    /// A message's type id, or a control code; 0 for a handshake.
    pub code: u64,
    /// The sending actor's `ActorId::as_u64`, 0 for none.
    pub sender: u64,
    /// The receiving actor's `ActorId::as_u64`, 0 for none.
    pub receiver: u64,
}

impl Header {
    /// The header of a handshake frame.
    pub fn handshake() -> Header {
        Header {
            lane: Lane::Control,
            kind: Kind::Handshake,
            code: 0,
            sender: 0,
            receiver: 0,
        }
    }

    /// The header of a user message of type id `type_id`, on the user lane
    /// (the codec moves it to the large lane when its payload needs it).
    pub fn message(type_id: u64, sender: u64, receiver: u64) -> Header {
        Header {
            lane: Lane::User,
            kind: Kind::Message,
            code: type_id,
            sender,
            receiver,
        }
    }

    /// The header of a control signal `code`.
    pub fn control(code: u64, sender: u64, receiver: u64) -> Header {
        Header {
            lane: Lane::Control,
            kind: Kind::Control,
            code,
            sender,
            receiver,
        }
    }

    fn write(&self, len: u32, out: &mut [u8]) {
        out[0] = MAGIC;
        out[1] = VERSION;
        out[2] = self.lane as u8;
        out[3] = self.kind as u8;
        out[4..8].copy_from_slice(&len.to_le_bytes());
        out[8..16].copy_from_slice(&self.code.to_le_bytes());
        out[16..24].copy_from_slice(&self.sender.to_le_bytes());
        out[24..32].copy_from_slice(&self.receiver.to_le_bytes());
    }
}

/// A complete frame, as the decoder yields it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Its header.
    pub header: Header,
    /// Its payload. It shares the decoder's buffer (no copy), so holding it
    /// keeps that piece of buffer alive.
    pub payload: Bytes,
}

/// Why a byte stream is not a stream of frames. Every variant means the
/// connection must be closed: after one, the decoder refuses to go on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// A frame did not start with [`MAGIC`].
    BadMagic {
        /// The byte found instead.
        found: u8,
    },
    /// A frame's version is not [`VERSION`].
    UnsupportedVersion {
        /// The version found.
        found: u8,
    },
    /// A lane byte that names no lane.
    UnknownLane {
        /// The byte found.
        found: u8,
    },
    /// A kind byte that names no kind.
    UnknownKind {
        /// The byte found.
        found: u8,
    },
    /// A frame of a kind its lane does not carry (a message on the control
    /// lane, a handshake on the user lane).
    KindNotOnLane {
        /// The frame's kind.
        kind: Kind,
        /// The lane it came on.
        lane: Lane,
    },
    /// A frame announced a payload longer than its lane's cap.
    TooLong {
        /// The lane.
        lane: Lane,
        /// The announced length.
        len: u32,
        /// The lane's cap.
        cap: u32,
    },
    /// The stream ended in the middle of a frame.
    Truncated {
        /// Bytes of the frame that arrived.
        received: usize,
        /// Bytes the frame needed (header included; the header's length
        /// only, when the header itself was cut).
        needed: usize,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::BadMagic { found } => write!(
                f,
                "frame starts with byte {found:#04x}, not troubadour's {MAGIC:#04x}: the peer does \
                 not speak troubadour's wire protocol, or the stream lost sync; closing the \
                 connection"
            ),
            FrameError::UnsupportedVersion { found } => write!(
                f,
                "frame has framing version {found}, this node speaks version {VERSION}: run the \
                 same troubadour-remote version on both nodes; closing the connection"
            ),
            FrameError::UnknownLane { found } => write!(
                f,
                "frame names lane {found}, which does not exist (0 control, 1 user, 2 large): \
                 corrupt or hostile stream; closing the connection"
            ),
            FrameError::UnknownKind { found } => write!(
                f,
                "frame names kind {found}, which does not exist (0 handshake, 1 message, 2 \
                 control): corrupt or hostile stream; closing the connection"
            ),
            FrameError::KindNotOnLane { kind, lane } => write!(
                f,
                "a {kind} frame arrived on the {lane} lane, which never carries one: the peer \
                 breaks the protocol; closing the connection"
            ),
            FrameError::TooLong { lane, len, cap } => write!(
                f,
                "frame on the {lane} lane announces {len} bytes, over that lane's cap of {cap}: \
                 refused before reading it; if the peer is ours, give both nodes the same caps \
                 (Limits); closing the connection"
            ),
            FrameError::Truncated { received, needed } => write!(
                f,
                "the connection ended inside a frame: {received} of its {needed} bytes arrived; \
                 the last message sent on it is lost"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

/// Why a frame could not be encoded. Nothing was written to the buffer;
/// the connection is not affected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// The payload is over the cap of the largest lane the frame may take.
    /// For a message: the oversized message is refused on the sender, and
    /// never reaches the wire (where the receiver would close the
    /// connection for it).
    TooLong {
        /// The lane tried last.
        lane: Lane,
        /// The payload's length, or a lower bound when encoding stopped at
        /// the cap.
        len: usize,
        /// That lane's cap.
        cap: u32,
    },
    /// The header's kind cannot travel on its lane.
    KindNotOnLane {
        /// The kind.
        kind: Kind,
        /// The lane.
        lane: Lane,
    },
    /// The payload's serialization failed (a `Serialize` impl returned an
    /// error, or the type is not supported by the codec).
    Serialize {
        /// What the serializer said.
        reason: String,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::TooLong { lane, len, cap } => write!(
                f,
                "payload of {len} bytes is over the {lane} lane's cap of {cap}: send it in \
                 pieces, or raise the large lane's cap (Limits::with_large_cap) on both nodes"
            ),
            EncodeError::KindNotOnLane { kind, lane } => {
                write!(f, "a {kind} frame cannot travel on the {lane} lane")
            }
            EncodeError::Serialize { reason } => {
                write!(f, "the payload could not be serialized: {reason}")
            }
        }
    }
}

impl std::error::Error for EncodeError {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for Vec<u8> {}
    impl Sealed for bytes::BytesMut {}
}

/// A growable byte buffer frames are written into: `Vec<u8>` or
/// `BytesMut`. Sealed: the encoder relies on `truncate` really dropping
/// what it wrote when a frame is refused.
pub trait FrameBuf: sealed::Sealed + AsMut<[u8]> {
    /// Bytes in the buffer.
    fn len(&self) -> usize;
    /// Whether the buffer is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends `bytes`.
    fn extend_from_slice(&mut self, bytes: &[u8]);
    /// Appends one byte.
    fn push(&mut self, byte: u8);
    /// Drops everything after the first `len` bytes.
    fn truncate(&mut self, len: usize);
}

impl FrameBuf for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes)
    }
    fn push(&mut self, byte: u8) {
        Vec::push(self, byte)
    }
    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len)
    }
}

impl FrameBuf for BytesMut {
    fn len(&self) -> usize {
        BytesMut::len(self)
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        BytesMut::extend_from_slice(self, bytes)
    }
    fn push(&mut self, byte: u8) {
        bytes::BufMut::put_u8(self, byte)
    }
    fn truncate(&mut self, len: usize) {
        BytesMut::truncate(self, len)
    }
}

/// Appends one frame (`header`, then `payload`) to `out`.
///
/// Refuses, writing nothing, a payload over the cap of the header's lane or
/// a kind its lane does not carry: a frame the receiver would answer by
/// closing the connection.
pub fn encode_frame<B: FrameBuf>(
    out: &mut B,
    header: &Header,
    payload: &[u8],
    limits: &Limits,
) -> Result<(), EncodeError> {
    check_kind(header)?;
    let cap = limits.cap(header.lane);
    let len = match u32::try_from(payload.len()) {
        Ok(len) if len <= cap => len,
        _ => {
            return Err(EncodeError::TooLong {
                lane: header.lane,
                len: payload.len(),
                cap,
            })
        }
    };
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    header.write(len, &mut out.as_mut()[start..start + HEADER_LEN]);
    out.extend_from_slice(payload);
    Ok(())
}

/// Appends one frame to `out` whose payload `write_payload` writes straight
/// into `out` (no intermediate buffer), then fills in the header's length.
///
/// `write_payload` gets the buffer and the number of payload bytes allowed
/// (the largest cap the frame may use); it may stop early and return
/// [`EncodeError::TooLong`] once it passes that. A message header
/// ([`Kind::Message`]) starts on the user lane and moves to the large lane
/// when its payload is over the user cap. On any error `out` is truncated
/// back to where it was: nothing of a refused frame stays in the buffer.
pub fn encode_frame_with<B, F>(
    out: &mut B,
    header: &Header,
    limits: &Limits,
    write_payload: F,
) -> Result<Lane, EncodeError>
where
    B: FrameBuf,
    F: FnOnce(&mut B, usize) -> Result<(), EncodeError>,
{
    check_kind(header)?;
    let max_lane = if header.kind.carries_message() {
        Lane::Large
    } else {
        header.lane
    };
    let max = limits.cap(max_lane).max(limits.cap(header.lane));
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    let result = write_payload(out, max as usize)
        .map_err(|e| match e {
            // The writer knows the byte budget, not the lane it stands for.
            EncodeError::TooLong { len, .. } => EncodeError::TooLong {
                lane: max_lane,
                len,
                cap: limits.cap(max_lane),
            },
            e => e,
        })
        .and_then(|()| {
            let len = out.len() - start - HEADER_LEN;
            let mut lane = header.lane;
            if len > limits.cap(lane) as usize && header.kind.carries_message() {
                lane = Lane::Large;
            }
            let cap = limits.cap(lane);
            match u32::try_from(len) {
                Ok(len) if len <= cap => Ok((lane, len)),
                _ => Err(EncodeError::TooLong { lane, len, cap }),
            }
        });
    match result {
        Ok((lane, len)) => {
            let header = Header { lane, ..*header };
            header.write(len, &mut out.as_mut()[start..start + HEADER_LEN]);
            Ok(lane)
        }
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

fn check_kind(header: &Header) -> Result<(), EncodeError> {
    if header.kind.allowed_on(header.lane) {
        Ok(())
    } else {
        Err(EncodeError::KindNotOnLane {
            kind: header.kind,
            lane: header.lane,
        })
    }
}

/// Turns bytes, arriving in pieces of any size, into frames.
///
/// Feed it what the connection read ([`feed`](Self::feed), or read straight
/// into [`buffer_mut`](Self::buffer_mut)), then call
/// [`decode`](Self::decode) until it returns `Ok(None)` (it needs more
/// bytes). At the end of the stream call [`finish`](Self::finish): it says
/// whether the stream stopped inside a frame.
///
/// It never panics and never holds more than one header plus one payload
/// within its lane's cap beyond what the caller fed in one piece: the length
/// is checked against the cap as soon as the header is complete, before the
/// payload's bytes are kept or waited for. After a [`FrameError`] every
/// later call returns the same error: the stream is out of sync and the
/// connection must close.
///
/// ```
/// use troubadour_remote::frame::{encode_frame, FrameDecoder, Header, Limits};
///
/// let limits = Limits::default();
/// let mut wire = Vec::new();
/// encode_frame(&mut wire, &Header::message(7, 1, 2), b"hello", &limits).unwrap();
///
/// let mut decoder = FrameDecoder::new(limits);
/// decoder.feed(&wire[..10]); // half a header: nothing yet
/// assert_eq!(decoder.decode(), Ok(None));
/// decoder.feed(&wire[10..]);
/// let frame = decoder.decode().unwrap().unwrap();
/// assert_eq!(frame.header.code, 7);
/// assert_eq!(&frame.payload[..], b"hello");
/// ```
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    limits: Limits,
    /// The header of the frame whose payload is awaited, with its length.
    pending: Option<(Header, usize)>,
    failed: Option<FrameError>,
}

impl FrameDecoder {
    /// A decoder checking frames against `limits`.
    pub fn new(limits: Limits) -> FrameDecoder {
        FrameDecoder {
            buf: BytesMut::new(),
            limits,
            pending: None,
            failed: None,
        }
    }

    /// The caps this decoder checks.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Appends bytes that arrived. Ignored once the decoder has failed.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.failed.is_none() {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// The buffer that bytes are appended to, for reading from a socket
    /// straight into it. Only append: bytes already there belong to frames
    /// not yet decoded.
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed, or
    /// the framing error that ends the connection.
    pub fn decode(&mut self) -> Result<Option<Frame>, FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let (header, len) = match self.pending {
            Some(pending) => pending,
            None => match self.decode_header() {
                Ok(Some(pending)) => {
                    self.pending = Some(pending);
                    pending
                }
                Ok(None) => return Ok(None),
                Err(e) => {
                    self.failed = Some(e.clone());
                    // What is buffered can never be decoded: free it now.
                    self.buf = BytesMut::new();
                    return Err(e);
                }
            },
        };
        if self.buf.len() < len {
            return Ok(None);
        }
        self.pending = None;
        let payload = self.buf.split_to(len).freeze();
        Ok(Some(Frame { header, payload }))
    }

    /// Checks the header at the start of the buffer; consumes it when it is
    /// complete and sound. Fails as early as the bytes present allow, so
    /// garbage is refused on its first byte, not after 32.
    fn decode_header(&mut self) -> Result<Option<(Header, usize)>, FrameError> {
        let b = &self.buf[..];
        if let Some(&found) = b.first() {
            if found != MAGIC {
                return Err(FrameError::BadMagic { found });
            }
        }
        if let Some(&found) = b.get(1) {
            if found != VERSION {
                return Err(FrameError::UnsupportedVersion { found });
            }
        }
        let lane = match b.get(2) {
            Some(&found) => Some(Lane::from_byte(found).ok_or(FrameError::UnknownLane { found })?),
            None => None,
        };
        let kind = match b.get(3) {
            Some(&found) => Some(Kind::from_byte(found).ok_or(FrameError::UnknownKind { found })?),
            None => None,
        };
        if let (Some(lane), Some(kind)) = (lane, kind) {
            if !kind.allowed_on(lane) {
                return Err(FrameError::KindNotOnLane { kind, lane });
            }
        }
        let (Some(lane), Some(kind), Some(len)) = (lane, kind, b.get(4..8)) else {
            return Ok(None);
        };
        let len = u32::from_le_bytes(len.try_into().expect("four bytes"));
        let cap = self.limits.cap(lane);
        if len > cap {
            return Err(FrameError::TooLong { lane, len, cap });
        }
        if b.len() < HEADER_LEN {
            return Ok(None);
        }
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"));
        let header = Header {
            lane,
            kind,
            code: word(8),
            sender: word(16),
            receiver: word(24),
        };
        bytes::Buf::advance(&mut self.buf, HEADER_LEN);
        Ok(Some((header, len as usize)))
    }

    /// Call when the stream ended: `Err(Truncated)` if it ended inside a
    /// frame (the frame is lost), or the framing error already seen.
    pub fn finish(&self) -> Result<(), FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.pending {
            Some((_, len)) => Err(FrameError::Truncated {
                received: HEADER_LEN + self.buf.len(),
                needed: HEADER_LEN + len,
            }),
            None if self.buf.is_empty() => Ok(()),
            None => Err(FrameError::Truncated {
                received: self.buf.len(),
                needed: HEADER_LEN,
            }),
        }
    }

    /// Bytes buffered and not yet part of a decoded frame (a pending
    /// frame's header is counted as consumed).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}
