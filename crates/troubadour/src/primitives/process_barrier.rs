//! A memory barrier on every thread of the process at once, for handshakes
//! with one rare side and one hot side (Linux's `membarrier(2)`, private
//! expedited; the "asymmetric" barriers of Folly and of userspace RCU).
//!
//! Two threads that each write one location and then read the other's (a
//! worker registering as a sleeper, then re-checking the queues; a producer
//! pushing work, then checking for sleepers) need a full barrier between
//! the write and the read on *both* sides, or both reads can miss. With
//! [`heavy`] on the rare side, the hot side needs only a compiler fence:
//! while `heavy` runs, the kernel interrupts every other CPU running a
//! thread of this process and has it execute a full barrier (a thread that
//! is not running passes one when it is switched back in). Take the hot
//! thread's program order around the point where it ran that barrier: if
//! its write came before, the write is visible to the rare side's read
//! after `heavy`; if after, so is its read, which then sees the rare side's
//! write (made before `heavy`, whose entry is itself a full barrier). Either
//! way one of the two reads sees the other's write.
//!
//! Not available off Linux, under Miri or loom, on kernels before 4.14, or
//! where a seccomp policy refuses the call: [`available`] says so, and
//! callers then use ordinary `SeqCst` fences on both sides.

use std::sync::OnceLock;

/// `membarrier` commands (Linux uapi `linux/membarrier.h`; a stable ABI).
#[cfg(all(target_os = "linux", not(miri), not(loom)))]
mod cmd {
    pub const QUERY: libc::c_long = 0;
    pub const PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    pub const REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
}

/// Whether [`heavy`] works in this process. The first call registers the
/// process with the kernel (once); later calls read a flag.
pub(crate) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(register)
}

#[cfg(all(target_os = "linux", not(miri), not(loom)))]
fn register() -> bool {
    // SAFETY: `membarrier` takes plain integers and touches no memory of
    // this process; an unknown command or a refusal is an error return.
    let supported = unsafe { libc::syscall(libc::SYS_membarrier, cmd::QUERY, 0) };
    if supported < 0 || supported & cmd::PRIVATE_EXPEDITED == 0 {
        return false;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd::REGISTER_PRIVATE_EXPEDITED, 0) == 0 }
}

#[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
fn register() -> bool {
    false
}

/// Every thread of this process has executed a full memory barrier by the
/// time this returns (and the caller one at entry). Call only where
/// [`available`] returned `true`. Costs a system call and an interrupt
/// per other CPU running this process: for the rare side only.
///
/// Returns `false` if the kernel refused (it does not once registered);
/// the caller must then not rely on the other side's compiler fence.
#[cfg(all(target_os = "linux", not(miri), not(loom)))]
pub(crate) fn heavy() -> bool {
    // SAFETY: as in `register`.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd::PRIVATE_EXPEDITED, 0) == 0 }
}

#[cfg(not(all(target_os = "linux", not(miri), not(loom))))]
pub(crate) fn heavy() -> bool {
    false
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn heavy_works_wherever_it_is_available() {
        if available() {
            assert!(heavy());
            assert!(heavy());
        } else {
            assert!(!heavy());
        }
    }
}
