//! What one look-up by name and one `handle_here` ask cost when two tokio
//! threads do them at once, against a plain `HashMap` read: the
//! realtime map's `/vehicle` path without HTTP (decision 0035).
//!
//! ```text
//! bench/target/release/ask-by-name [table|whereis|actor|child|observed] [threads] [actors] [pressure]
//! ```
//!
//! Each of `threads` tokio tasks (one per worker thread) picks names at
//! random among `actors` registered actors (2,000 by default, the realtime
//! map's fleet; far more than the caches hold, say 200,000, to see what
//! each ask's cache misses cost), 1,000,000 times each. `table` reads a
//! shared `HashMap<String, Arc<String>>`; `whereis` looks the actor up by
//! name; `actor` looks it up and asks it for its state inside
//! `handle_here`; `child` does the same with actors spawned as children of
//! one supervisor, as the realtime map's vehicles are; `observed` as
//! `child` in a system that observes its actors, as the realtime map's
//! does. Prints nanoseconds per operation and thread (wall time × threads
//! ÷ operations), after checking every answer.
//!
//! `pressure` (bytes, 0 by default) is other memory each operation writes
//! after its ask, a line at a time through a 32 MiB ring per thread: a
//! server's request buffers. With about 1,024 or more, the lines of an
//! actor asked 2,000 operations ago have left the core's private caches,
//! as in the realtime map's service, so each line an ask touches costs what
//! it costs there. Compare builds at the same pressure; the figure includes
//! the writes (`table` at the same pressure is their reference).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use troubadour::{handle_here, Actor, ActorRef, ActorSystem, Context, Handler, Message};

const PER_THREAD: u64 = 1_000_000;

/// Each thread's memory for `pressure`: far beyond its core's caches.
const RING: usize = 32 << 20;

struct Vehicle {
    state: Arc<String>,
}
impl Actor for Vehicle {}

struct GetState;
impl Message for GetState {
    type Reply = Arc<String>;
}
impl Handler<GetState> for Vehicle {
    fn handle(&mut self, _: GetState, _: &mut Context<Self>) -> Arc<String> {
        self.state.clone()
    }
}

/// The vehicles' supervisor in `child` mode.
struct Fleet;
impl Actor for Fleet {}

struct Adopt(Arc<String>);
impl Message for Adopt {
    type Reply = ActorRef<Vehicle>;
}
impl Handler<Adopt> for Fleet {
    fn handle(&mut self, Adopt(state): Adopt, ctx: &mut Context<Self>) -> ActorRef<Vehicle> {
        ctx.spawn(Vehicle { state }).expect("spawn a child")
    }
}

fn state_of(id: &str) -> String {
    format!("state of {id}")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "actor".into());
    let threads: u64 = args
        .next()
        .map_or(2, |t| t.parse().expect("threads: a number"));
    let actors: usize = args
        .next()
        .map_or(2_000, |n| n.parse().expect("actors: a number"));
    let pressure: usize = args
        .next()
        .map_or(0, |n| n.parse().expect("pressure: a number of bytes"));
    if !matches!(
        mode.as_str(),
        "table" | "whereis" | "actor" | "child" | "observed"
    ) {
        eprintln!(
            "usage: ask-by-name [table|whereis|actor|child|observed] [threads] [actors] [pressure]; got `{mode}`"
        );
        std::process::exit(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads as usize)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let system = if mode == "observed" {
        ActorSystem::builder().observe().build()
    } else {
        ActorSystem::new()
    };
    let ids: Arc<Vec<String>> = Arc::new(
        (0..actors)
            .map(|i| format!("{}/{}", i % 17, i * 7))
            .collect(),
    );
    let fleet = matches!(mode.as_str(), "child" | "observed")
        .then(|| system.spawn(Fleet).expect("spawn the fleet"));
    let mut table = HashMap::new();
    for id in ids.iter() {
        let state = Arc::new(state_of(id));
        let actor = match &fleet {
            Some(fleet) => fleet.ask(Adopt(state.clone())).wait().expect("a child"),
            None => system
                .spawn(Vehicle {
                    state: state.clone(),
                })
                .expect("spawn"),
        };
        system
            .register(&format!("vehicle/{id}"), &actor)
            .expect("a free name");
        table.insert(id.clone(), state);
    }
    let table = Arc::new(table);
    let started = Instant::now();
    let checked: u64 = runtime.block_on(async {
        let tasks: Vec<_> = (0..threads)
            .map(|t| {
                let (system, table, ids, mode) =
                    (system.handle(), table.clone(), ids.clone(), mode.clone());
                tokio::spawn(async move {
                    let mut ring = vec![0u8; if pressure > 0 { RING } else { 0 }];
                    let mut at = 0;
                    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (t + 1);
                    let mut answers = 0;
                    for i in 0..PER_THREAD {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let id = &ids[(x % actors as u64) as usize];
                        let ok = match mode.as_str() {
                            "table" => table
                                .get(id.as_str())
                                .map(Arc::clone)
                                .is_some_and(|s| s.ends_with(id.as_str())),
                            "whereis" => system
                                .whereis::<Vehicle>(&format!("vehicle/{id}"))
                                .is_some(),
                            _ => {
                                let actor = system
                                    .whereis::<Vehicle>(&format!("vehicle/{id}"))
                                    .expect("registered");
                                let state = handle_here(|| actor.ask(GetState))
                                    .timeout(Duration::from_secs(5))
                                    .await
                                    .expect("an answer");
                                state.ends_with(id.as_str())
                            }
                        };
                        answers += u64::from(ok);
                        for _ in 0..pressure.div_ceil(64) {
                            ring[at] = ring[at].wrapping_add(1);
                            at = (at + 64) % RING;
                        }
                        if i % 64 == 0 {
                            // Let the runtime's other tasks (none here) run, as a server's would.
                            tokio::task::yield_now().await;
                        }
                    }
                    answers
                })
            })
            .collect();
        let mut sum = 0;
        for t in tasks {
            sum += t.await.expect("a task");
        }
        sum
    });
    let elapsed = started.elapsed();
    assert_eq!(
        checked,
        threads * PER_THREAD,
        "every answer names the asked vehicle"
    );
    println!(
        "{mode}: {:.1} ns per operation and thread ({threads} threads, {actors} actors, \
         pressure {pressure} B, {} operations, {:.0} ms)",
        elapsed.as_nanos() as f64 * threads as f64 / (threads * PER_THREAD) as f64,
        threads * PER_THREAD,
        elapsed.as_secs_f64() * 1e3
    );
}
