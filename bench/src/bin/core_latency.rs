//! `core-latency [--json]`: how long a cache line takes to go from one core
//! to another and back, measured between the first two CPUs this process
//! may run on. A binary of its own, so that adding it changed no code of
//! `troubadour-bench`, whose workloads it sits beside.
//!
//! Every workload that passes messages between cores pays this transfer,
//! and on a virtual machine it is not a constant: the host may place the
//! VM's two vCPUs on cores that share a cache or on cores that do not, and
//! may move them while the suite runs. On the 2-core AMD EPYC VM of
//! 2026-12-06 the round trip switched between about 100 ns and about
//! 460 ns every few seconds to minutes, and fan-in took about 1.9× as long
//! in the slow placement (decision 0058). `bench/run`
//! runs this before every measured run and keeps the figure beside it, so
//! a reader can tell a slow run of the runtime from a slow placement of
//! the machine.
//!
//! Two threads, each pinned to one CPU, hand a counter back and forth on
//! its own cache line: one writes an odd value and waits for the even one
//! after it, the other waits for the odd one and writes the even one.
//! Each round trip is two transfers of the line. The figure is the median
//! of a few batches, so a preemption in one batch does not move it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Round trips per batch: about 2 ms on a near pair of cores, 10 ms on a
/// far one.
const ROUND_TRIPS: u64 = 20_000;
const BATCHES: usize = 7;
/// A busy machine (the other CPU taken by another process) stretches a
/// round trip to a time slice; the probe gives up rather than hang.
const GIVE_UP_AFTER: std::time::Duration = std::time::Duration::from_secs(3);
/// Written by the measuring thread when it is done or gives up.
const STOP: u64 = u64::MAX;

/// A counter alone on its cache line (and the next: the adjacent-line
/// prefetcher pairs lines).
#[repr(align(128))]
struct Line(AtomicU64);

/// The first two CPUs in this process's affinity mask, if it has two.
fn two_cpus() -> Option<(usize, usize)> {
    // SAFETY: `cpu_set_t` is plain data; all zeroes is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable `cpu_set_t` of the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return None;
    }
    // SAFETY: `CPU_ISSET` reads the set initialised above.
    let mut allowed =
        (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) });
    Some((allowed.next()?, allowed.next()?))
}

/// Pins the calling thread to `cpu`; `false` if the kernel refused.
fn pin(cpu: usize) -> bool {
    // SAFETY: as in `two_cpus`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below `CPU_SETSIZE` (it came from a set).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0 }
}

/// The median round trip in nanoseconds, or why it could not be measured.
/// Pins the calling thread: run it in a process of its own.
fn measure() -> Result<f64, String> {
    let (a, b) = two_cpus().ok_or("fewer than two CPUs to run on")?;
    if !pin(a) {
        return Err(format!("could not pin a thread to CPU {a}"));
    }
    let line = Arc::new(Line(AtomicU64::new(0)));
    let total = ROUND_TRIPS * BATCHES as u64;
    let (pinned, was_pinned) = std::sync::mpsc::channel();
    let echo = {
        let line = line.clone();
        std::thread::spawn(move || {
            let ok = pin(b);
            let _ = pinned.send(ok);
            if !ok {
                return;
            }
            for i in 0..total {
                loop {
                    match line.0.load(Ordering::Acquire) {
                        v if v == 2 * i + 1 => break,
                        STOP => return,
                        _ => std::hint::spin_loop(),
                    }
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
        })
    };
    if !was_pinned.recv().unwrap_or(false) {
        let _ = echo.join();
        return Err(format!("could not pin a thread to CPU {b}"));
    }
    let mut batches = Vec::with_capacity(BATCHES);
    let mut i = 0;
    let deadline = Instant::now() + GIVE_UP_AFTER;
    'batches: for _ in 0..BATCHES {
        let started = Instant::now();
        for _ in 0..ROUND_TRIPS {
            line.0.store(2 * i + 1, Ordering::Release);
            let mut spins = 0u32;
            while line.0.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                // The clock is read rarely: it would be most of a near
                // round trip.
                if spins.is_multiple_of(4096) && Instant::now() > deadline {
                    break 'batches;
                }
            }
            i += 1;
        }
        batches.push(started.elapsed().as_nanos() as f64 / ROUND_TRIPS as f64);
    }
    // Sent until the echo thread is gone: one that was about to answer a
    // round trip the measuring side gave up on overwrites the first.
    while !echo.is_finished() {
        line.0.store(STOP, Ordering::Release);
        std::thread::yield_now();
    }
    let _ = echo.join();
    if batches.len() < BATCHES {
        return Err(format!(
            "the two CPUs were too busy to measure within {GIVE_UP_AFTER:?} \
             (run it on an idle machine)"
        ));
    }
    batches.sort_by(f64::total_cmp);
    Ok(batches[BATCHES / 2])
}

/// One line, JSON with `--json`.
fn main() -> std::process::ExitCode {
    let json = std::env::args().skip(1).any(|a| a == "--json");
    match measure() {
        Ok(ns) if json => println!("{{\"ok\":true,\"core_rtt_ns\":{ns:.1}}}"),
        Ok(ns) => println!("core-to-core round trip: {ns:.1} ns"),
        Err(e) if json => println!("{{\"ok\":false,\"error\":{e:?}}}"),
        Err(e) => {
            eprintln!("core-latency: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    std::process::ExitCode::SUCCESS
}
