//! Where message slabs come from: regions mapped from the operating system,
//! carved into slabs, and a pool of freed slabs for reuse.
//!
//! A slab must be aligned to its size (a node finds its slab's count by
//! masking its address, `nodes.rs`). Asked for 16 KiB aligned to 16 KiB,
//! mimalloc hands out a 32 KiB block and, with the transparent huge pages it
//! requests, the whole block is resident: measured on the 2-core VM
//! (2026-11-26, 400 MB of slabs written), 2.01 bytes resident per byte
//! used, and a first run that took 1.8 s where the same bytes unaligned
//! took 0.09 s. The backlog workload showed it as 80 bytes resident per
//! queued 40-byte node. A region mapped here is aligned once (map a slab
//! more than needed and unmap the ends), and only the pages a slab touches
//! become resident: 1.00 byte per byte used, 0.16 s for the same 400 MB on
//! 4 KiB pages (decision 0032).
//!
//! Freed slabs go back to the pool, most recently freed first out (its
//! lines are likeliest in cache). Freed slabs beyond [`KEEP`] are handed
//! back to the system (`madvise(MADV_DONTNEED)`, runs of neighbours in one
//! call) by [`purge_excess`], which a worker calls when it is about to
//! sleep, and stay in the pool as address space only: once the workers
//! idle, a backlog that drained leaves at most `KEEP` slabs resident, and a
//! slab taken again is fresh zeroed pages. Purging as slabs came back cost
//! the backlog's drain a third more time (the kernel freeing 100,000 pages
//! while the receivers ran); at sleep it costs no turn anything.
//!
//! Every slab this module hands out is `SLAB` bytes, aligned to `SLAB`,
//! readable and writable, and used by nobody else until it comes back
//! through [`give_back`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::nodes::SLAB;

/// Bytes mapped at once: 256 slabs.
const REGION: usize = 4 << 20;
/// Freed slabs kept resident for reuse (16 MiB).
const KEEP: usize = 1024;

/// How many freed slabs are resident, read without the lock.
static WARM: AtomicUsize = AtomicUsize::new(0);

struct Pool {
    /// Freed slabs whose pages are still resident, oldest first.
    warm: Vec<usize>,
    /// Freed slabs whose pages were handed back.
    cold: Vec<usize>,
    /// The part of the last region not carved yet: `next..end`.
    next: usize,
    end: usize,
}

impl Pool {
    const fn new() -> Pool {
        Pool {
            warm: Vec::new(),
            cold: Vec::new(),
            next: 0,
            end: 0,
        }
    }
}

/// The process's slabs.
static POOL: Mutex<Pool> = Mutex::new(Pool::new());

fn lock(pool: &Mutex<Pool>) -> std::sync::MutexGuard<'_, Pool> {
    // The pool's invariants hold between statements, so a panic elsewhere
    // while it was locked leaves it usable.
    pool.lock().unwrap_or_else(|p| p.into_inner())
}

/// Freed slabs a thread keeps for its own next slabs, before the pool.
const LOCAL_KEEP: usize = 4;

/// A thread's own few freed slabs: a slab freed here (its last node read
/// by this thread) is this thread's next slab, with no lock and its lines
/// likely still in this core's cache. Through the shared pool alone, every
/// slab took the lock twice and often moved to the other core: pingpong
/// ran 1.37× slower than on mimalloc's thread-local free lists (decision
/// 0032).
struct LocalSlabs(std::cell::RefCell<Vec<usize>>);

impl Drop for LocalSlabs {
    fn drop(&mut self) {
        // The thread is exiting: its slabs go to the pool.
        let slabs = std::mem::take(self.0.get_mut());
        if !slabs.is_empty() {
            let mut pool = lock(&POOL);
            pool.warm.extend(slabs);
            WARM.store(pool.warm.len(), Ordering::Relaxed);
        }
    }
}

thread_local! {
    static LOCAL: LocalSlabs = const { LocalSlabs(std::cell::RefCell::new(Vec::new())) };
}

/// A slab: `SLAB` bytes aligned to `SLAB`, or null if the system has no
/// memory to map.
pub(crate) fn take() -> *mut u8 {
    let local = LOCAL
        .try_with(|l| l.0.try_borrow_mut().ok().and_then(|mut l| l.pop()))
        .ok()
        .flatten();
    match local {
        Some(slab) => slab as *mut u8,
        None => take_from(&POOL),
    }
}

/// Returns a slab from [`take`] to this thread's few, or to the pool.
///
/// # Safety
/// `slab` came from [`take`], is given back once, and nobody uses it any
/// more.
pub(crate) unsafe fn give_back(slab: *mut u8) {
    let kept = LOCAL
        .try_with(|l| match l.0.try_borrow_mut() {
            Ok(mut l) if l.len() < LOCAL_KEEP => {
                l.push(slab as usize);
                true
            }
            _ => false,
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: as this function's contract.
        unsafe { give_back_to(&POOL, slab) }
    }
}

fn take_from(pool: &Mutex<Pool>) -> *mut u8 {
    let mut pool = lock(pool);
    if let Some(slab) = pool.warm.pop() {
        WARM.store(pool.warm.len(), Ordering::Relaxed);
        return slab as *mut u8;
    }
    if let Some(slab) = pool.cold.pop() {
        return slab as *mut u8;
    }
    if pool.next == pool.end {
        let Some(region) = map_region() else {
            return std::ptr::null_mut();
        };
        pool.next = region;
        pool.end = region + REGION;
    }
    let slab = pool.next;
    pool.next += SLAB;
    slab as *mut u8
}

/// # Safety
/// `slab` came from [`take_from`] of the same pool, is given back once, and
/// nobody uses it any more.
unsafe fn give_back_to(pool: &Mutex<Pool>, slab: *mut u8) {
    let mut pool = lock(pool);
    pool.warm.push(slab as usize);
    WARM.store(pool.warm.len(), Ordering::Relaxed);
}

/// Hands the pages of freed slabs beyond [`KEEP`] back to the system; for a
/// worker about to sleep. One relaxed load when there is nothing to do.
pub(crate) fn purge_excess() {
    if WARM.load(Ordering::Relaxed) > KEEP {
        purge_from(&POOL);
    }
}

fn purge_from(pool: &Mutex<Pool>) {
    let mut purge = {
        let mut pool = lock(pool);
        let excess = pool.warm.len().saturating_sub(KEEP);
        // The oldest: the least likely to be in cache.
        let purge: Vec<usize> = pool.warm.drain(..excess).collect();
        WARM.store(pool.warm.len(), Ordering::Relaxed);
        purge
    };
    // Outside the lock: the system calls take microseconds each, and these
    // slabs are in no list meanwhile, so nobody else can take them.
    purge.sort_unstable();
    let mut start = 0;
    while start < purge.len() {
        let mut end = start + 1;
        while end < purge.len() && purge[end] == purge[end - 1] + SLAB {
            end += 1;
        }
        // SAFETY: a run of whole slabs from `take`, which nobody uses
        // (they were given back); their mappings are private and
        // anonymous, so after this they read as zeros and stay mapped.
        unsafe {
            libc::madvise(
                purge[start] as *mut libc::c_void,
                (end - start) * SLAB,
                libc::MADV_DONTNEED,
            );
        }
        start = end;
    }
    lock(pool).cold.extend(purge);
}

/// Maps `REGION` bytes aligned to `SLAB`.
fn map_region() -> Option<usize> {
    let len = REGION + SLAB;
    // SAFETY: a fresh private anonymous mapping; no existing memory is
    // affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let p = p as usize;
    let start = (p + SLAB - 1) & !(SLAB - 1);
    let (head, tail) = (start - p, p + len - (start + REGION));
    // SAFETY: both ranges lie in the mapping just made and outside the
    // aligned region kept; page-aligned since SLAB is a multiple of the
    // page size.
    unsafe {
        if head > 0 {
            libc::munmap(p as *mut libc::c_void, head);
        }
        if tail > 0 {
            libc::munmap((start + REGION) as *mut libc::c_void, tail);
        }
    }
    Some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slabs_are_aligned_distinct_and_reused_after_purging() {
        // More than `KEEP`, so a purge has something to hand back.
        // A pool of the test's own: other tests take and give back slabs
        // of the process's pool meanwhile.
        let pool = Mutex::new(Pool::new());
        let n = KEEP + 512;
        let slabs: Vec<*mut u8> = (0..n).map(|_| take_from(&pool)).collect();
        let mut seen = std::collections::HashSet::new();
        for &s in &slabs {
            assert!(!s.is_null());
            assert_eq!(s as usize % SLAB, 0);
            assert!(seen.insert(s as usize), "a slab handed out twice");
            // SAFETY: a slab of our own, SLAB bytes writable.
            unsafe {
                s.write(7);
                s.add(SLAB - 1).write(7);
            }
        }
        for &s in &slabs {
            // SAFETY: from `take`, once, no longer used.
            unsafe { give_back_to(&pool, s) };
        }
        purge_from(&pool);
        // Every slab comes back out, purged ones reading as zeros.
        let again: Vec<*mut u8> = (0..n).map(|_| take_from(&pool)).collect();
        let again_set: std::collections::HashSet<usize> =
            again.iter().map(|&s| s as usize).collect();
        assert_eq!(
            again_set, seen,
            "the pool handed out other slabs than it got back"
        );
        for &s in &again {
            // SAFETY: as above.
            let (first, last) = unsafe { (s.read(), s.add(SLAB - 1).read()) };
            assert!(first == 7 || first == 0);
            assert_eq!(first, last, "a slab half purged");
        }
        let purged = again
            .iter()
            // SAFETY: as above.
            .filter(|&&s| unsafe { s.read() } == 0)
            .count();
        assert_eq!(purged, n - KEEP, "the slabs beyond KEEP are handed back");
        for &s in &again {
            // SAFETY: as above.
            unsafe { give_back_to(&pool, s) };
        }
    }
}
