//! Where message nodes live: slabs a sending thread carves nodes out of.
//!
//! A message node is allocated by the sender's thread and freed by the
//! receiver's, usually on another core. A general-purpose allocator pays for
//! that on every message: the free is a cross-thread free (an atomic push on
//! the owning page's list), and the sender soon reuses the very blocks the
//! receiver just freed, so their cache lines bounce between the cores. Here a
//! thread bump-allocates nodes from its own 16 KiB slab, and the receiver only
//! counts: a worker adds up the nodes it frees from one slab (the common
//! case: a run of messages from one sender) and settles the count with the
//! slab in one atomic subtraction when it frees from another slab or runs
//! out of work. The last node out returns the slab to the allocator.
//! ARCHITECTURE.md has the measurements that chose this over mimalloc alone.
//!
//! Nodes too big or too strictly aligned for a slab, and nodes that may stay
//! put for long (stashed messages, whose slab would otherwise stay pinned),
//! come from mimalloc ([`Placement::Alone`]). Slabs themselves are mapped
//! from the system (`slab_source.rs`, decision 0032: mimalloc's 16 KiB
//! aligned blocks were twice their size in resident memory). Miri cannot
//! run mimalloc's C code nor map memory, so under Miri single nodes and
//! slabs come from the system allocator; loom builds and non-Unix targets
//! take slabs from mimalloc.
//!
//! A thread keeps its last slabs open (unsealed) after it moves on from
//! them ([`OPEN`]), so that, as a sender, it may look again at nodes it
//! carved there: its run at an actor's tail, to append to it
//! (`mailbox.rs`, invariant 7). Open slabs are never freed, so that memory
//! is in place even after the receiver freed the node; a worker seals them
//! before it sleeps, any thread when it exits.
//!
//! # Invariants (the slab count)
//!
//! A slab's `live` starts at `BIAS`, far above any number of nodes a slab can
//! hold. Every freed node subtracts one (possibly batched); the owning
//! thread, when it moves to a new slab (or exits), *seals* the slab by
//! subtracting `BIAS - carved`, where `carved` is how many nodes it handed
//! out. So after the seal `live == carved - freed`, and before it
//! `live == BIAS - freed > 0`, because `freed <= carved < BIAS`. Hence
//! `live` reaches zero exactly once, at the last of {seal, last free}, and
//! whoever's subtraction makes it zero frees the slab; nobody else can touch
//! it afterwards (every node was freed, and the owner has moved on). The
//! subtractions are `AcqRel`, as in `Arc`'s drop: every use of a node happens
//! before the slab is freed. `tests/loom_mailbox.rs` models seal against
//! concurrent frees.

use crate::primitives::sync::{AtomicUsize, Ordering};
use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ptr;

/// Where mimalloc-sized single nodes and slabs come from.
#[cfg(not(miri))]
const HEAP: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(miri)]
const HEAP: std::alloc::System = std::alloc::System;

/// Bytes per slab; slabs are aligned to their size so a node finds its
/// slab's header by masking its address.
pub(crate) const SLAB: usize = 16 * 1024;
/// The header has a cache line to itself: receivers write `live` while the
/// sender is still writing nodes into the same slab.
const HEADER: usize = 64;
/// Larger nodes are allocated alone (a slab holds at least 63 of these).
const MAX_IN_SLAB: usize = 256;
/// The largest run (`envelope.rs`), which is always carved from a slab (a
/// slab holds at least 15).
pub(crate) const MAX_RUN: usize = 1024;
const MAX_ALIGN: usize = 64;
/// Far above the number of nodes a slab can hold (see the invariants).
const BIAS: usize = usize::MAX / 2;
/// Slabs a thread keeps open (unsealed) after it moved on from them, so a
/// sender can still look at its own nodes there: a run it may append to,
/// or its last node to an actor, which shows that its messages pile up
/// there (`envelope.rs`). 64 slabs (1 MiB) hold a run for each of about
/// 2,000 receivers at once; a worker seals them when it goes to sleep.
const OPEN: usize = 64;

/// How a node is placed; fixed per message type, so the free side knows it
/// from the same type without storing a flag.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Placement {
    /// In the current thread's slab (the common case).
    Slab,
    /// An allocation of its own.
    Alone,
}

impl Placement {
    /// Slab if the layout fits one, else alone.
    #[inline]
    pub(crate) const fn for_layout(layout: Layout) -> Placement {
        if layout.size() <= MAX_IN_SLAB && layout.align() <= MAX_ALIGN {
            Placement::Slab
        } else {
            Placement::Alone
        }
    }
}

/// The count at the start of every slab.
#[repr(C, align(64))]
pub struct SlabCount {
    live: AtomicUsize,
}

impl SlabCount {
    /// A fresh slab's count (no node freed, not sealed).
    pub fn new() -> Self {
        SlabCount {
            live: AtomicUsize::new(BIAS),
        }
    }

    /// The owner is done carving: `carved` nodes were handed out. `true` if
    /// every one was already freed, and the caller must free the slab.
    #[inline]
    pub fn seal(&self, carved: usize) -> bool {
        self.release(BIAS - carved)
    }

    /// As [`seal`](Self::seal), also returning how many of the `carved`
    /// nodes were not freed yet.
    #[inline]
    fn seal_and_count(&self, carved: usize) -> (bool, usize) {
        let n = BIAS - carved;
        let before = self.live.fetch_sub(n, Ordering::AcqRel);
        (before == n, before - n)
    }

    /// `n` nodes were freed. `true` if this was the last use of the slab,
    /// and the caller must free it.
    #[inline]
    pub fn release(&self, n: usize) -> bool {
        self.live.fetch_sub(n, Ordering::AcqRel) == n
    }
}

impl Default for SlabCount {
    fn default() -> Self {
        Self::new()
    }
}

fn slab_layout() -> Layout {
    // SLAB is a power of two and non-zero.
    match Layout::from_size_align(SLAB, SLAB) {
        Ok(l) => l,
        Err(_) => unreachable!("slab size is a power of two"),
    }
}

/// A fresh slab with its count written.
fn new_slab() -> *mut SlabCount {
    let p = alloc_slab() as *mut SlabCount;
    if p.is_null() {
        std::alloc::handle_alloc_error(slab_layout());
    }
    // SAFETY: fresh memory, aligned for the header.
    unsafe { p.write(SlabCount::new()) };
    p
}

/// # Safety
/// `slab` came from [`new_slab`] and its count reached zero.
unsafe fn free_slab(slab: *mut SlabCount) {
    // SAFETY: a slab nobody uses any more (contract), allocated by
    // `new_slab` with this layout and its header written there.
    unsafe {
        ptr::drop_in_place(slab);
        dealloc_slab(slab as *mut u8);
    }
}

/// `SLAB` bytes aligned to `SLAB`, or null: from the slab source on Unix
/// (`slab_source.rs` says why not mimalloc), from `HEAP` elsewhere, under
/// Miri (which cannot map memory) and under loom.
#[cfg(all(unix, not(miri), not(loom)))]
fn alloc_slab() -> *mut u8 {
    super::slab_source::take()
}

/// # Safety
/// `slab` came from [`alloc_slab`] and nobody uses it any more.
#[cfg(all(unix, not(miri), not(loom)))]
unsafe fn dealloc_slab(slab: *mut u8) {
    // SAFETY: as this function's contract.
    unsafe { super::slab_source::give_back(slab) }
}

#[cfg(not(all(unix, not(miri), not(loom))))]
fn alloc_slab() -> *mut u8 {
    // SAFETY: the layout has a non-zero size.
    unsafe { GlobalAlloc::alloc(&HEAP, slab_layout()) }
}

/// # Safety
/// `slab` came from [`alloc_slab`] and nobody uses it any more.
#[cfg(not(all(unix, not(miri), not(loom))))]
unsafe fn dealloc_slab(slab: *mut u8) {
    // SAFETY: allocated by `alloc_slab` from `HEAP` with this layout.
    unsafe { GlobalAlloc::dealloc(&HEAP, slab, slab_layout()) }
}

/// # Safety
/// As for [`SlabCount::release`]; `slab` is live.
#[inline]
unsafe fn release(slab: *mut SlabCount, n: usize) {
    // SAFETY: `slab` is live (contract); if this release brought its count
    // to zero, nobody else uses it any more.
    unsafe {
        if (*slab).release(n) {
            free_slab(slab);
        }
    }
}

/// One thread's slab and its batch of frees not yet settled.
struct ThreadNodes {
    /// The slab being carved (null before the first node).
    slab: Cell<*mut SlabCount>,
    /// Offset of the next free byte in `slab`.
    next: Cell<usize>,
    /// Nodes handed out from `slab`.
    carved: Cell<usize>,
    /// Frees counted but not yet subtracted from `pending`'s count.
    pending: Cell<*mut SlabCount>,
    pending_n: Cell<usize>,
    /// Whether frees may wait for [`settle`] (set on worker threads, which
    /// settle whenever they run out of work); other threads settle at once.
    batching: Cell<bool>,
    /// Earlier slabs not sealed yet, with the nodes carved from each,
    /// placed by address ([`open_index`]); a slab whose place is taken is
    /// sealed then. Their memory stays in place (a slab is freed only
    /// once sealed), so this thread may read the nodes it carved there
    /// even after their receivers freed them.
    open: [Cell<(*mut SlabCount, usize)>; OPEN],
    /// How many of `open` hold a slab.
    open_n: Cell<usize>,
    /// Whether a slab this thread moves on from is kept open
    /// ([`keep_slabs_open`]).
    keep_open: Cell<bool>,
    /// Slabs left to seal before the next probe, once this thread saw a
    /// sign (0 before: a thread whose messages never piled up never
    /// looks).
    seals_to_probe: Cell<u32>,
    /// The addresses of slabs this thread sealed lately, placed by
    /// address as `open` is (a later one takes an earlier one's place),
    /// never followed: only compared, by [`carved_here_lately`].
    sealed: [Cell<usize>; OPEN],
}

/// A slab sealed with more than `PILED_UP_MUL / PILED_UP_DIV` of its nodes
/// still queued is a sign that the thread's messages pile up.
const PILED_UP_MUL: usize = 3;
const PILED_UP_DIV: usize = 4;

/// The looks at the tail a sign of messages piling up buys
/// ([`TAIL_LOOKS`]).
pub(crate) const LOOKS_PER_SIGN: u32 = 256;

/// The slabs a thread whose looks ran out seals between two probes: a
/// few thousand small messages.
pub(crate) const SEALS_PER_PROBE: u32 = 8;
/// The looks a probe buys.
const LOOKS_PER_PROBE: u32 = LOOKS_PER_SIGN / 16;

thread_local! {
    /// How many more of this thread's `tell`s look at the mailbox's tail
    /// for a run of theirs before they push (`envelope.rs`). A look loads
    /// a cache line other threads write, which pays only while this
    /// thread's messages pile up somewhere: a slab sealed while most of
    /// its nodes are still queued shows that. Looks that find nothing of
    /// this thread's there spend them. Kept apart from the slabs' state,
    /// which has a destructor, so that the check a `tell` makes is one
    /// load.
    pub(crate) static TAIL_LOOKS: Cell<u32> = const { Cell::new(0) };

    /// A node this thread carved in a slab it has not sealed, which it
    /// may read again without asking which slab it lies in: its last run
    /// (`envelope.rs`). Null if none; forgotten when its slab is sealed.
    static REMEMBERED: Cell<*mut u8> = const { Cell::new(ptr::null_mut()) };
    /// Whom the remembered node was sent to: its mailbox's address.
    static REMEMBERED_FOR: Cell<usize> = const { Cell::new(0) };
}

/// Remembers `p`, a node in a slab this thread carved it from and has not
/// sealed ([`in_open_slab`]), until that slab is sealed.
#[inline]
pub(crate) fn remember(p: *mut u8, to: usize) {
    debug_assert!(in_open_slab(p));
    REMEMBERED.with(|r| r.set(p));
    REMEMBERED_FOR.with(|r| r.set(to));
}

/// The node [`remember`]ed, null if none or if its slab was sealed since:
/// its memory is in place, as this thread wrote it or as its receiver
/// left it (a slab is freed only once sealed).
#[inline]
pub(crate) fn remembered_for(to: usize) -> *mut u8 {
    if REMEMBERED_FOR.with(Cell::get) == to {
        REMEMBERED.with(Cell::get)
    } else {
        ptr::null_mut()
    }
}

/// Forgets the remembered node if it lies in `slab`, which is being
/// sealed.
#[inline]
fn forget_if_in(slab: *mut SlabCount) {
    REMEMBERED.with(|r| {
        if r.get().map_addr(|a| a & !(SLAB - 1)) as *mut SlabCount == slab {
            r.set(ptr::null_mut());
        }
    });
}

/// Where an open slab is kept in [`ThreadNodes::open`].
#[inline]
fn open_index(slab: *mut SlabCount) -> usize {
    (slab.addr() / SLAB) % OPEN
}

impl ThreadNodes {
    const fn new() -> Self {
        ThreadNodes {
            slab: Cell::new(ptr::null_mut()),
            next: Cell::new(SLAB),
            carved: Cell::new(0),
            pending: Cell::new(ptr::null_mut()),
            pending_n: Cell::new(0),
            batching: Cell::new(false),
            open: [const { Cell::new((ptr::null_mut(), 0)) }; OPEN],
            open_n: Cell::new(0),
            keep_open: Cell::new(false),
            seals_to_probe: Cell::new(0),
            sealed: [const { Cell::new(0) }; OPEN],
        }
    }

    /// Whether `slab` is this thread's open slab or one of the last it
    /// sealed (which may be freed and reused by now).
    fn carved_lately(&self, slab: *mut SlabCount) -> bool {
        self.is_open(slab) || self.sealed[open_index(slab)].get() == slab.addr()
    }

    /// Whether `slab` is one of this thread's slabs not sealed yet.
    #[inline]
    fn is_open(&self, slab: *mut SlabCount) -> bool {
        !slab.is_null() && (slab == self.slab.get() || self.open[open_index(slab)].get().0 == slab)
    }

    /// Seals the earlier slabs kept open.
    fn seal_open(&self) {
        if self.open_n.replace(0) == 0 {
            return;
        }
        for place in &self.open {
            let (slab, carved) = place.replace((ptr::null_mut(), 0));
            if !slab.is_null() {
                self.note_sealed(slab);
                // SAFETY: an open slab is live until sealed; this is its
                // one seal.
                unsafe { seal(slab, carved) };
            }
        }
    }

    #[inline]
    fn alloc(&self, layout: Layout) -> *mut u8 {
        let start = (self.next.get() + layout.align() - 1) & !(layout.align() - 1);
        let end = start + layout.size();
        let slab = self.slab.get();
        // `next` is SLAB while there is no slab, so this fails then.
        if end <= SLAB {
            self.next.set(end);
            self.carved.set(self.carved.get() + 1);
            // SAFETY: `start..end` lies inside the slab, past the header.
            return unsafe { (slab as *mut u8).add(start) };
        }
        self.alloc_in_new_slab(layout)
    }

    #[cold]
    fn alloc_in_new_slab(&self, layout: Layout) -> *mut u8 {
        self.start_slab();
        let start = (HEADER + layout.align() - 1) & !(layout.align() - 1);
        self.next.set(start + layout.size());
        self.carved.set(1);
        // SAFETY: a node of at most MAX_RUN bytes fits after the header.
        unsafe { (self.slab.get() as *mut u8).add(start) }
    }

    /// Keeps the current slab, if any, open (while asked to, else seals
    /// it and every open one), and carves from a fresh one.
    fn start_slab(&self) {
        if self.keep_open.get() {
            let slab = self.slab.replace(ptr::null_mut());
            if !slab.is_null() {
                let place = &self.open[open_index(slab)];
                let (old, carved) = place.replace((slab, self.carved.get()));
                if old.is_null() {
                    self.open_n.set(self.open_n.get() + 1);
                } else {
                    self.note_sealed(old);
                    // SAFETY: an open slab is live until sealed; this is
                    // its one seal.
                    unsafe { seal(old, carved) };
                }
            }
        } else {
            self.seal_current();
            self.seal_open();
        }
        self.slab.set(new_slab());
        self.next.set(HEADER);
        self.carved.set(0);
    }

    /// Remembers the address of a slab about to be sealed, for
    /// [`carved_here_lately`].
    fn note_sealed(&self, slab: *mut SlabCount) {
        self.sealed[open_index(slab)].set(slab.addr());
    }

    /// A probe: a few looks, with the slabs kept open meanwhile, for a
    /// thread that once saw a sign and whose looks ran out
    /// [`SEALS_PER_PROBE`] slabs ago. Looks run out when the receiver
    /// takes a sender's runs as soon as they are pushed, which it may do
    /// only because the sender, pushing a node per message, became the
    /// slower of the two; then its slabs are sealed with few nodes queued
    /// and no sign comes again. A probe finds out whether runs would grow
    /// (`envelope.rs`, decision 0060).
    fn count_down_to_probe(&self) {
        let left = self.seals_to_probe.get();
        if left == 0 || TAIL_LOOKS.with(Cell::get) != 0 {
            return;
        }
        if left > 1 {
            self.seals_to_probe.set(left - 1);
        } else {
            TAIL_LOOKS.with(|l| l.set(LOOKS_PER_PROBE));
            self.keep_open.set(true);
            self.seals_to_probe.set(SEALS_PER_PROBE);
        }
    }

    fn seal_current(&self) {
        let slab = self.slab.replace(ptr::null_mut());
        if !slab.is_null() {
            self.note_sealed(slab);
            forget_if_in(slab);
            let carved = self.carved.get();
            // This thread's own frees of the slab's nodes, not subtracted.
            let pending = if self.pending.get() == slab {
                self.pending_n.get()
            } else {
                0
            };
            // SAFETY: the slab is live until sealed; this is its one seal.
            let (last, live) = unsafe { (*slab).seal_and_count(carved) };
            if last {
                // SAFETY: every node of it was freed: nobody uses it.
                unsafe { free_slab(slab) };
            } else if (live - pending.min(live)) * PILED_UP_DIV > carved * PILED_UP_MUL {
                // Most of what this thread carved here still waits in
                // mailboxes: its messages pile up somewhere. Its next
                // tells look for a run of theirs at the tail
                // (`envelope.rs`), and its slabs stay open meanwhile.
                TAIL_LOOKS.with(|l| l.set(LOOKS_PER_SIGN));
                self.keep_open.set(true);
                self.seals_to_probe.set(SEALS_PER_PROBE);
            } else {
                self.count_down_to_probe();
            }
        }
        self.next.set(SLAB);
        self.carved.set(0);
    }

    #[inline]
    fn free(&self, slab: *mut SlabCount) {
        if !self.batching.get() {
            // SAFETY: the node being freed keeps its slab live.
            unsafe { release(slab, 1) };
            return;
        }
        if self.pending.get() == slab {
            self.pending_n.set(self.pending_n.get() + 1);
            return;
        }
        self.settle();
        self.pending.set(slab);
        self.pending_n.set(1);
    }

    #[inline]
    fn settle(&self) {
        let slab = self.pending.replace(ptr::null_mut());
        if !slab.is_null() {
            // SAFETY: the counted nodes are not subtracted yet, so the slab
            // is live.
            unsafe { release(slab, self.pending_n.replace(0)) };
        }
    }
}

impl Drop for ThreadNodes {
    fn drop(&mut self) {
        self.settle();
        self.seal_current();
        self.seal_open();
    }
}

/// Seals `slab`, carved `carved` times, freeing it if that was its last use.
///
/// # Safety
/// `slab` is live and not sealed yet; this is its one seal.
unsafe fn seal(slab: *mut SlabCount, carved: usize) {
    forget_if_in(slab);
    // SAFETY: contract.
    unsafe {
        if (*slab).seal(carved) {
            free_slab(slab);
        }
    }
}

thread_local! {
    static NODES: ThreadNodes = const { ThreadNodes::new() };
}

/// Allocates a node of `layout` (non-zero size) placed as `placement`.
#[inline]
pub(crate) fn alloc(layout: Layout, placement: Placement) -> *mut u8 {
    if placement == Placement::Alone {
        // SAFETY: node layouts have a non-zero size.
        let p = unsafe { GlobalAlloc::alloc(&HEAP, layout) };
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        return p;
    }
    NODES
        .try_with(|t| t.alloc(layout))
        // The thread is exiting and its slab is gone: a slab of its own,
        // sealed at once, for this one node.
        .unwrap_or_else(|_| {
            // Dropping `local` seals the slab.
            ThreadNodes::new().alloc(layout)
        })
}

/// Frees a node from [`alloc`].
///
/// # Safety
/// `p` came from [`alloc`] with the same `layout` and `placement`, and its
/// contents were moved out or dropped.
#[inline]
pub(crate) unsafe fn free(p: *mut u8, layout: Layout, placement: Placement) {
    if placement == Placement::Alone {
        // SAFETY: allocated alone from `HEAP` with this layout (contract).
        unsafe { GlobalAlloc::dealloc(&HEAP, p, layout) };
        return;
    }
    let slab = p.map_addr(|a| a & !(SLAB - 1)) as *mut SlabCount;
    if NODES.try_with(|t| t.free(slab)).is_err() {
        // SAFETY: the node was carved from this slab (contract), whose
        // count includes it, so the slab is still live.
        unsafe { release(slab, 1) };
    }
}

/// Settles this thread's batched frees. Workers call it whenever they run
/// out of work, so a count waiting in a thread keeps at most one slab alive,
/// and only while that worker is busy.
#[inline]
pub(crate) fn settle() {
    let _ = NODES.try_with(|t| t.settle());
}

/// Gives this thread its first slab now; for threads that will run actor
/// turns, when they start. A thread's first slab is its first touch of
/// fresh memory, which the kernel zeroes: on the 2-core VM, when slabs came
/// from mimalloc and its 2 MiB huge pages, `perf record` of workload 8 at
/// its quick size put 20 % of the workers' time in the kernel's
/// `clear_page_erms` under the first slab, three times the time of the work
/// itself. Here that cost (smaller on 4 KiB pages, decision 0032) is paid
/// while the system starts, not by the first message a worker sends.
pub(crate) fn prepare_this_thread() {
    let _ = NODES.try_with(|t| {
        if t.slab.get().is_null() {
            t.start_slab();
        }
    });
}

/// Seals the slabs this thread kept open, and hands the memory of freed
/// slabs beyond what is kept for reuse back to the system
/// (`slab_source.rs`); for a worker about to sleep.
#[inline]
pub(crate) fn purge_idle_slabs() {
    let _ = NODES.try_with(|t| t.seal_open());
    #[cfg(all(unix, not(miri), not(loom)))]
    super::slab_source::purge_excess();
}

/// Whether the slabs this thread moves on from stay open (they are sealed
/// once it is off again and moves on once more). Open slabs cost memory
/// and cache: a thread that keeps none reuses the same few slabs, hot in
/// its cache, while one that keeps 64 open cycles through a megabyte
/// (ring hops took 1.16x as long with every slab kept open). So only a
/// thread whose messages pile up somewhere keeps them (`envelope.rs`).
#[inline]
pub(crate) fn keep_slabs_open(on: bool) {
    let _ = NODES.try_with(|t| t.keep_open.set(on));
}

/// Whether `p` lies in a slab this thread carved from lately: one still
/// open, or one of the last few it sealed. A hint only, for a sender that
/// wonders whether its messages pile up (`envelope.rs`): a sealed slab may
/// have been freed and reused by another thread since, so nothing at `p`
/// may be read on the strength of it.
#[inline]
pub(crate) fn carved_here_lately(p: *const u8) -> bool {
    let slab = p.map_addr(|a| a & !(SLAB - 1)) as *mut SlabCount;
    NODES.try_with(|t| t.carved_lately(slab)).unwrap_or(false)
}

/// Whether `p` lies in a slab this thread carved it from and has not
/// sealed: memory that stays in place, written by this thread, even if
/// the node there was freed (its slab is freed only once sealed).
#[inline]
pub(crate) fn in_open_slab(p: *const u8) -> bool {
    let slab = p.map_addr(|a| a & !(SLAB - 1)) as *mut SlabCount;
    NODES.try_with(|t| t.is_open(slab)).unwrap_or(false)
}

/// Lets this thread batch its frees until [`settle`]; for threads that run
/// actor turns.
pub(crate) fn batch_frees_on_this_thread() {
    let _ = NODES.try_with(|t| t.batching.set(true));
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn nodes_fill_slabs_and_slabs_are_returned() {
        let layout = Layout::new::<[u64; 4]>();
        let per_slab = (SLAB - HEADER) / layout.size();
        let local = ThreadNodes::new();
        local.batching.set(true);
        let nodes: Vec<*mut u8> = (0..per_slab * 3 + 1).map(|_| local.alloc(layout)).collect();
        let slab_of = |p: *mut u8| p.map_addr(|a| a & !(SLAB - 1)) as *mut SlabCount;
        // Bump allocation: one slab per `per_slab` nodes, distinct, aligned.
        assert_eq!(slab_of(nodes[0]), slab_of(nodes[per_slab - 1]));
        assert_ne!(slab_of(nodes[0]), slab_of(nodes[per_slab]));
        for w in nodes.windows(2) {
            assert_ne!(w[0], w[1]);
        }
        for &p in &nodes {
            assert_eq!(p as usize % layout.align(), 0);
            assert!(p as usize - slab_of(p) as usize >= HEADER);
        }
        // The first three slabs are sealed; freeing their nodes frees them
        // (Miri's leak check would catch a slab kept).
        for &p in &nodes {
            local.free(slab_of(p));
        }
        local.settle();
        local.seal_current();
    }

    #[test]
    fn frees_on_another_thread_release_the_slab() {
        let layout = Layout::new::<[u64; 2]>();
        let nodes: Vec<usize> = (0..5_000)
            .map(|_| alloc(layout, Placement::Slab) as usize)
            .collect();
        std::thread::spawn(move || {
            batch_frees_on_this_thread();
            for p in nodes {
                // SAFETY: each came from `alloc` with this layout and
                // placement and is freed once; it holds nothing to drop.
                unsafe { free(p as *mut u8, layout, Placement::Slab) };
            }
            settle();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn big_and_overaligned_nodes_are_alone() {
        assert_eq!(
            Placement::for_layout(Layout::new::<[u8; 1024]>()),
            Placement::Alone
        );
        #[repr(align(128))]
        struct Wide(#[allow(dead_code)] u8);
        assert_eq!(
            Placement::for_layout(Layout::new::<Wide>()),
            Placement::Alone
        );
        assert_eq!(
            Placement::for_layout(Layout::new::<[u64; 8]>()),
            Placement::Slab
        );
    }
}
