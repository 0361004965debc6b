//! The handshake frame: the first frame each side of a connection sends.
//!
//! Only the frame's content lives here; the exchange (who sends first,
//! what is refused, TLS under it) is the transport's, next to come. A
//! handshake travels on the control lane as [`Kind::Handshake`], its
//! payload the postcard encoding of [`Handshake`], decoded under the same
//! nesting limit as every payload.

use serde::{Deserialize, Serialize};

use crate::codec::{decode_payload, serialize_into, DecodeError, DEFAULT_MAX_DEPTH};
use crate::frame::{encode_frame_with, EncodeError, Frame, FrameBuf, Header, Kind, Limits};

/// The version of the protocol above the framing (handshake, control codes,
/// message semantics). A node refuses a peer with another version.
pub const PROTOCOL_VERSION: u16 = 1;

/// Control code of the frame each side sends once it checked the peer's
/// handshake and accepts it (empty payload). Codes 1 and 2 are the
/// handshake's; signals after it use other codes.
pub const HANDSHAKE_ACCEPTED: u64 = 1;

/// Control code of the frame a side sends when it refuses the peer's
/// handshake; the payload is the reason, a postcard `String`, so that the
/// refused side can say why instead of seeing a bare close.
pub const HANDSHAKE_REFUSED: u64 = 2;

/// Who is on the other end of a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handshake {
    /// The cluster the node belongs to; a peer from another cluster is
    /// refused before any message is decoded.
    pub cluster: String,
    /// [`PROTOCOL_VERSION`] of the sender.
    pub protocol_version: u16,
    /// The node's name (the core's `NodeId::name`).
    pub node_name: String,
    /// The node's incarnation, new on every process start (the core's
    /// `NodeId::incarnation`); an incarnation declared down is never
    /// accepted again.
    pub incarnation: u64,
}

impl Handshake {
    /// Appends this handshake as one control-lane frame to `out`.
    pub fn encode<B: FrameBuf>(&self, out: &mut B, limits: &Limits) -> Result<(), EncodeError> {
        encode_frame_with(out, &Header::handshake(), limits, |out, max| {
            serialize_into(out, self, max)
        })
        .map(drop)
    }

    /// Reads a handshake out of a frame. `None` when the frame is not a
    /// handshake frame.
    pub fn decode(frame: &Frame) -> Option<Result<Handshake, DecodeError>> {
        (frame.header.kind == Kind::Handshake)
            .then(|| decode_payload(&frame.payload, DEFAULT_MAX_DEPTH))
    }
}
