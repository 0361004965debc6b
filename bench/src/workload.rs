//! The workloads of `/work/shared/WORKLOADS.md`: their sizes, the answer each
//! must produce, and the computation two of them ask for.
//!
//! Every implementation returns its raw answer; [`Workload::check`] decides
//! whether it is right. A wrong answer is a failure, never a figure.

use std::fmt;
use std::time::Duration;

use crate::impls::Contender;
use crate::measure::{BacklogFill, HeldWorkers, IdleMemory, Stopwatch, Timed};

/// The number the rings workload factorises, and its two prime factors.
pub const RINGS_TARGET: u64 = 28_350_160_440_309_881;
pub const RINGS_FACTORS: [u64; 2] = [86_028_157, 329_545_133];
/// The target of `rings-hops`: factorised in no time, so what is left of
/// workload 5 is its messages.
pub const RINGS_HOPS_TARGET: u64 = 6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Counting,
    PingPong,
    Skynet,
    FanIn,
    Rings,
    /// Workload 5 without the factorisations: the messages alone.
    RingsHops,
    Idle,
    Direct,
    Pi,
    /// Workload 8 at ten times as many items: long enough that a VM taking
    /// one of its vCPUs away for a few milliseconds, which decides a run of
    /// `pi`, is a small part of the run.
    PiLong,
    /// One producer outruns many receivers: the memory and the drain of a
    /// backlog.
    Backlog,
}

impl Workload {
    pub const ALL: [Workload; 11] = [
        Workload::Counting,
        Workload::PingPong,
        Workload::Skynet,
        Workload::FanIn,
        Workload::Rings,
        Workload::RingsHops,
        Workload::Idle,
        Workload::Direct,
        Workload::Pi,
        Workload::PiLong,
        Workload::Backlog,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Counting => "counting",
            Workload::PingPong => "pingpong",
            Workload::Skynet => "skynet",
            Workload::FanIn => "fanin",
            Workload::Rings => "rings",
            Workload::RingsHops => "rings-hops",
            Workload::Idle => "idle",
            Workload::Direct => "direct",
            Workload::Pi => "pi",
            Workload::PiLong => "pi-long",
            Workload::Backlog => "backlog",
        }
    }

    pub fn parse(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// 1. One actor keeps a total: `adds` tells of `Add(amount)`, then one
///    `GetAndReset` ask whose reply is the answer.
#[derive(Clone, Debug)]
pub struct Counting {
    pub adds: u64,
    pub amount: u64,
}

/// 2. `pairs` client/echo pairs at once; each client sends `batch` pings, waits
///    for all their pongs, and repeats until `echoes_per_pair` came back.
///    The answer is the number of pongs each client received.
#[derive(Clone, Debug)]
pub struct PingPong {
    pub pairs: usize,
    pub echoes_per_pair: u64,
    pub batch: u64,
}

/// 3. A tree `levels` deep with `fan_out` children per node; the leaf with
///    ordinal `i` (0-based, `fan_out^levels` leaves) replies `i`, every parent
///    replies the sum of its children. The answer is the root's sum.
///    Ordinals: the root is 0; child `k` of the node with ordinal `o` is
///    `o * fan_out + k`.
#[derive(Clone, Debug)]
pub struct Skynet {
    pub levels: u32,
    pub fan_out: u64,
}

impl Skynet {
    pub fn leaves(&self) -> u64 {
        self.fan_out.pow(self.levels)
    }
}

/// 4. `senders` OS threads (`std::thread`) each tell one receiver
///    `per_sender` messages carrying `1`; the receiver adds them up and the
///    answer is its total once it reached `senders * per_sender`. The
///    threads are started first and released together
///    ([`crate::measure::release_threads`]); the clock starts at the release.
#[derive(Clone, Debug)]
pub struct FanIn {
    pub senders: usize,
    pub per_sender: u64,
}

/// 5. `rings` masters; each builds a ring of itself and `links` links `builds`
///    times. On each build it asks its own worker to factorise `target` (the
///    worker tells the collector the factors) and sends `token` around: a link
///    forwards the value to its neighbour and stops after forwarding 0; the
///    master sends the value it got back minus one, and when 0 came back it
///    builds the next ring. After the last ring it tells the collector it is
///    done. The collector's factor lists and done count are the answer.
#[derive(Clone, Debug)]
pub struct Rings {
    pub rings: usize,
    pub links: usize,
    pub token: u64,
    pub builds: usize,
    pub target: u64,
}

/// What the rings collector saw.
#[derive(Clone, Debug, Default)]
pub struct RingsReport {
    /// One entry per factorisation the collector received, factors ascending.
    pub factorisations: Vec<Vec<u64>>,
    pub masters_done: usize,
}

/// 6. `actors` actors with no state, each waiting for a message. See
///    [`IdleMemory`] for the order of the marks.
#[derive(Clone, Debug)]
pub struct Idle {
    pub actors: usize,
}

/// What an idle run saw: how many actors the census counted started and
/// stopped (see [`crate::measure::IDLE_CENSUS`]).
#[derive(Clone, Debug, Default)]
pub struct IdleReport {
    pub started: usize,
    pub stopped: usize,
}

/// 7. One actor receives `messages` `u64`s, `0, 1, 2, ...`, from the thread
///    that owns it, with no concurrency, and adds them into its state. The
///    answer is the state at the end.
#[derive(Clone, Debug)]
pub struct Direct {
    pub messages: u64,
}

/// 8. A coordinator hands `items` work items to `workers` worker actors;
///    item `i` is the `terms` Leibniz terms starting at term `i * terms`
///    (see [`leibniz`]). The answer is the coordinator's sum of the replies.
#[derive(Clone, Debug)]
pub struct Pi {
    pub items: u64,
    pub terms: u64,
    pub workers: usize,
}

/// 9. `receivers` actors each add up the values they are told and report
///    their total once `per_receiver` values came in. The runtime's workers
///    are first held busy ([`crate::measure::HeldWorkers`]), so nothing is
///    handled while one producer, an OS thread outside the runtime, tells
///    every message, round-robin: message `i` (from 0) carries `i` and goes
///    to receiver `i % receivers`. Then the workers are released and the
///    backlog drains. The clock runs from the first tell to the last total;
///    the fill is timed and memory sampled around it
///    ([`crate::measure::BacklogFill`]). The answer is each receiver's total.
#[derive(Clone, Debug)]
pub struct Backlog {
    pub receivers: usize,
    pub per_receiver: u64,
}

impl Backlog {
    pub fn messages(&self) -> u64 {
        self.receivers as u64 * self.per_receiver
    }

    /// Receiver `j`'s total: the sum of `r * receivers + j` for `r` in
    /// `0..per_receiver`.
    pub fn expected_total(&self, j: usize) -> u64 {
        let (n, k) = (self.receivers as u64, self.per_receiver);
        n * (k * (k - 1) / 2) + j as u64 * k
    }
}

impl Backlog {
    /// The measured part of a run, the same for every implementation. The
    /// caller has spawned the receivers (each sends `(its index, its
    /// total)` to `totals` when done) and started one holder per worker
    /// that calls [`HeldWorkers::hold`]; `tell(j, value)` tells receiver `j`.
    pub fn drive(
        &self,
        held: &HeldWorkers,
        totals: &std::sync::mpsc::Receiver<(usize, u64)>,
        mut tell: impl FnMut(usize, u64) -> Result<(), Failure>,
    ) -> crate::impls::Outcome<BacklogReport> {
        held.until_held();
        let fill = BacklogFill::start();
        let clock = Stopwatch::start();
        let n = self.receivers;
        let mut value = 0;
        for _ in 0..self.per_receiver {
            for j in 0..n {
                tell(j, value)?;
                value += 1;
            }
        }
        let filled = fill.filled();
        held.release();
        let mut by_receiver = vec![None; n];
        for _ in 0..n {
            let (j, total) = totals
                .recv_timeout(Duration::from_secs(600))
                .map_err(|_| Failure::failed("a receiver never reported: the run hung"))?;
            if j >= n || by_receiver[j].replace(total).is_some() {
                return Err(Failure::failed(format!(
                    "receiver {j} reported twice or does not exist"
                )));
            }
        }
        Ok(clock.stop(BacklogReport {
            totals: by_receiver
                .into_iter()
                .map(|t| t.unwrap_or_default())
                .collect(),
            filled,
        }))
    }
}

/// What a backlog run saw: each receiver's total, by receiver, and the fill.
#[derive(Clone, Debug)]
pub struct BacklogReport {
    pub totals: Vec<u64>,
    pub filled: crate::measure::Filled,
}

/// The sizes of one run: the published ones, or small ones for `--quick`.
#[derive(Clone, Debug)]
pub struct Sizes {
    pub counting: Counting,
    pub pingpong: PingPong,
    pub skynet: Skynet,
    pub fanin: FanIn,
    pub rings: Rings,
    pub rings_hops: Rings,
    pub idle: Idle,
    pub direct: Direct,
    pub pi: Pi,
    pub pi_long: Pi,
    pub backlog: Backlog,
}

impl Sizes {
    /// `threads` is the worker-thread count every implementation is given
    /// (cores by default); pingpong runs two pairs per thread and pi a pool
    /// of one worker per thread.
    pub fn new(quick: bool, threads: usize) -> Sizes {
        let pick = |full: u64, small: u64| if quick { small } else { full };
        Sizes {
            counting: Counting {
                adds: pick(3_000_000, 100_000),
                amount: 100,
            },
            pingpong: PingPong {
                pairs: 2 * threads,
                echoes_per_pair: pick(1_000_000, 10_000),
                batch: 100,
            },
            skynet: Skynet {
                levels: pick(6, 4) as u32,
                fan_out: 10,
            },
            fanin: FanIn {
                senders: 20,
                per_sender: pick(1_000_000, 10_000),
            },
            rings: Rings {
                rings: 20,
                links: 49,
                token: pick(10_000, 100),
                builds: pick(5, 2) as usize,
                target: RINGS_TARGET,
            },
            rings_hops: Rings {
                rings: 20,
                links: 49,
                token: pick(10_000, 100),
                builds: pick(5, 2) as usize,
                target: RINGS_HOPS_TARGET,
            },
            idle: Idle {
                actors: pick(1_000_000, 10_000) as usize,
            },
            direct: Direct {
                messages: pick(1_000_000_000, 10_000_000),
            },
            pi: Pi {
                items: pick(1_000, 100),
                terms: pick(10_000, 1_000),
                workers: threads,
            },
            pi_long: Pi {
                items: pick(10_000, 1_000),
                terms: pick(10_000, 1_000),
                workers: threads,
            },
            backlog: Backlog {
                receivers: pick(1_000, 100) as usize,
                per_receiver: pick(10_000, 1_000),
            },
        }
    }
}

/// The figures a successful run reports.
#[derive(Clone, Debug)]
pub struct Figures {
    pub elapsed: Duration,
    /// Messages the workload moved, for a messages-per-second figure; `None`
    /// where the workload reports wall time only.
    pub messages: Option<u64>,
    /// Idle only: (RSS with all actors alive − RSS before) / actors.
    pub bytes_per_actor: Option<f64>,
    /// Backlog only: (RSS with every message queued − RSS before) / messages.
    pub bytes_per_message: Option<f64>,
    /// Backlog only: how long the producer took to tell every message.
    pub fill: Option<Duration>,
}

/// Why a run produced no figures.
#[derive(Clone, Debug)]
pub enum Failure {
    /// The implementation cannot express this workload; the text says why.
    Unsupported(String),
    /// It ran and went wrong: a wrong answer, an error from the library.
    Failed(String),
}

impl Failure {
    pub fn failed(what: impl fmt::Display) -> Failure {
        Failure::Failed(what.to_string())
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The runner recognises this prefix: not a failure of the suite.
            Failure::Unsupported(why) => write!(f, "unsupported: {why}"),
            Failure::Failed(why) => f.write_str(why),
        }
    }
}

/// Runs `workload` once on `contender` and checks its answer.
pub fn run(
    workload: Workload,
    sizes: &Sizes,
    contender: &dyn Contender,
) -> Result<Figures, Failure> {
    match workload {
        Workload::Counting => {
            let p = &sizes.counting;
            let run = contender.counting(p)?;
            expect_eq("counting reply", run.value, p.adds * p.amount)?;
            Ok(run.figures(Some(p.adds)))
        }
        Workload::PingPong => {
            let p = &sizes.pingpong;
            let run = contender.pingpong(p)?;
            expect_eq(
                "pairs that finished",
                run.value.len() as u64,
                p.pairs as u64,
            )?;
            for (pair, &echoes) in run.value.iter().enumerate() {
                expect_eq(
                    &format!("echoes returned to pair {pair}"),
                    echoes,
                    p.echoes_per_pair,
                )?;
            }
            Ok(run.figures(Some(2 * p.echoes_per_pair * p.pairs as u64)))
        }
        Workload::Skynet => {
            let p = &sizes.skynet;
            let run = contender.skynet(p)?;
            let leaves = p.leaves();
            expect_eq("skynet sum", run.value, leaves * (leaves - 1) / 2)?;
            Ok(run.figures(None))
        }
        Workload::FanIn => {
            let p = &sizes.fanin;
            let run = contender.fanin(p)?;
            let sent = p.senders as u64 * p.per_sender;
            expect_eq("fan-in count", run.value, sent)?;
            Ok(run.figures(Some(sent)))
        }
        Workload::Rings => run_rings(&sizes.rings, contender),
        Workload::RingsHops => run_rings(&sizes.rings_hops, contender),
        Workload::Idle => {
            let p = &sizes.idle;
            let mut memory = IdleMemory::default();
            let run = contender.idle(p, &mut memory)?;
            expect_eq(
                "idle actors started",
                run.value.started as u64,
                p.actors as u64,
            )?;
            expect_eq(
                "idle actors stopped",
                run.value.stopped as u64,
                p.actors as u64,
            )?;
            let per_actor = memory.check(p.actors)?;
            let mut figures = run.figures(None);
            figures.bytes_per_actor = Some(per_actor);
            Ok(figures)
        }
        Workload::Direct => {
            let p = &sizes.direct;
            let run = contender.direct(p)?;
            expect_eq("direct sum", run.value, p.messages * (p.messages - 1) / 2)?;
            Ok(run.figures(Some(p.messages)))
        }
        Workload::Pi => run_pi(&sizes.pi, contender),
        Workload::PiLong => run_pi(&sizes.pi_long, contender),
        Workload::Backlog => {
            let p = &sizes.backlog;
            let run = contender.backlog(p)?;
            expect_eq(
                "receivers that reported",
                run.value.totals.len() as u64,
                p.receivers as u64,
            )?;
            for (j, &total) in run.value.totals.iter().enumerate() {
                expect_eq(
                    &format!("total of receiver {j}"),
                    total,
                    p.expected_total(j),
                )?;
            }
            let mut figures = run.figures(Some(p.messages()));
            let filled = run.value.filled;
            figures.fill = Some(filled.fill);
            figures.bytes_per_message =
                filled.backlog_bytes.map(|b| b as f64 / p.messages() as f64);
            Ok(figures)
        }
    }
}

fn expect_eq(what: &str, got: u64, expected: u64) -> Result<(), Failure> {
    if got == expected {
        Ok(())
    } else {
        Err(Failure::Failed(format!(
            "wrong answer: {what} was {got}, expected {expected}"
        )))
    }
}

impl<T> Timed<T> {
    fn figures(&self, messages: Option<u64>) -> Figures {
        Figures {
            elapsed: self.elapsed,
            messages,
            bytes_per_actor: None,
            bytes_per_message: None,
            fill: None,
        }
    }
}

/// The prime factors of `n`, ascending, by trial division: 2, then odd
/// divisors while `d * d <= n`. Every implementation of rings calls this, so
/// the computation is the same for all; peers in other languages implement
/// the same loop (see README.md). Never inlined, for the reason given at
/// [`leibniz`]: one compiled copy for every implementation.
#[inline(never)]
pub fn factorise(mut n: u64) -> Vec<u64> {
    let mut factors = Vec::new();
    while n > 1 && n.is_multiple_of(2) {
        factors.push(2);
        n /= 2;
    }
    let mut d = 3;
    while d * d <= n {
        if n.is_multiple_of(d) {
            factors.push(d);
            n /= d;
        } else {
            d += 2;
        }
    }
    if n > 1 {
        factors.push(n);
    }
    factors
}

/// Workloads 8 and `pi-long`: the coordinator's sum, checked against the
/// same series summed in one loop.
fn run_pi(p: &Pi, contender: &dyn Contender) -> Result<Figures, Failure> {
    let run = contender.pi(p)?;
    let reference = leibniz(0, p.items * p.terms);
    // Written so that a NaN sum fails too.
    let close = (run.value - reference).abs() <= 1e-9;
    if !close {
        return Err(Failure::Failed(format!(
            "pi sum {} differs from the single loop's {reference} by more than 1e-9",
            run.value
        )));
    }
    Ok(run.figures(None))
}

/// Workloads 5 and `rings-hops`: the same rings, checked against the
/// factors of their target.
fn run_rings(p: &Rings, contender: &dyn Contender) -> Result<Figures, Failure> {
    let expected = if p.target == RINGS_TARGET {
        RINGS_FACTORS.to_vec()
    } else {
        factorise(p.target)
    };
    let run = contender.rings(p)?;
    let report = &run.value;
    expect_eq(
        "factorisations received",
        report.factorisations.len() as u64,
        (p.rings * p.builds) as u64,
    )?;
    if let Some(wrong) = report.factorisations.iter().find(|f| f[..] != expected[..]) {
        return Err(Failure::Failed(format!(
            "factorisation of {} gave {wrong:?}, expected {expected:?}",
            p.target
        )));
    }
    expect_eq("masters done", report.masters_done as u64, p.rings as u64)?;
    // Token hops, the factorisation request and reply of every ring,
    // and each master's done.
    let rings = (p.rings * p.builds) as u64;
    let messages = rings * (p.token + 1) * (p.links as u64 + 1) + 2 * rings + p.rings as u64;
    Ok(run.figures(Some(messages)))
}

/// The sum of the `terms` Leibniz terms `4 * (-1)^k / (2k + 1)` for
/// `k = start .. start + terms`.
///
/// Never inlined, so every implementation runs the same machine code for
/// the work itself: inlined into each caller, the compiler vectorised some
/// copies and kept a branch per term in others (seen with `perf annotate`
/// on 2026-11-26), which made workload 8 compare code generation, not
/// runtimes.
#[inline(never)]
pub fn leibniz(start: u64, terms: u64) -> f64 {
    let mut sum = 0.0;
    for k in start..start + terms {
        let term = 4.0 / (2 * k + 1) as f64;
        sum += if k % 2 == 0 { term } else { -term };
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factorises_the_rings_target() {
        assert_eq!(factorise(RINGS_TARGET), RINGS_FACTORS);
        assert_eq!(factorise(12), vec![2, 2, 3]);
        assert_eq!(factorise(97), vec![97]);
    }

    /// Answers counting wrongly and leaves every other workload unwritten.
    struct Wrong;

    impl Contender for Wrong {
        fn counting(&self, _: &Counting) -> crate::impls::Outcome<u64> {
            Ok(crate::measure::Stopwatch::start().stop(1))
        }
    }

    #[test]
    fn a_wrong_answer_is_a_failure_not_a_figure() {
        let sizes = Sizes::new(true, 2);
        match run(Workload::Counting, &sizes, &Wrong) {
            Err(Failure::Failed(why)) => assert!(why.contains("expected 10000000"), "{why}"),
            other => panic!("expected a failure, got {other:?}"),
        }
        assert!(matches!(
            run(Workload::Skynet, &sizes, &Wrong),
            Err(Failure::Unsupported(_))
        ));
    }

    #[test]
    fn leibniz_parts_add_up() {
        let whole = leibniz(0, 100_000);
        let parts: f64 = (0..100).map(|i| leibniz(i * 1_000, 1_000)).sum();
        assert!((whole - parts).abs() < 1e-12);
        assert!((whole - std::f64::consts::PI).abs() < 1e-4);
    }
}
