//! Node identity: which system (of possibly several in one process, or on
//! several machines later) an actor belongs to, and the process-wide table
//! that lets an [`ActorId`](crate::ActorId) name its node in a few bits.

use crate::api::error::BuildError;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Bits of an [`ActorId`](crate::ActorId) that hold the serial; the bits
/// above hold the node's index in [`NODES`].
///
/// Why one `u64` rather than a `u32` index next to a `u64` serial: the id is
/// stored in every actor cell (and in the scheduler's current-actor word),
/// and a 16-byte id would grow the cell past its 72-byte budget. The split
/// leaves 2^20 (about a million) system starts per process and 2^44 (about
/// 17.6 million million) spawns per system: a million spawns a second for
/// half a year.
pub(crate) const SERIAL_BITS: u32 = 44;
/// The largest serial one system hands out.
pub(crate) const MAX_SERIAL: u64 = (1 << SERIAL_BITS) - 1;
/// How many system starts one process can hold.
const MAX_NODES: usize = 1 << (64 - SERIAL_BITS);

/// Every node this process has started, by index. Entries are never
/// removed: an `ActorId` can outlive its system and must keep naming it
/// (and must never come to name a later one). Each costs a few dozen bytes.
/// The remote layer is to enter other processes' nodes here too, so their
/// actors' ids are the same one word and never equal a local one.
static NODES: RwLock<Vec<NodeId>> = RwLock::new(Vec::new());

/// The identity of one actor system start: its name, its network address
/// once it has one, and an incarnation that is new on every start (Erlang's
/// node name and "creation").
///
/// Cheap to clone (one reference count). Two `NodeId`s are equal when name,
/// address and incarnation all are, so a system restarted under the same
/// name is a different node, and actors of the old one are never confused
/// with the new one's.
///
/// ```
/// use troubadour::ActorSystem;
/// let system = ActorSystem::builder().name("orders").manual_scheduling().build();
/// let node = system.node();
/// assert_eq!(node.name(), "orders");
/// assert_eq!(node.address(), None);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct NodeId(Arc<NodeInner>);

#[derive(PartialEq, Eq, Hash)]
struct NodeInner {
    name: Box<str>,
    address: Option<SocketAddr>,
    incarnation: u64,
    /// Its place in [`NODES`], the high bits of its actors' ids.
    index: u32,
}

impl NodeId {
    /// The system's name ([`ActorSystemBuilder::name`](crate::ActorSystemBuilder::name)).
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Where the system can be reached over the network; `None` for a
    /// system that is not networked (today, every system).
    pub fn address(&self) -> Option<SocketAddr> {
        self.0.address
    }

    /// A number new on every system start, with overwhelming probability
    /// distinct from every other start in this or any other process, even
    /// under the same name.
    pub fn incarnation(&self) -> u64 {
        self.0.incarnation
    }

    /// A fresh identity for a system starting now, and its index in the
    /// process-wide table.
    /// `incarnation`: chosen by a simulation that must replay; `None`
    /// everywhere else (a fresh random one).
    pub(crate) fn start(name: &str, incarnation: Option<u64>) -> Result<(NodeId, u32), BuildError> {
        let mut nodes = NODES.write().unwrap_or_else(|p| p.into_inner());
        if nodes.len() >= MAX_NODES {
            return Err(BuildError::TooManySystems { limit: MAX_NODES });
        }
        let index = nodes.len() as u32;
        let node = NodeId(Arc::new(NodeInner {
            name: name.into(),
            address: None,
            incarnation: incarnation.unwrap_or_else(fresh_incarnation),
            index,
        }));
        nodes.push(node.clone());
        Ok((node, index))
    }

    /// The identity of a node in another process, as its handshake told
    /// it: for extension crates (the remote layer), which enter each peer
    /// node here once so that its actors' ids are one word like local ones
    /// and never equal a local id. The same `name` and `incarnation` give
    /// the same `NodeId` (the address of the first call is kept); a node
    /// that restarts has a new incarnation and so is a new node.
    ///
    /// ```
    /// use troubadour::{ActorId, NodeId};
    /// let a = NodeId::remote("orders", Some("127.0.0.1:7000".parse()?), 42)?;
    /// let b = NodeId::remote("orders", None, 42)?;
    /// assert_eq!(a, b);
    /// assert_ne!(a, NodeId::remote("orders", None, 43)?);
    /// let id = ActorId::on(&a, 7).expect("7 is a valid serial");
    /// assert_eq!((id.node(), id.serial()), (a, 7));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`BuildError::InvalidName`] for a name a system could not have, and
    /// [`BuildError::TooManySystems`] when the process-wide table is full.
    pub fn remote(
        name: &str,
        address: Option<SocketAddr>,
        incarnation: u64,
    ) -> Result<NodeId, BuildError> {
        validate_name(name)?;
        {
            let nodes = NODES.read().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = find(&nodes, name, incarnation) {
                return Ok(n);
            }
        }
        let mut nodes = NODES.write().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = find(&nodes, name, incarnation) {
            return Ok(n);
        }
        if nodes.len() >= MAX_NODES {
            return Err(BuildError::TooManySystems { limit: MAX_NODES });
        }
        let index = nodes.len() as u32;
        let node = NodeId(Arc::new(NodeInner {
            name: name.into(),
            address,
            incarnation,
            index,
        }));
        nodes.push(node.clone());
        Ok(node)
    }

    /// Its index in the process-wide table.
    pub(crate) fn index(&self) -> u32 {
        self.0.index
    }

    /// The node at `index` in the process-wide table.
    pub(crate) fn at(index: u32) -> NodeId {
        let nodes = NODES.read().unwrap_or_else(|p| p.into_inner());
        // Ids are only made by systems, after their node was pushed.
        nodes[index as usize].clone()
    }
}

/// A node already in the table. Searched from the newest: peers are
/// entered as they connect, and a process holds few of them.
fn find(nodes: &[NodeId], name: &str, incarnation: u64) -> Option<NodeId> {
    nodes
        .iter()
        .rev()
        .find(|n| n.0.incarnation == incarnation && &*n.0.name == name)
        .cloned()
}

/// Time, process id and a process-wide counter, hashed with a randomly
/// keyed hasher: starts in one process differ by the counter, starts in two
/// processes by the keys (and the pid and time), without a new dependency.
fn fresh_incarnation() -> u64 {
    static STARTS: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    STARTS.fetch_add(1, Ordering::Relaxed).hash(&mut h);
    std::process::id().hash(&mut h);
    // Miri's isolation refuses the wall clock (and aborts rather than
    // erroring); the keyed hasher and the counter keep starts apart there.
    #[cfg(not(miri))]
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        t.as_nanos().hash(&mut h);
    }
    h.finish()
}

/// Checks a system name: non-empty, ASCII letters, digits, `-` and `_`,
/// not starting with `-` or `_` (Akka's rule for actor system names).
pub(crate) fn validate_name(name: &str) -> Result<(), BuildError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.starts_with(['-', '_']) {
        Some("it starts with '-' or '_'")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        Some("it has a character other than ASCII letters, digits, '-' and '_'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(BuildError::InvalidName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.name)?;
        if let Some(addr) = self.0.address {
            write!(f, "@{addr}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}#{:016x}", self.0.incarnation)
    }
}
