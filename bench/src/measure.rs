//! What the harness measures, the same way for every implementation: the
//! timed region of a run, resident memory, and the census of idle actors.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::workload::{Failure, IdleReport};

/// The answer of one run and the time it took, as [`Stopwatch::stop`] makes
/// it: implementations time their runs only with a [`Stopwatch`].
#[derive(Debug)]
pub struct Timed<T> {
    pub elapsed: Duration,
    pub value: T,
}

impl<T> Timed<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Timed<U> {
        Timed {
            elapsed: self.elapsed,
            value: f(self.value),
        }
    }
}

/// Times the measured region of a run. Start it once the runtime is up and
/// just before the first actor of the workload is spawned or the first
/// message sent; stop it as soon as the answer is in hand. Building and
/// tearing down the runtime is outside the region for every implementation.
pub struct Stopwatch(Instant);

impl Stopwatch {
    pub fn start() -> Stopwatch {
        Stopwatch(Instant::now())
    }

    pub fn stop<T>(self, value: T) -> Timed<T> {
        Timed {
            elapsed: self.0.elapsed(),
            value,
        }
    }
}

/// Starts `count` OS threads, each running one closure made by `sender`,
/// releases them together and returns a stopwatch started just before the
/// release. The fan-in workload and the plain floor use it, so thread
/// start-up is outside every measured region, and the release, with the
/// threads' wake-ups, inside it.
///
/// The clock starts between two barriers, on the calling thread, before
/// any closure runs. Started after one barrier that releases everyone (as
/// it once was), it started whenever the calling thread next got a core:
/// with as many busy threads as cores, after the work was mostly done. On
/// 2 cores the plain floor of workload 8 reported 0.4–1.1 ms for threads
/// that `perf sched` showed computing for 4.8–6.9 ms, the calling thread
/// runnable but waiting 4.8 ms for a core (2026-11-26).
pub fn release_threads<T, F>(
    count: usize,
    mut sender: impl FnMut() -> F,
) -> (Stopwatch, Vec<JoinHandle<T>>)
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let ready = Arc::new(Barrier::new(count + 1));
    let go = Arc::new(Barrier::new(count + 1));
    let threads = (0..count)
        .map(|_| {
            let send = sender();
            let (ready, go) = (ready.clone(), go.clone());
            std::thread::spawn(move || {
                ready.wait();
                go.wait();
                send()
            })
        })
        .collect();
    ready.wait();
    let clock = Stopwatch::start();
    go.wait();
    (clock, threads)
}

/// Joins threads started by [`release_threads`], returning what each
/// returned.
pub fn join_threads<T>(threads: Vec<JoinHandle<T>>) -> Result<Vec<T>, Failure> {
    threads
        .into_iter()
        .map(|t| {
            t.join()
                .map_err(|_| Failure::failed("a released thread panicked"))
        })
        .collect()
}

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`, ...).
fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line[field.len()..]
        .trim_start_matches(':')
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Resident memory now.
pub fn rss_bytes() -> Option<u64> {
    proc_status_bytes("VmRSS")
}

/// Peak resident memory of this process so far.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_bytes("VmHWM")
}

/// Hands memory the allocator keeps cached but no one uses back to the
/// system (glibc `malloc_trim`), so that RSS shows what the runtime holds
/// rather than what the allocator caches.
fn trim_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The global allocator of every implementation: the system allocator
/// (glibc malloc), which also counts the bytes allocated and not yet freed
/// while [`IdleMemory`] asks it to. Off, it costs one relaxed load per call.
pub struct SystemAllocator;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

impl SystemAllocator {
    fn count(delta: isize) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// Bytes allocated and not freed since counting started.
    fn live_bytes() -> i64 {
        LIVE_BYTES.load(Ordering::Acquire) as i64
    }
}

// SAFETY: every call is passed through to `System` unchanged.
unsafe impl GlobalAlloc for SystemAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::count(layout.size() as isize);
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::count(layout.size() as isize);
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        Self::count(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::count(new_size as isize - layout.size() as isize);
        System.realloc(ptr, layout, new_size)
    }
}

/// Memory at one point of an idle run.
#[derive(Clone, Copy, Debug)]
struct Mark {
    rss: u64,
    heap: i64,
}

impl Mark {
    fn now() -> Option<Mark> {
        Some(Mark {
            rss: rss_bytes()?,
            heap: SystemAllocator::live_bytes(),
        })
    }
}

/// The memory marks of an idle run. The implementation calls, in this
/// order, [`before_spawn`](Self::before_spawn) once its runtime is up,
/// [`all_spawned`](Self::all_spawned) once every actor has started (see
/// [`IDLE_CENSUS`]) and is waiting for a message, and
/// [`all_stopped`](Self::all_stopped) once every actor has stopped.
///
/// Bytes per actor come from resident memory (VmRSS). Whether memory came
/// back is judged on the heap bytes still allocated, which do not depend on
/// when glibc hands freed pages back to the system.
#[derive(Debug, Default)]
pub struct IdleMemory {
    before: Option<Mark>,
    spawned: Option<Mark>,
    stopped: Option<Mark>,
}

/// How long memory is given to settle after the last actor stopped (freed
/// by other threads) before it is read.
const SETTLE: Duration = Duration::from_millis(200);

/// The share of the actors' heap bytes that may stay allocated after all of
/// them stopped.
const MAY_RETAIN: f64 = 0.1;

impl IdleMemory {
    pub fn before_spawn(&mut self) {
        trim_allocator();
        COUNTING.store(true, Ordering::SeqCst);
        self.before = Mark::now();
    }

    pub fn all_spawned(&mut self) {
        self.spawned = Mark::now();
    }

    pub fn all_stopped(&mut self) {
        std::thread::sleep(SETTLE);
        trim_allocator();
        self.stopped = Mark::now();
        COUNTING.store(false, Ordering::SeqCst);
    }

    /// Bytes per actor, after checking the marks were taken and that memory
    /// came back.
    pub fn check(&self, actors: usize) -> Result<f64, Failure> {
        let (Some(before), Some(spawned), Some(stopped)) =
            (self.before, self.spawned, self.stopped)
        else {
            return Err(Failure::failed(format!(
                "idle run did not take all three memory marks: {self:?}"
            )));
        };
        if std::env::var_os("BENCH_DEBUG").is_some() {
            eprintln!("idle memory marks: {self:?}");
        }
        let allocated = spawned.heap - before.heap;
        let retained = stopped.heap - before.heap;
        if retained as f64 > MAY_RETAIN * allocated as f64 {
            return Err(Failure::failed(format!(
                "memory did not return: {retained} of the {allocated} heap bytes allocated while spawning \
                 are still allocated after all {actors} actors stopped"
            )));
        }
        Ok(spawned.rss.saturating_sub(before.rss) as f64 / actors as f64)
    }
}

/// Counts idle actors as they start and stop, with no per-actor memory.
/// An idle actor calls [`started`](Census::started) from its start hook
/// (or first poll) and [`stopped`](Census::stopped) when its state is
/// dropped or its stop hook runs.
pub struct Census {
    started: AtomicUsize,
    stopped: AtomicUsize,
}

pub static IDLE_CENSUS: Census = Census {
    started: AtomicUsize::new(0),
    stopped: AtomicUsize::new(0),
};

impl Census {
    pub fn started(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stopped(&self) {
        self.stopped.fetch_add(1, Ordering::Relaxed);
    }

    pub fn started_count(&self) -> usize {
        self.started.load(Ordering::Acquire)
    }

    pub fn stopped_count(&self) -> usize {
        self.stopped.load(Ordering::Acquire)
    }

    pub fn report(&self) -> IdleReport {
        IdleReport {
            started: self.started_count(),
            stopped: self.stopped_count(),
        }
    }

    /// Waits, on a tokio timer, until `n` actors have started.
    pub async fn until_started(&self, n: usize) {
        while self.started_count() < n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits, on a tokio timer, until `n` actors have stopped.
    pub async fn until_stopped(&self, n: usize) {
        while self.stopped_count() < n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Holds every worker thread of a runtime busy until released, so that a
/// backlog can be built with nothing handled (workload `backlog`). Each of
/// `workers` holder actors (or tasks) calls [`hold`](Self::hold) from its
/// handler; the holders meet at a barrier first, so once
/// [`until_held`](Self::until_held) returns, every worker runs one of them
/// (a worker runs one actor at a time) and nothing else runs until
/// [`release`](Self::release).
pub struct HeldWorkers {
    all_in: Barrier,
    released: std::sync::Mutex<bool>,
    go: std::sync::Condvar,
}

impl HeldWorkers {
    pub fn new(workers: usize) -> Arc<HeldWorkers> {
        Arc::new(HeldWorkers {
            // The holders and the caller of `until_held`.
            all_in: Barrier::new(workers + 1),
            released: std::sync::Mutex::new(false),
            go: std::sync::Condvar::new(),
        })
    }

    /// Called by a holder on its worker: blocks that worker until released.
    pub fn hold(&self) {
        self.all_in.wait();
        let mut released = self.released.lock().expect("hold lock");
        while !*released {
            released = self.go.wait(released).expect("hold lock");
        }
    }

    /// Returns once every worker runs a holder.
    pub fn until_held(&self) {
        self.all_in.wait();
    }

    pub fn release(&self) {
        *self.released.lock().expect("hold lock") = true;
        self.go.notify_all();
    }
}

/// The fill of a backlog: how long telling every message took and how much
/// resident memory the queued messages took. Start it once the receivers
/// exist and the workers are held, just before the first tell.
pub struct BacklogFill {
    clock: Instant,
    rss_before: Option<u64>,
}

/// What [`BacklogFill::filled`] measured.
#[derive(Clone, Copy, Debug)]
pub struct Filled {
    pub fill: Duration,
    /// Resident memory after the fill minus before it.
    pub backlog_bytes: Option<u64>,
}

impl BacklogFill {
    pub fn start() -> BacklogFill {
        trim_allocator();
        BacklogFill {
            rss_before: rss_bytes(),
            clock: Instant::now(),
        }
    }

    /// Called right after the last tell, before the workers are released.
    pub fn filled(self) -> Filled {
        let fill = self.clock.elapsed();
        Filled {
            fill,
            backlog_bytes: rss_bytes()
                .zip(self.rss_before)
                .map(|(after, before)| after.saturating_sub(before)),
        }
    }
}
