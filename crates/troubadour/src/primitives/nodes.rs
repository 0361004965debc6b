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
const MAX_ALIGN: usize = 64;
/// Far above the number of nodes a slab can hold (see the invariants).
const BIAS: usize = usize::MAX / 2;

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
        // SAFETY: a node of at most MAX_IN_SLAB bytes fits after the header.
        unsafe { (self.slab.get() as *mut u8).add(start) }
    }

    /// Seals the current slab, if any, and carves from a fresh one.
    fn start_slab(&self) {
        self.seal_current();
        self.slab.set(new_slab());
        self.next.set(HEADER);
    }

    fn seal_current(&self) {
        let slab = self.slab.replace(ptr::null_mut());
        if !slab.is_null() {
            // SAFETY: the slab is live until sealed; this is its one seal.
            unsafe {
                if (*slab).seal(self.carved.get()) {
                    free_slab(slab);
                }
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

/// Hands the memory of freed slabs beyond what is kept for reuse back to
/// the system (`slab_source.rs`); for a worker about to sleep.
#[inline]
pub(crate) fn purge_idle_slabs() {
    #[cfg(all(unix, not(miri), not(loom)))]
    super::slab_source::purge_excess();
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
