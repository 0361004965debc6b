//! troubadour: each workload written the way its docs show — typed
//! messages, `tell`/`ask`, children spawned from `started`, `LocalActor` for
//! direct dispatch — on a system with one worker per thread given.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use troubadour::prelude::*;

use super::Outcome;
use crate::measure::{
    join_threads, release_threads, HeldWorkers, IdleMemory, Stopwatch, IDLE_CENSUS,
};
use crate::workload::{
    factorise, leibniz, Backlog, BacklogReport, Counting, Direct, Failure, FanIn, Idle, IdleReport,
    Pi, PingPong, Rings, RingsReport, Skynet,
};

/// How long a driver waits for a result before calling the run hung.
const HANG: Duration = Duration::from_secs(600);

pub struct Troubadour {
    threads: usize,
    observe: bool,
}

impl Troubadour {
    pub fn new(threads: usize) -> Troubadour {
        Troubadour {
            threads,
            observe: false,
        }
    }

    /// On systems that observe their actors (`ActorSystemBuilder::observe`).
    pub fn observed(threads: usize) -> Troubadour {
        Troubadour {
            threads,
            observe: true,
        }
    }

    fn system(&self) -> ActorSystem {
        let builder = ActorSystem::builder()
            .worker_threads(self.threads)
            .ask_timeout(HANG);
        if self.observe {
            builder.observe().build()
        } else {
            builder.build()
        }
    }
}

fn failed(e: impl std::fmt::Display) -> Failure {
    Failure::failed(e)
}

fn wait<T>(rx: &mpsc::Receiver<T>) -> Result<T, Failure> {
    rx.recv_timeout(HANG)
        .map_err(|_| Failure::failed("no result: an actor stopped or the run hung"))
}

// 1. counting --------------------------------------------------------------

struct Counter {
    total: u64,
}
impl Actor for Counter {}

struct Add(u64);
impl Message for Add {
    type Reply = ();
}
impl Handler<Add> for Counter {
    fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) {
        self.total += n;
    }
}

struct GetAndReset;
impl Message for GetAndReset {
    type Reply = u64;
}
impl Handler<GetAndReset> for Counter {
    fn handle(&mut self, _: GetAndReset, _: &mut Context<Self>) -> u64 {
        std::mem::take(&mut self.total)
    }
}

/// Spawns the counter, tells it every `Add`, then asks for the total.
struct Sender;
impl Actor for Sender {}

struct SendAll {
    adds: u64,
    amount: u64,
}
impl Message for SendAll {
    type Reply = Result<u64, String>;
}
impl AsyncHandler<SendAll> for Sender {
    async fn handle(&mut self, p: SendAll, ctx: &mut Context<Self>) -> Result<u64, String> {
        let counter = ctx.spawn(Counter { total: 0 }).map_err(|e| e.to_string())?;
        for _ in 0..p.adds {
            counter.tell(Add(p.amount)).map_err(|e| e.to_string())?;
        }
        counter.ask(GetAndReset).await.map_err(|e| e.to_string())
    }
}

// 2. pingpong --------------------------------------------------------------

struct Client {
    echo: Option<ActorRef<Echo>>,
    total: u64,
    batch: u64,
    received: u64,
    outstanding: u64,
    done: mpsc::Sender<u64>,
}
impl Actor for Client {}

struct Echo {
    client: ActorRef<Client>,
}
impl Actor for Echo {}

struct Start(ActorRef<Echo>);
impl Message for Start {
    type Reply = ();
}
struct Ping;
impl Message for Ping {
    type Reply = ();
}
struct Pong;
impl Message for Pong {
    type Reply = ();
}

impl Client {
    fn send_batch(&mut self) {
        let n = self.batch.min(self.total - self.received);
        if let Some(echo) = &self.echo {
            for _ in 0..n {
                let _ = echo.tell(Ping);
            }
        }
        self.outstanding = n;
    }
}

impl Handler<Start> for Client {
    fn handle(&mut self, Start(echo): Start, _: &mut Context<Self>) {
        self.echo = Some(echo);
        self.send_batch();
    }
}

impl Handler<Pong> for Client {
    fn handle(&mut self, _: Pong, ctx: &mut Context<Self>) {
        self.received += 1;
        self.outstanding -= 1;
        if self.received == self.total {
            let _ = self.done.send(self.received);
            ctx.stop();
        } else if self.outstanding == 0 {
            self.send_batch();
        }
    }
}

impl Handler<Ping> for Echo {
    fn handle(&mut self, _: Ping, _: &mut Context<Self>) {
        let _ = self.client.tell(Pong);
    }
}

// 3. skynet ----------------------------------------------------------------

struct Node {
    parent: Recipient<Sum>,
    ordinal: u64,
    level: u32,
    p: Skynet,
    sum: u64,
    pending: u64,
}

struct Sum(u64);
impl Message for Sum {
    type Reply = ();
}

impl Actor for Node {
    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.level == self.p.levels {
            let _ = self.parent.tell(Sum(self.ordinal));
            ctx.stop();
            return;
        }
        let me = ctx.myself().recipient::<Sum, _>();
        for k in 0..self.p.fan_out {
            let child = Node {
                parent: me.clone(),
                ordinal: self.ordinal * self.p.fan_out + k,
                level: self.level + 1,
                p: self.p.clone(),
                sum: 0,
                pending: 0,
            };
            if ctx.spawn(child).is_err() {
                ctx.fail("could not spawn a child");
                return;
            }
        }
        self.pending = self.p.fan_out;
    }
}

impl Handler<Sum> for Node {
    fn handle(&mut self, Sum(n): Sum, ctx: &mut Context<Self>) {
        self.sum += n;
        self.pending -= 1;
        if self.pending == 0 {
            let _ = self.parent.tell(Sum(self.sum));
            ctx.stop();
        }
    }
}

/// Hands a result to the waiting driver thread.
struct Report<T: Send + 'static>(mpsc::Sender<T>);
impl<T: Send + 'static> Actor for Report<T> {}
impl Handler<Sum> for Report<u64> {
    fn handle(&mut self, Sum(n): Sum, _: &mut Context<Self>) {
        let _ = self.0.send(n);
    }
}

// 4. fan-in ----------------------------------------------------------------

struct Receiver {
    count: u64,
    expected: u64,
    done: mpsc::Sender<u64>,
}
impl Actor for Receiver {}
struct One(u64);
impl Message for One {
    type Reply = ();
}
impl Handler<One> for Receiver {
    fn handle(&mut self, One(n): One, _: &mut Context<Self>) {
        self.count += n;
        if self.count == self.expected {
            let _ = self.done.send(self.count);
        }
    }
}

// 9. backlog ---------------------------------------------------------------

struct BacklogReceiver {
    j: usize,
    total: u64,
    count: u64,
    per_receiver: u64,
    totals: mpsc::Sender<(usize, u64)>,
}
impl Actor for BacklogReceiver {}
struct Value64(u64);
impl Message for Value64 {
    type Reply = ();
}
impl Handler<Value64> for BacklogReceiver {
    fn handle(&mut self, Value64(value): Value64, _: &mut Context<Self>) {
        self.total += value;
        self.count += 1;
        if self.count == self.per_receiver {
            let _ = self.totals.send((self.j, self.total));
        }
    }
}

/// Blocks the worker it runs on until the backlog is filled.
struct Holder(Arc<HeldWorkers>);
impl Actor for Holder {}
struct Hold;
impl Message for Hold {
    type Reply = ();
}
impl Handler<Hold> for Holder {
    fn handle(&mut self, _: Hold, _: &mut Context<Self>) {
        self.0.hold();
    }
}

// 5. rings -----------------------------------------------------------------

struct Token(u64);
impl Message for Token {
    type Reply = ();
}

struct Link {
    next: Recipient<Token>,
}
impl Actor for Link {}
impl Handler<Token> for Link {
    fn handle(&mut self, Token(t): Token, ctx: &mut Context<Self>) {
        let _ = self.next.tell(Token(t));
        if t == 0 {
            ctx.stop();
        }
    }
}

struct Factorise(u64);
impl Message for Factorise {
    type Reply = ();
}
struct FactorWorker {
    collector: ActorRef<Collector>,
}
impl Actor for FactorWorker {}
impl Handler<Factorise> for FactorWorker {
    fn handle(&mut self, Factorise(n): Factorise, _: &mut Context<Self>) {
        let _ = self.collector.tell(Collected::Factors(factorise(n)));
    }
}

enum Collected {
    Factors(Vec<u64>),
    MasterDone,
}
impl Message for Collected {
    type Reply = ();
}
struct Collector {
    report: RingsReport,
    expected_factorisations: usize,
    masters: usize,
    done: mpsc::Sender<RingsReport>,
}
impl Actor for Collector {}
impl Handler<Collected> for Collector {
    fn handle(&mut self, c: Collected, _: &mut Context<Self>) {
        match c {
            Collected::Factors(f) => self.report.factorisations.push(f),
            Collected::MasterDone => self.report.masters_done += 1,
        }
        if self.report.factorisations.len() == self.expected_factorisations
            && self.report.masters_done == self.masters
        {
            let _ = self.done.send(std::mem::take(&mut self.report));
        }
    }
}

struct Master {
    p: Rings,
    collector: ActorRef<Collector>,
    worker: Option<ActorRef<FactorWorker>>,
    first: Option<Recipient<Token>>,
    built: usize,
}

impl Master {
    /// Builds a fresh ring behind this master and starts the token on it.
    fn build(&mut self, ctx: &mut Context<Self>) {
        self.built += 1;
        if let Some(w) = &self.worker {
            let _ = w.tell(Factorise(self.p.target));
        }
        let mut next = ctx.myself().recipient::<Token, _>();
        for _ in 0..self.p.links {
            match ctx.spawn(Link { next }) {
                Ok(link) => next = link.recipient(),
                Err(_) => return ctx.fail("could not spawn a link"),
            }
        }
        let _ = next.tell(Token(self.p.token));
        self.first = Some(next);
    }
}

impl Actor for Master {
    fn started(&mut self, ctx: &mut Context<Self>) {
        let collector = self.collector.clone();
        self.worker = ctx.spawn(FactorWorker { collector }).ok();
        self.build(ctx);
    }
}

impl Handler<Token> for Master {
    fn handle(&mut self, Token(t): Token, ctx: &mut Context<Self>) {
        if t > 0 {
            if let Some(first) = &self.first {
                let _ = first.tell(Token(t - 1));
            }
        } else if self.built < self.p.builds {
            self.build(ctx);
        } else {
            let _ = self.collector.tell(Collected::MasterDone);
        }
    }
}

// 6. idle ------------------------------------------------------------------

struct Sleeper;
impl Actor for Sleeper {
    fn started(&mut self, _: &mut Context<Self>) {
        IDLE_CENSUS.started();
    }
    fn stopped(&mut self, _: &mut Context<Self>) {
        IDLE_CENSUS.stopped();
    }
}

// 7. direct ----------------------------------------------------------------

struct Accumulator {
    total: u64,
}
impl Actor for Accumulator {}
struct Value(u64);
impl Message for Value {
    type Reply = ();
}
impl Handler<Value> for Accumulator {
    #[inline]
    fn handle(&mut self, Value(n): Value, _: &mut Context<Self>) {
        self.total = self.total.wrapping_add(n);
    }
}

// 8. pi --------------------------------------------------------------------

struct PiWorker {
    terms: u64,
    coordinator: ActorRef<Coordinator>,
}
impl Actor for PiWorker {}
struct Item(u64);
impl Message for Item {
    type Reply = ();
}
impl Handler<Item> for PiWorker {
    fn handle(&mut self, Item(i): Item, _: &mut Context<Self>) {
        let _ = self
            .coordinator
            .tell(Partial(leibniz(i * self.terms, self.terms)));
    }
}

/// Hands out the items and sums the workers' replies.
struct Coordinator {
    items: u64,
    terms: u64,
    workers: usize,
    received: u64,
    sum: f64,
    done: mpsc::Sender<f64>,
}
impl Actor for Coordinator {
    fn started(&mut self, ctx: &mut Context<Self>) {
        let me = ctx.myself();
        let mut workers = Vec::with_capacity(self.workers);
        for _ in 0..self.workers {
            let worker = PiWorker {
                terms: self.terms,
                coordinator: me.clone(),
            };
            match ctx.spawn(worker) {
                Ok(w) => workers.push(w),
                Err(_) => return ctx.fail("could not spawn a worker"),
            }
        }
        for i in 0..self.items {
            let _ = workers[i as usize % workers.len()].tell(Item(i));
        }
    }
}
struct Partial(f64);
impl Message for Partial {
    type Reply = ();
}
impl Handler<Partial> for Coordinator {
    fn handle(&mut self, Partial(x): Partial, ctx: &mut Context<Self>) {
        self.sum += x;
        self.received += 1;
        if self.received == self.items {
            let _ = self.done.send(self.sum);
            ctx.stop();
        }
    }
}

impl super::Contender for Troubadour {
    fn counting(&self, p: &Counting) -> Outcome<u64> {
        // The sender is an actor too, so the run uses the system's worker
        // threads only, like every other implementation's driver task.
        let system = self.system();
        let clock = Stopwatch::start();
        let sender = system.spawn(Sender).map_err(failed)?;
        let total = sender
            .ask(SendAll {
                adds: p.adds,
                amount: p.amount,
            })
            .wait()
            .map_err(failed)?
            .map_err(failed)?;
        Ok(clock.stop(total))
    }

    fn pingpong(&self, p: &PingPong) -> Outcome<Vec<u64>> {
        let system = self.system();
        let (done, results) = mpsc::channel();
        let clock = Stopwatch::start();
        for _ in 0..p.pairs {
            let client = system
                .spawn(Client {
                    echo: None,
                    total: p.echoes_per_pair,
                    batch: p.batch,
                    received: 0,
                    outstanding: 0,
                    done: done.clone(),
                })
                .map_err(failed)?;
            let echo = system
                .spawn(Echo {
                    client: client.clone(),
                })
                .map_err(failed)?;
            client.tell(Start(echo)).map_err(failed)?;
        }
        let echoes = (0..p.pairs)
            .map(|_| wait(&results))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(clock.stop(echoes))
    }

    fn skynet(&self, p: &Skynet) -> Outcome<u64> {
        let system = self.system();
        let (tx, rx) = mpsc::channel();
        let clock = Stopwatch::start();
        let report = system.spawn(Report(tx)).map_err(failed)?;
        system
            .spawn(Node {
                parent: report.recipient(),
                ordinal: 0,
                level: 0,
                p: p.clone(),
                sum: 0,
                pending: 0,
            })
            .map_err(failed)?;
        let sum = wait(&rx)?;
        Ok(clock.stop(sum))
    }

    fn backlog(&self, p: &Backlog) -> Outcome<BacklogReport> {
        let system = self.system();
        let (to_totals, totals) = mpsc::channel();
        let receivers = (0..p.receivers)
            .map(|j| {
                system.spawn(BacklogReceiver {
                    j,
                    total: 0,
                    count: 0,
                    per_receiver: p.per_receiver,
                    totals: to_totals.clone(),
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(failed)?;
        let held = HeldWorkers::new(self.threads);
        for _ in 0..self.threads {
            let holder = system.spawn(Holder(held.clone())).map_err(failed)?;
            holder.tell(Hold).map_err(failed)?;
        }
        p.drive(&held, &totals, |j, value| {
            receivers[j].tell(Value64(value)).map_err(failed)
        })
    }

    fn fanin(&self, p: &FanIn) -> Outcome<u64> {
        let system = self.system();
        let (done, result) = mpsc::channel();
        let receiver = system
            .spawn(Receiver {
                count: 0,
                expected: p.senders as u64 * p.per_sender,
                done,
            })
            .map_err(failed)?;
        let per_sender = p.per_sender;
        let (clock, senders) = release_threads(p.senders, || {
            let receiver = receiver.clone();
            move || {
                for _ in 0..per_sender {
                    receiver.tell(One(1)).expect("receiver alive");
                }
            }
        });
        let run = clock.stop(wait(&result)?);
        join_threads(senders)?;
        Ok(run)
    }

    fn rings(&self, p: &Rings) -> Outcome<RingsReport> {
        let system = self.system();
        let (done, result) = mpsc::channel();
        let clock = Stopwatch::start();
        let collector = system
            .spawn(Collector {
                report: RingsReport::default(),
                expected_factorisations: p.rings * p.builds,
                masters: p.rings,
                done,
            })
            .map_err(failed)?;
        for _ in 0..p.rings {
            system
                .spawn(Master {
                    p: p.clone(),
                    collector: collector.clone(),
                    worker: None,
                    first: None,
                    built: 0,
                })
                .map_err(failed)?;
        }
        Ok(clock.stop(wait(&result)?))
    }

    fn idle(&self, p: &Idle, memory: &mut IdleMemory) -> Outcome<IdleReport> {
        let system = self.system();
        memory.before_spawn();
        let clock = Stopwatch::start();
        let actors = (0..p.actors)
            .map(|_| system.spawn(Sleeper))
            .collect::<Result<Vec<_>, _>>()
            .map_err(failed)?;
        system.block_on(IDLE_CENSUS.until_started(p.actors));
        let run = clock.stop(());
        memory.all_spawned();
        for a in &actors {
            a.stop();
        }
        drop(actors);
        system.block_on(IDLE_CENSUS.until_stopped(p.actors));
        memory.all_stopped();
        Ok(run.map(|()| IDLE_CENSUS.report()))
    }

    fn direct(&self, p: &Direct) -> Outcome<u64> {
        let system = self.system();
        let mut acc = LocalActor::new(&system, Accumulator { total: 0 }).map_err(failed)?;
        let clock = Stopwatch::start();
        // One message at a time, each through the handler with its
        // `Context`, as `handle` would; `handle_all` keeps the state in a
        // local meanwhile (the loop a user writes to feed one actor).
        acc.handle_all((0..p.messages).map(|n| Value(std::hint::black_box(n))))
            .map_err(|_| failed("the actor stopped"))?;
        let total = acc
            .actor()
            .map(|a| a.total)
            .ok_or_else(|| failed("stopped"))?;
        Ok(clock.stop(total))
    }

    fn pi(&self, p: &Pi) -> Outcome<f64> {
        let system = self.system();
        let (done, result) = mpsc::channel();
        let clock = Stopwatch::start();
        system
            .spawn(Coordinator {
                items: p.items,
                terms: p.terms,
                workers: p.workers,
                received: 0,
                sum: 0.0,
                done,
            })
            .map_err(failed)?;
        Ok(clock.stop(wait(&result)?))
    }
}
