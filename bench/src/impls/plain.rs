//! plain: no actors at all. Plain function calls for direct and plain OS
//! threads for pi and rings: the physical floor the actor versions are
//! compared with, and the measure of what the harness itself costs.

use std::hint::black_box;

use super::Outcome;
use crate::measure::{join_threads, release_threads, IdleMemory, Stopwatch};
use crate::workload::{
    factorise, leibniz, Counting, Direct, Failure, FanIn, Idle, IdleReport, Pi, PingPong, Rings,
    RingsReport, Skynet,
};

pub struct Plain {
    threads: usize,
}

impl Plain {
    pub fn new(threads: usize) -> Plain {
        Plain { threads }
    }
}

/// The state the direct workload's actor would keep, with its handler as a
/// plain method.
struct Summer {
    total: u64,
}

impl Summer {
    #[inline]
    fn handle(&mut self, n: u64) {
        self.total += n;
    }
}

fn floor_only() -> Failure {
    Failure::Unsupported("plain (no actors) is the floor for direct, pi and rings only".into())
}

impl super::Contender for Plain {
    fn counting(&self, _: &Counting) -> Outcome<u64> {
        Err(floor_only())
    }

    fn pingpong(&self, _: &PingPong) -> Outcome<Vec<u64>> {
        Err(floor_only())
    }

    fn skynet(&self, _: &Skynet) -> Outcome<u64> {
        Err(floor_only())
    }

    fn fanin(&self, _: &FanIn) -> Outcome<u64> {
        Err(floor_only())
    }

    /// The same work as the actors do, on as many threads as they have:
    /// each thread takes its share of the rings; per build, one
    /// factorisation, then the token around the ring of `links + 1` slots
    /// (the master and its links) once per value from `token` down to 0,
    /// each hop a store of the value into the next slot that the compiler
    /// must make (`black_box`), as a message would be.
    fn rings(&self, p: &Rings) -> Outcome<RingsReport> {
        let threads = self.threads;
        let mut next = 0;
        let (clock, workers) = release_threads(threads, || {
            let (first, p) = (next, p.clone());
            next += 1;
            move || {
                let mut report = RingsReport::default();
                for _ in (first..p.rings).step_by(threads) {
                    for _ in 0..p.builds {
                        report.factorisations.push(factorise(p.target));
                        let mut ring = vec![0u64; p.links + 1];
                        let mut value = p.token;
                        loop {
                            for slot in ring.iter_mut() {
                                *slot = black_box(value);
                                value = *slot;
                            }
                            if value == 0 {
                                break;
                            }
                            value -= 1;
                        }
                    }
                    report.masters_done += 1;
                }
                report
            }
        });
        let reports = join_threads(workers)?;
        let mut report = RingsReport::default();
        for r in reports {
            report.factorisations.extend(r.factorisations);
            report.masters_done += r.masters_done;
        }
        Ok(clock.stop(report))
    }

    fn idle(&self, _: &Idle, _: &mut IdleMemory) -> Outcome<IdleReport> {
        Err(floor_only())
    }

    fn direct(&self, p: &Direct) -> Outcome<u64> {
        let clock = Stopwatch::start();
        let mut summer = Summer { total: 0 };
        for n in 0..p.messages {
            // black_box: each call must happen, one value at a time, as a
            // message would; without it the loop folds into a formula.
            summer.handle(black_box(n));
        }
        Ok(clock.stop(summer.total))
    }

    fn pi(&self, p: &Pi) -> Outcome<f64> {
        let threads = self.threads as u64;
        let mut next = 0;
        let (clock, workers) = release_threads(self.threads, || {
            let (first, p) = (next, p.clone());
            next += 1;
            move || {
                (first..p.items)
                    .step_by(threads as usize)
                    .map(|item| leibniz(item * p.terms, p.terms))
                    .sum::<f64>()
            }
        });
        let sum = join_threads(workers)?.into_iter().sum::<f64>();
        Ok(clock.stop(sum))
    }
}
