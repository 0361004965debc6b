//! plain: no actors at all. Plain function calls for direct and plain OS
//! threads for pi: the physical floor the actor versions are compared with,
//! and the measure of what the harness itself costs.

use std::hint::black_box;

use super::Outcome;
use crate::measure::{join_threads, release_threads, IdleMemory, Stopwatch};
use crate::workload::{
    leibniz, Counting, Direct, Failure, FanIn, Idle, IdleReport, Pi, PingPong, Rings, RingsReport,
    Skynet,
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
    Failure::Unsupported("plain (no actors) is the floor for direct and pi only".into())
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

    fn rings(&self, _: &Rings) -> Outcome<RingsReport> {
        Err(floor_only())
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
