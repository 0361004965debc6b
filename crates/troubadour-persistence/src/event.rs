//! Events and snapshots as the store keeps them: bytes with the type name,
//! schema version and codec they were written with, so that a type can
//! evolve and old rows still decode (through [`Event::upcast`]).

use crate::error::DecodeError;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The codec every row written by this version carries.
pub const POSTCARD: &str = "postcard";

/// An event of an event-sourced actor: a serde type stored under a stable
/// name and a schema version.
///
/// The name, not the Rust path, identifies the type in the journal, so a
/// type may be renamed or moved without touching stored rows. When its
/// shape changes incompatibly, raise [`VERSION`](Event::VERSION) and
/// decode the older rows in [`upcast`](Event::upcast).
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use troubadour_persistence::{DecodeError, Event, StoredEvent};
///
/// // Version 1 had only `cents`.
/// #[derive(Deserialize)]
/// struct DepositedV1 { cents: u64 }
///
/// #[derive(Serialize, Deserialize, Debug, PartialEq)]
/// struct Deposited { cents: u64, note: String }
///
/// impl Event for Deposited {
///     const TYPE: &'static str = "bank.Deposited";
///     const VERSION: u32 = 2;
///     fn upcast(stored: &StoredEvent) -> Result<Self, DecodeError> {
///         match stored.version {
///             1 => {
///                 let old: DepositedV1 = stored.decode_as()?;
///                 Ok(Deposited { cents: old.cents, note: String::new() })
///             }
///             _ => Err(stored.unknown_version()),
///         }
///     }
/// }
/// ```
pub trait Event: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The stable name rows of this type are stored under.
    const TYPE: &'static str;
    /// The schema version this build writes (and decodes directly).
    const VERSION: u32 = 1;

    /// Decodes a row written under another version (or another type name,
    /// after a rename): decode the old shape with
    /// [`StoredEvent::decode_as`] and convert it. The default refuses.
    fn upcast(stored: &StoredEvent) -> Result<Self, DecodeError> {
        Err(stored.unknown_version())
    }
}

/// An event or snapshot as stored: what it is, how it was encoded, and
/// the bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredEvent {
    /// The [`Event::TYPE`] (or snapshot type) it was written as.
    pub type_name: String,
    /// The schema version it was written with.
    pub version: u32,
    /// The codec of `payload` ([`POSTCARD`]).
    pub codec: String,
    /// The encoded value.
    pub payload: Vec<u8>,
}

impl StoredEvent {
    /// Encodes `event` under its type's current name and version.
    pub fn encode<E: Event>(event: &E) -> Result<StoredEvent, postcard::Error> {
        Self::encode_with(E::TYPE, E::VERSION, event)
    }

    /// Encodes `value` under the given name and version: for writing
    /// rows as an older build would (migrations, tests of upcasting).
    pub fn encode_with<T: Serialize>(
        type_name: &str,
        version: u32,
        value: &T,
    ) -> Result<StoredEvent, postcard::Error> {
        Ok(StoredEvent {
            type_name: type_name.to_string(),
            version,
            codec: POSTCARD.to_string(),
            payload: postcard::to_allocvec(value)?,
        })
    }

    /// Decodes this row as `E`: directly when it was written under `E`'s
    /// current name and version, through [`Event::upcast`] otherwise.
    pub fn decode<E: Event>(&self) -> Result<E, DecodeError> {
        if self.type_name == E::TYPE && self.version == E::VERSION {
            self.decode_as()
        } else {
            E::upcast(self)
        }
    }

    /// Decodes the payload as `T`, whatever the row's name and version say:
    /// for [`Event::upcast`], which knows the old shape.
    pub fn decode_as<T: DeserializeOwned>(&self) -> Result<T, DecodeError> {
        if self.codec != POSTCARD {
            return Err(DecodeError::UnknownCodec {
                type_name: self.type_name.clone(),
                codec: self.codec.clone(),
            });
        }
        postcard::from_bytes(&self.payload).map_err(|e| DecodeError::Malformed {
            type_name: self.type_name.clone(),
            version: self.version,
            reason: e.to_string(),
        })
    }

    /// The error for a row whose name or version this build cannot decode.
    pub fn unknown_version(&self) -> DecodeError {
        DecodeError::UnknownVersion {
            type_name: self.type_name.clone(),
            version: self.version,
        }
    }
}
