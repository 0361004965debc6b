//! The runtime dashboard on a small system: a pool supervisor with busy
//! workers (one of which fails now and then and is restarted), plus as
//! many idle actors as you like, to see that the page stays usable.
//!
//!     cargo run --release -p troubadour-observe --example dashboard
//!     # open http://127.0.0.1:9100/  (metrics at /metrics)
//!     cargo run --release -p troubadour-observe --example dashboard -- --idle 1000000
//!
//! `--check` runs a few seconds without serving, then prints what an
//! observer measured (and how long one sample of the whole system took)
//! and checks it against what the program did.

use std::time::{Duration, Instant};
use troubadour::prelude::*;
use troubadour_observe::Observer;

/// Does a little arithmetic per job.
struct Worker {
    done: u64,
}
impl Actor for Worker {}

struct Job(u64);
impl Message for Job {
    type Reply = ();
}
impl Handler<Job> for Worker {
    fn handle(&mut self, Job(n): Job, _: &mut Context<Self>) {
        // About one failure every 2.5 s: well inside the pool's restart
        // intensity, so the pool restarts the worker and carries on.
        if n % 50_000 == 49_999 {
            panic!("job {n} hit a bad record");
        }
        self.done = self.done.wrapping_add(n.wrapping_mul(n) % 7);
    }
}

/// Supervises the workers (one-for-one: a failed worker is restarted
/// alone) and deals out jobs.
struct Pool {
    workers: Vec<ActorRef<Worker>>,
    size: usize,
}
impl Actor for Pool {
    fn started(&mut self, ctx: &mut Context<Self>) {
        for i in 0..self.size {
            let options = SpawnOptions::new()
                .name(format!("worker/{i}"))
                .restart(Restart::Permanent);
            self.workers.push(
                ctx.spawn_factory_with_options(options, || Worker { done: 0 })
                    .expect("spawn a worker"),
            );
        }
    }
}

struct Deal(u64);
impl Message for Deal {
    type Reply = ();
}
impl Handler<Deal> for Pool {
    fn handle(&mut self, Deal(n): Deal, _: &mut Context<Self>) {
        let worker = &self.workers[(n as usize) % self.workers.len()];
        let _ = worker.tell(Job(n));
    }
}

/// Does nothing: stands for the many idle actors of a real system.
struct Sleeper;
impl Actor for Sleeper {}

fn main() {
    let mut idle = 0usize;
    let mut check = false;
    let mut listen = "127.0.0.1:9100".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--idle" => idle = args.next().and_then(|n| n.parse().ok()).expect("--idle N"),
            "--listen" => listen = args.next().expect("--listen ADDR"),
            "--check" => check = true,
            other => panic!("unknown argument {other}; use --idle N, --listen ADDR, --check"),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let _entered = runtime.enter();
    let system = ActorSystem::builder()
        .tokio_handle(runtime.handle().clone())
        .observe()
        .build();
    let pool = system
        .spawn_with_options(
            SpawnOptions::new().name("pool"),
            Pool {
                workers: Vec::new(),
                size: 8,
            },
        )
        .expect("spawn the pool");
    let started = Instant::now();
    for _ in 0..idle {
        system.spawn(Sleeper).expect("spawn an idle actor");
    }
    let spawn_time = started.elapsed();
    let observer = Observer::new(system.handle());

    // Deal jobs until stopped: about 20,000 a second.
    let feeder = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while pool.tell(Deal(n)).is_ok() {
                n += 1;
                if n % 200 == 0 {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        })
    };

    if !check {
        println!("dashboard http://{listen}/  (metrics at /metrics); Ctrl-C stops");
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind(&listen)
                .await
                .expect("bind the dashboard's address");
            tokio::select! {
                r = observer.serve(listener) => r.expect("serve"),
                _ = tokio::signal::ctrl_c() => {}
            }
        });
    } else {
        // Until a worker has failed and been restarted (a job in 50,000).
        let deadline = Instant::now() + Duration::from_secs(60);
        while observer
            .overview()
            .kinds
            .iter()
            .all(|k| k.short != "Worker" || k.restarts == 0)
        {
            assert!(Instant::now() < deadline, "no worker failed within 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        let first = observer.overview();
        std::thread::sleep(Duration::from_millis(1100));
        let sampled = Instant::now();
        let overview = observer.overview();
        let sample_time = sampled.elapsed();
        let workers = overview
            .kinds
            .iter()
            .find(|k| k.short == "Worker")
            .expect("the workers are listed");
        let sleepers = overview.kinds.iter().find(|k| k.short == "Sleeper");
        println!(
            "{} actors ({} idle, spawned in {:.0} ms); one sample of them took {:.1} ms",
            overview.actors,
            idle,
            spawn_time.as_secs_f64() * 1e3,
            sample_time.as_secs_f64() * 1e3
        );
        println!(
            "workers: {} alive, {} handled ({:.0}/s), {} restarts; hottest: {}",
            workers.alive,
            workers.handled,
            workers.rate,
            workers.restarts,
            overview
                .hottest
                .first()
                .map_or("none".to_string(), |a| a.name.clone().unwrap_or_default())
        );
        assert_eq!(
            overview.actors as usize,
            idle + 9,
            "the pool, 8 workers, the idle"
        );
        assert_eq!(sleepers.map_or(0, |s| s.alive) as usize, idle);
        assert_eq!(workers.alive, 8);
        assert!(
            workers.handled
                > first
                    .kinds
                    .iter()
                    .find(|k| k.short == "Worker")
                    .unwrap()
                    .handled
        );
        assert!(workers.restarts >= 1, "a worker was restarted");
        assert!(workers.rate > 0.0);
        observer.close();
    }
    drop(pool);
    system
        .shutdown(Duration::from_secs(10))
        .expect("orderly shutdown");
    feeder.join().expect("the feeder stops once the pool has");
}
