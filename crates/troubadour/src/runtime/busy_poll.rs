//! What the system's own I/O thread does before it sleeps: it polls the
//! sockets of the remote layer for a short while (decision 0047).
//!
//! A remote round trip on an idle node is two sleeps and two wake-ups of the
//! connections' I/O threads (one per side): the reply arrives, the kernel
//! wakes the thread blocked in `epoll_wait` (an inter-processor interrupt
//! and a context switch), and only then is it read. On a virtual machine
//! each wake-up costs tens of microseconds, most of a round trip. Erlang's
//! schedulers busy-wait before they sleep for the same reason. Here the I/O
//! thread, about to park with nothing to run, asks a second, level-triggered
//! epoll instance holding only the connections' sockets whether one is
//! readable, again and again (yielding the CPU in between), until one is,
//! until tokio has a task queued from another thread, or until the
//! configured time is up; then it parks as before. Data that arrives during
//! the poll is already in the ready list of tokio's own epoll, so its
//! `epoll_wait` returns at once, with no wake-up to wait for.
//!
//! Level-triggered, so the answer is "unread data now", not "data arrived
//! at some point": a socket whose data is still unread (its reader busy
//! elsewhere) ends every poll at once, which only means no poll, never a
//! missed read. A socket leaves the instance when it is closed (the kernel
//! drops closed files from every epoll set), so nothing is removed by hand
//! and a reused descriptor number cannot remove another socket.

use std::time::Duration;

/// The default for [`ActorSystemBuilder::io_busy_poll`](crate::ActorSystemBuilder::io_busy_poll).
pub(crate) const DEFAULT: Duration = Duration::from_micros(50);

/// One system's busy poll: the sockets and how long to poll them.
pub(crate) struct BusyPoll {
    /// Zero where the system runs on a borrowed runtime: its threads park
    /// without asking us.
    spin: Duration,
    #[cfg(target_os = "linux")]
    sockets: std::sync::OnceLock<Option<std::os::fd::OwnedFd>>,
}

impl BusyPoll {
    pub(crate) fn new(spin: Duration) -> Self {
        BusyPoll {
            spin,
            #[cfg(target_os = "linux")]
            sockets: std::sync::OnceLock::new(),
        }
    }

    /// Polls `socket` from now until it is closed. Does nothing where
    /// polling is off or the platform has no epoll.
    #[cfg(unix)]
    pub(crate) fn watch(&self, socket: std::os::fd::BorrowedFd<'_>) {
        if self.spin.is_zero() {
            return;
        }
        #[cfg(target_os = "linux")]
        {
            use rustix::event::epoll;
            let sockets = self
                .sockets
                .get_or_init(|| epoll::create(epoll::CreateFlags::CLOEXEC).ok());
            if let Some(sockets) = sockets {
                // Refused (out of memory, the per-user limit on watches):
                // this socket is simply not polled.
                let _ = epoll::add(
                    sockets,
                    socket,
                    epoll::EventData::new_u64(0),
                    epoll::EventFlags::IN,
                );
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = socket;
    }

    /// Runs on the I/O thread just before it parks (tokio's
    /// `on_thread_park`).
    pub(crate) fn before_park(&self) {
        #[cfg(target_os = "linux")]
        {
            use rustix::event::epoll;
            let Some(Some(sockets)) = self.sockets.get() else {
                return;
            };
            // The runtime is not kept in `self`: it holds this in its
            // callback, and a handle back would keep both alive for ever.
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let metrics = runtime.metrics();
            let at_once = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            let mut ready = [epoll::Event {
                flags: epoll::EventFlags::empty(),
                data: epoll::EventData::new_u64(0),
            }];
            let until = std::time::Instant::now() + self.spin;
            loop {
                match epoll::wait(sockets, &mut ready, Some(&at_once)) {
                    Ok(0) => {}
                    // Readable (or closed, or in error: the reader sees it).
                    Ok(_) => return,
                    // Interrupted: park, tokio's epoll will tell.
                    Err(_) => return,
                }
                if metrics.global_queue_depth() > 0 || std::time::Instant::now() >= until {
                    return;
                }
                // Another thread ready on this CPU (a worker with work, the
                // other process of a round trip) runs before the next look.
                std::thread::yield_now();
            }
        }
    }
}
