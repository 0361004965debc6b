//! The counting workload (WORKLOADS.md #1): one actor, 3,000,000 `Add(100)`
//! told from outside, then one `ask` for the total, which must be
//! 300,000,000.
//!
//! Run: `cargo run --release --example counting [messages]`

use std::time::{Duration, Instant};
use troubadour::prelude::*;

struct Counter {
    total: u64,
}

impl Actor for Counter {}

struct Add(u64);
struct GetAndReset;

impl Message for Add {
    type Reply = ();
}

impl Message for GetAndReset {
    type Reply = u64;
}

impl Handler<Add> for Counter {
    fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) {
        self.total += n;
    }
}

impl Handler<GetAndReset> for Counter {
    fn handle(&mut self, _: GetAndReset, _: &mut Context<Self>) -> u64 {
        std::mem::take(&mut self.total)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let messages: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 3_000_000,
    };
    let system = ActorSystem::new();
    let counter = system.spawn(Counter { total: 0 })?;

    let start = Instant::now();
    for _ in 0..messages {
        counter.tell(Add(100))?;
    }
    let total = counter
        .ask(GetAndReset)
        .timeout(Duration::from_secs(60))
        .wait()?;
    let elapsed = start.elapsed();

    let expected = messages * 100;
    if total != expected {
        return Err(format!("wrong total: got {total}, expected {expected}").into());
    }
    println!(
        "counted {total} (correct) from {messages} messages in {:.1} ms: {:.2} M msg/s",
        elapsed.as_secs_f64() * 1e3,
        messages as f64 / elapsed.as_secs_f64() / 1e6
    );
    system.shutdown(Duration::from_secs(5))?;
    Ok(())
}
