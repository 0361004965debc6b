//! One timer per actor across a million actors: each actor arms a
//! `send_after` when it starts and counts the tick when it arrives. Prints
//! the memory per actor with its timer pending, and checks every tick
//! arrived.
//!
//! Run: `cargo run --release --example million_timers [actors]`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use troubadour::prelude::*;

struct Sleeper {
    ticks: Arc<AtomicUsize>,
    delay: Duration,
}

impl Actor for Sleeper {
    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.send_after(self.delay, Tick);
    }
}

struct Tick;

impl Message for Tick {
    type Reply = ();
}

impl Handler<Tick> for Sleeper {
    fn handle(&mut self, _: Tick, ctx: &mut Context<Self>) {
        self.ticks.fetch_add(1, Ordering::Relaxed);
        ctx.stop();
    }
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let actors: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 1_000_000,
    };
    let system = ActorSystem::new();
    let ticks = Arc::new(AtomicUsize::new(0));
    let before = rss_bytes();
    let start = Instant::now();
    for _ in 0..actors {
        system.spawn(Sleeper {
            ticks: ticks.clone(),
            delay: Duration::from_secs(3),
        })?;
    }
    // Give the actors time to start and arm their timers (well under 3 s).
    std::thread::sleep(Duration::from_millis(1500));
    let armed = rss_bytes();
    println!(
        "{actors} actors spawned in {:.0} ms, each with a pending timer: {:.0} bytes per actor+timer",
        start.elapsed().as_secs_f64() * 1e3,
        (armed.saturating_sub(before)) as f64 / actors as f64
    );
    while ticks.load(Ordering::Relaxed) < actors {
        if start.elapsed() > Duration::from_secs(120) {
            return Err(format!(
                "only {} of {actors} ticks arrived",
                ticks.load(Ordering::Relaxed)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "all {actors} timers fired after {:.2} s",
        start.elapsed().as_secs_f64()
    );
    system.shutdown(Duration::from_secs(10))?;
    Ok(())
}
