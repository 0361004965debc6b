//! Payloads: serde types encoded with postcard, decoded under a nesting
//! limit, and only for registered types.
//!
//! postcard's deserializer recurses once per level of nesting (an enum
//! variant holding a `Box` of the same enum, a `Vec` of `Vec`s...) and has
//! no limit of its own: in a debug build, fewer than 8,000 bytes `0x01`,
//! each selecting "one more level" of a recursive enum, overflow a 2 MiB
//! thread stack and abort the whole process. So every decode here goes through a
//! wrapper that counts the levels ([`DEFAULT_MAX_DEPTH`], far below what
//! any stack holds) and fails with [`DecodeError::TooDeep`] past them.
//!
//! A message type is known to the wire by a stable name (say
//! `"chat::Post"`); its type id is the name's 64-bit FNV-1a hash
//! ([`type_id`]), the same on every node and in every build. Only types in
//! the [`Registry`] are decoded: an allow-list, never "any type". Every
//! failure to decode one message ([`MessageError`]) is about that message
//! only: the transport dead-letters it and reads on.

use std::any::Any;
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, Visitor};
use serde::Serialize;

use crate::frame::{encode_frame_with, EncodeError, Frame, FrameBuf, Header, Kind, Lane, Limits};

/// Levels of nesting a payload may have by default. A level is one
/// sequence, map, tuple, struct, enum variant, option or newtype entered;
/// a plain struct of scalars is one level. Measured on a debug build (the
/// deepest stack use): decoding a recursive enum through the counting
/// wrapper overflows a 2 MiB thread stack between 2,000 and 4,000 levels,
/// so under 1 KiB per level; 128 levels take at most a sixteenth of that
/// stack (the test `the_default_limit_fits_a_small_thread_stack_with_room_to_spare`
/// runs them on 256 KiB).
pub const DEFAULT_MAX_DEPTH: usize = 128;

/// A message type's id on the wire: the 64-bit FNV-1a hash of its stable
/// name. A `const fn`, so a derive can compute it at compile time.
pub const fn type_id(name: &str) -> u64 {
    let bytes = name.as_bytes();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

/// Encodes `value` as one message frame appended to `out`: the header,
/// then postcard straight into `out` (no intermediate buffer).
///
/// The frame goes on the user lane, or on the large lane when its payload
/// is over the user cap. A payload over the large cap is refused with
/// [`EncodeError::TooLong`] as soon as encoding passes the cap (a huge
/// value is not serialized to the end first), and `out` is left as it was.
pub fn encode_message<T, B>(
    out: &mut B,
    type_id: u64,
    sender: u64,
    receiver: u64,
    value: &T,
    limits: &Limits,
) -> Result<Lane, EncodeError>
where
    T: Serialize + ?Sized,
    B: FrameBuf,
{
    encode_frame_with(
        out,
        &Header::message(type_id, sender, receiver),
        limits,
        |out, max| serialize_into(out, value, max),
    )
}

/// Encodes `value` into `out` with postcard, stopping with
/// [`EncodeError::TooLong`] once it would write more than `max` bytes.
pub fn serialize_into<T, B>(out: &mut B, value: &T, max: usize) -> Result<(), EncodeError>
where
    T: Serialize + ?Sized,
    B: FrameBuf,
{
    let start = out.len();
    let flavor = Capped {
        out,
        end: start.saturating_add(max),
        over: false,
    };
    match postcard::serialize_with_flavor::<T, _, bool>(value, flavor) {
        Ok(_) => Ok(()),
        Err(postcard::Error::SerializeBufferFull) => Err(EncodeError::TooLong {
            lane: Lane::Large,
            len: max + 1,
            cap: u32::try_from(max).unwrap_or(u32::MAX),
        }),
        Err(e) => Err(EncodeError::Serialize {
            reason: e.to_string(),
        }),
    }
}

/// A postcard output that appends to a [`FrameBuf`] and refuses to grow it
/// past `end`.
struct Capped<'a, B> {
    out: &'a mut B,
    end: usize,
    over: bool,
}

impl<B: FrameBuf> postcard::ser_flavors::Flavor for Capped<'_, B> {
    type Output = bool;

    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        if self.out.len() >= self.end {
            self.over = true;
            return Err(postcard::Error::SerializeBufferFull);
        }
        self.out.push(byte);
        Ok(())
    }

    fn try_extend(&mut self, bytes: &[u8]) -> postcard::Result<()> {
        if bytes.len() > self.end.saturating_sub(self.out.len()) {
            self.over = true;
            return Err(postcard::Error::SerializeBufferFull);
        }
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<bool> {
        Ok(self.over)
    }
}

/// Why one payload did not decode. It concerns that payload only.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The payload nests deeper than the limit.
    TooDeep {
        /// The limit, in levels.
        limit: usize,
    },
    /// The payload is not an encoding of the type (cut short, a bad tag,
    /// a bad UTF-8 string...).
    Invalid {
        /// What postcard said.
        reason: String,
    },
    /// The type decoded from the start of the payload and bytes were left
    /// over: the sender's type differs from ours under the same name.
    TrailingBytes {
        /// Bytes left.
        left: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::TooDeep { limit } => write!(
                f,
                "payload nests deeper than {limit} levels: refused to protect the stack (a \
                 legitimate message this deep needs a flatter type)"
            ),
            DecodeError::Invalid { reason } => write!(
                f,
                "payload is not a valid encoding of its type ({reason}): the sender's type \
                 differs from ours under the same name, or the payload is corrupt"
            ),
            DecodeError::TrailingBytes { left } => write!(
                f,
                "payload decoded with {left} bytes left over: the sender's type differs from \
                 ours under the same name"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Decodes a whole payload as a `T`, at most `max_depth` levels deep.
///
/// Never overflows the stack, whatever the input: past `max_depth` it
/// fails with [`DecodeError::TooDeep`].
pub fn decode_payload<T: DeserializeOwned>(
    payload: &[u8],
    max_depth: usize,
) -> Result<T, DecodeError> {
    let budget = Budget {
        left: Cell::new(max_depth),
        exceeded: Cell::new(false),
    };
    let mut de = postcard::Deserializer::from_bytes(payload);
    let result = T::deserialize(Limited {
        de: &mut de,
        budget: &budget,
    });
    match result {
        Ok(value) => match de.finalize() {
            Ok([]) => Ok(value),
            Ok(rest) => Err(DecodeError::TrailingBytes { left: rest.len() }),
            Err(e) => Err(DecodeError::Invalid {
                reason: e.to_string(),
            }),
        },
        Err(_) if budget.exceeded.get() => Err(DecodeError::TooDeep { limit: max_depth }),
        Err(e) => Err(DecodeError::Invalid {
            reason: e.to_string(),
        }),
    }
}

/// Why one message frame was not turned into a message. The transport
/// dead-letters the message with this reason and keeps the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageError {
    /// No type is registered under the frame's type id: the sender knows a
    /// type this node does not (an older build, or a hostile peer).
    UnknownType {
        /// The type id.
        type_id: u64,
    },
    /// The payload did not decode as the registered type.
    Decode {
        /// The registered type's stable name.
        name: &'static str,
        /// Why.
        error: DecodeError,
    },
    /// The frame is not a message frame.
    NotAMessage {
        /// Its kind.
        kind: Kind,
    },
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MessageError::UnknownType { type_id } => write!(
                f,
                "no message type is registered under type id {type_id:#018x}: register the \
                 type on this node under the name the sender uses; the message is \
                 dead-lettered"
            ),
            MessageError::Decode { name, error } => {
                write!(
                    f,
                    "message `{name}` did not decode: {error}; the message is dead-lettered"
                )
            }
            MessageError::NotAMessage { kind } => {
                write!(f, "a {kind} frame was given to the message decoder")
            }
        }
    }
}

impl std::error::Error for MessageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MessageError::Decode { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Why a type could not be registered.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegisterError {
    /// Another type is registered under the same type id: the same name
    /// twice, or (vanishingly rare) two names with the same hash.
    Taken {
        /// The name being registered.
        name: &'static str,
        /// The name already registered under that id.
        existing: &'static str,
        /// The id.
        type_id: u64,
    },
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::Taken {
                name,
                existing,
                type_id,
            } => write!(
                f,
                "cannot register `{name}`: type id {type_id:#018x} already belongs to \
                 `{existing}`; give one of them another stable name"
            ),
        }
    }
}

impl std::error::Error for RegisterError {}

type DecodeFn = fn(&[u8], usize) -> Result<Box<dyn Any + Send>, DecodeError>;

struct Entry {
    name: &'static str,
    decode: DecodeFn,
}

/// The message types this node decodes: an allow-list keyed by type id.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use troubadour_remote::codec::{encode_message, Registry};
/// use troubadour_remote::frame::{FrameDecoder, Limits};
///
/// #[derive(Serialize, Deserialize, Debug, PartialEq)]
/// struct Post { text: String }
///
/// let mut registry = Registry::new();
/// let id = registry.register::<Post>("chat::Post").unwrap();
///
/// let mut wire = Vec::new();
/// let post = Post { text: "hi".into() };
/// encode_message(&mut wire, id, 1, 2, &post, &Limits::default()).unwrap();
///
/// let mut decoder = FrameDecoder::new(Limits::default());
/// decoder.feed(&wire);
/// let frame = decoder.decode().unwrap().unwrap();
/// let message = registry.decode(&frame).unwrap();
/// assert_eq!(message.downcast_ref::<Post>(), Some(&post));
/// ```
pub struct Registry {
    types: HashMap<u64, Entry>,
    max_depth: usize,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<_> = self.types.values().map(|e| e.name).collect();
        names.sort_unstable();
        f.debug_struct("Registry")
            .field("types", &names)
            .field("max_depth", &self.max_depth)
            .finish()
    }
}

impl Registry {
    /// An empty registry decoding at most [`DEFAULT_MAX_DEPTH`] levels deep.
    pub fn new() -> Registry {
        Registry {
            types: HashMap::new(),
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }

    /// Sets the nesting limit of every decode.
    pub fn with_max_depth(mut self, levels: usize) -> Registry {
        self.max_depth = levels;
        self
    }

    /// Registers `T` under the stable `name`; returns its type id
    /// ([`type_id`]`(name)`). The name is the contract between nodes: keep
    /// it when the type is renamed or moved.
    pub fn register<T>(&mut self, name: &'static str) -> Result<u64, RegisterError>
    where
        T: DeserializeOwned + Send + 'static,
    {
        let id = type_id(name);
        if let Some(existing) = self.types.get(&id) {
            return Err(RegisterError::Taken {
                name,
                existing: existing.name,
                type_id: id,
            });
        }
        fn decode<T: DeserializeOwned + Send + 'static>(
            payload: &[u8],
            max_depth: usize,
        ) -> Result<Box<dyn Any + Send>, DecodeError> {
            decode_payload::<T>(payload, max_depth).map(|v| Box::new(v) as Box<dyn Any + Send>)
        }
        self.types.insert(
            id,
            Entry {
                name,
                decode: decode::<T>,
            },
        );
        Ok(id)
    }

    /// The stable name registered under `type_id`.
    pub fn name(&self, type_id: u64) -> Option<&'static str> {
        self.types.get(&type_id).map(|e| e.name)
    }

    /// Decodes a message frame into the registered type its type id names.
    pub fn decode(&self, frame: &Frame) -> Result<Box<dyn Any + Send>, MessageError> {
        if frame.header.kind != Kind::Message {
            return Err(MessageError::NotAMessage {
                kind: frame.header.kind,
            });
        }
        let type_id = frame.header.code;
        let entry = self
            .types
            .get(&type_id)
            .ok_or(MessageError::UnknownType { type_id })?;
        (entry.decode)(&frame.payload, self.max_depth).map_err(|error| MessageError::Decode {
            name: entry.name,
            error,
        })
    }
}

// ---------------------------------------------------------------------------
// The nesting limit: a deserializer, visitor and accessors that wrap
// postcard's and count levels. Every place where serde hands a nested value
// to a new `Deserialize` call goes through one of them, so no level escapes
// the count; the count is decremented on entering a level and given back on
// leaving it.

struct Budget {
    left: Cell<usize>,
    exceeded: Cell<bool>,
}

impl Budget {
    fn enter<E: de::Error>(&self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.exceeded.set(true);
                Err(E::custom("nesting too deep"))
            }
        }
    }

    fn leave(&self) {
        self.left.set(self.left.get() + 1);
    }

    fn within<T, E: de::Error>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        self.enter()?;
        let result = f();
        self.leave();
        result
    }
}

struct Limited<'b, D> {
    de: D,
    budget: &'b Budget,
}

struct LimitedVisitor<'b, V> {
    visitor: V,
    budget: &'b Budget,
}

struct LimitedSeed<'b, S> {
    seed: S,
    budget: &'b Budget,
}

struct LimitedAccess<'b, A> {
    access: A,
    budget: &'b Budget,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for LimitedSeed<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Limited {
            de,
            budget: self.budget,
        })
    }
}

/// Forwards `Deserializer` methods to the wrapped deserializer with the
/// visitor wrapped, so every level of nesting passes through the budget.
macro_rules! forward_deserialize {
    ($($method:ident $(($($arg:ident: $ty:ty),*))?)*) => {
        $(
            fn $method<V: Visitor<'de>>(
                self,
                $($($arg: $ty,)*)?
                visitor: V,
            ) -> Result<V::Value, D::Error> {
                self.de.$method($($($arg,)*)? LimitedVisitor { visitor, budget: self.budget })
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Limited<'_, D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    forward_deserialize! {
        deserialize_unit_struct(name: &'static str)
        deserialize_newtype_struct(name: &'static str)
        deserialize_tuple(len: usize)
        deserialize_tuple_struct(name: &'static str, len: usize)
        deserialize_struct(name: &'static str, fields: &'static [&'static str])
        deserialize_enum(name: &'static str, variants: &'static [&'static str])
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident: $ty:ty)*) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.visitor.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for LimitedVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    forward_visit! {
        visit_bool: bool visit_i8: i8 visit_i16: i16 visit_i32: i32 visit_i64: i64
        visit_i128: i128 visit_u8: u8 visit_u16: u16 visit_u32: u32 visit_u64: u64
        visit_u128: u128 visit_f32: f32 visit_f64: f64 visit_char: char
        visit_str: &str visit_borrowed_str: &'de str visit_string: String
        visit_bytes: &[u8] visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        let budget = self.budget;
        budget.within(|| self.visitor.visit_some(Limited { de, budget }))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        let budget = self.budget;
        budget.within(|| self.visitor.visit_newtype_struct(Limited { de, budget }))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, access: A) -> Result<V::Value, A::Error> {
        let budget = self.budget;
        budget.within(|| self.visitor.visit_seq(LimitedAccess { access, budget }))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, access: A) -> Result<V::Value, A::Error> {
        let budget = self.budget;
        budget.within(|| self.visitor.visit_map(LimitedAccess { access, budget }))
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, access: A) -> Result<V::Value, A::Error> {
        let budget = self.budget;
        budget.within(|| self.visitor.visit_enum(LimitedAccess { access, budget }))
    }
}

impl<'de, A: de::SeqAccess<'de>> de::SeqAccess<'de> for LimitedAccess<'_, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.access.next_element_seed(LimitedSeed {
            seed,
            budget: self.budget,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.access.size_hint()
    }
}

impl<'de, A: de::MapAccess<'de>> de::MapAccess<'de> for LimitedAccess<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.access.next_key_seed(LimitedSeed {
            seed,
            budget: self.budget,
        })
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.access.next_value_seed(LimitedSeed {
            seed,
            budget: self.budget,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.access.size_hint()
    }
}

impl<'de, 'b, A: de::EnumAccess<'de>> de::EnumAccess<'de> for LimitedAccess<'b, A> {
    type Error = A::Error;
    type Variant = LimitedAccess<'b, A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        let budget = self.budget;
        let (value, access) = self.access.variant_seed(LimitedSeed { seed, budget })?;
        Ok((value, LimitedAccess { access, budget }))
    }
}

impl<'de, A: de::VariantAccess<'de>> de::VariantAccess<'de> for LimitedAccess<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.access.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.access.newtype_variant_seed(LimitedSeed {
            seed,
            budget: self.budget,
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        let visitor = LimitedVisitor {
            visitor,
            budget: self.budget,
        };
        self.access.tuple_variant(len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let visitor = LimitedVisitor {
            visitor,
            budget: self.budget,
        };
        self.access.struct_variant(fields, visitor)
    }
}
