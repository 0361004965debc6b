//! The "direct" workload (WORKLOADS.md #7): an actor driven through its
//! `Handler` by plain calls from the thread that owns it, compared with the
//! same loop written as plain function calls.
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
    let actor_time = start.elapsed();
    let got = sum.actor().map(|s| s.total).ok_or("actor stopped")?;
    if got != expected {
        return Err(format!("wrong sum: {got} != {expected}").into());
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
    println!(
        "direct: {:.0} M msg/s, plain calls: {:.0} M calls/s, ratio {:.2}",
        rate(actor_time),
        rate(plain_time),
        plain_time.as_secs_f64() / actor_time.as_secs_f64()
    );
    Ok(())
}
