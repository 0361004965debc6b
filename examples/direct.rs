//! The "direct" workload (WORKLOADS.md #7): an actor driven through its
//! `Handler` by plain calls from the thread that owns it, compared with the
//! same loop written as plain function calls. Two ways: `handle`, one call
//! per message (the state stays in the actor's cell, memory the compiler
//! must load and store each time), and `handle_all`, a batch whose state
//! lives in a local meanwhile, where it can stay in a register.
//!
//! Run: `cargo run --release --example direct [messages]`

use std::hint::black_box;
use std::time::Instant;
use troubadour::prelude::*;

struct Sum {
    total: u64,
}

impl Actor for Sum {}

struct Add(u64);

impl Message for Add {
    type Reply = ();
}

impl Handler<Add> for Sum {
    #[inline]
    fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) {
        self.total = self.total.wrapping_add(n);
    }
}

#[inline]
fn plain_add(total: &mut u64, n: u64) {
    *total = total.wrapping_add(n);
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let messages: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 1_000_000_000,
    };
    let expected = (0..messages).fold(0u64, |a, n| a.wrapping_add(n));
    let system = ActorSystem::new();

    let mut sum = LocalActor::new(&system, Sum { total: 0 })?;
    let start = Instant::now();
    for n in 0..messages {
        // `black_box` keeps the compiler from folding the loop into a formula.
        sum.handle(Add(black_box(n)))?;
    }
    let call_time = start.elapsed();
    let got = sum.actor().map(|s| s.total).ok_or("actor stopped")?;
    if got != expected {
        return Err(format!("wrong sum from handle: {got} != {expected}").into());
    }

    let mut sum = LocalActor::new(&system, Sum { total: 0 })?;
    let start = Instant::now();
    sum.handle_all((0..messages).map(|n| Add(black_box(n))))?;
    let batch_time = start.elapsed();
    let got = sum.actor().map(|s| s.total).ok_or("actor stopped")?;
    if got != expected {
        return Err(format!("wrong sum from handle_all: {got} != {expected}").into());
    }

    let mut total = 0u64;
    let start = Instant::now();
    for n in 0..messages {
        plain_add(&mut total, black_box(n));
    }
    let plain_time = start.elapsed();
    if total != expected {
        return Err("plain loop gave a wrong sum".into());
    }

    let rate = |t: std::time::Duration| messages as f64 / t.as_secs_f64() / 1e6;
    let ratio = |t: std::time::Duration| plain_time.as_secs_f64() / t.as_secs_f64();
    println!(
        "handle: {:.0} M msg/s ({:.2} of plain), handle_all: {:.0} M msg/s ({:.2} of plain), plain calls: {:.0} M calls/s",
        rate(call_time),
        ratio(call_time),
        rate(batch_time),
        ratio(batch_time),
        rate(plain_time),
    );
    Ok(())
}
