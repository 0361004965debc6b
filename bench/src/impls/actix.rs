//! actix: actors as the actix docs write them: `Actor` with
//! `Context<Self>`, `#[derive(Message)]` messages with one `Handler` each,
//! `do_send` for tells (it ignores the mailbox capacity, so no workload
//! waits on backpressure), `send(..).await` for asks, work started in
//! `started`. An actix actor lives on one arbiter (a single-threaded event
//! loop); to use the cores, the suite starts one `Arbiter` per thread given
//! and spreads the workload's independent parts over them (pairs, masters,
//! the root's subtrees, pi workers). Single-actor workloads (counting,
//! fan-in's receiver, idle) run on the System's own arbiter, as the docs'
//! `#[actix::main]` examples do.

use std::future::Future;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::Outcome;
use crate::measure::{join_threads, release_threads, IdleMemory, Stopwatch, IDLE_CENSUS};
use crate::workload::{
    factorise, leibniz, Counting, Direct, Failure, FanIn, Idle, IdleReport, Pi, PingPong, Rings,
    RingsReport, Skynet,
};

pub struct Actix {
    threads: usize,
}

impl Actix {
    pub fn new(threads: usize) -> Actix {
        Actix { threads }
    }

    /// Runs `driver` on a fresh System's own thread, handing it one arbiter
    /// per thread.
    fn run<T, F: Future<Output = T>>(&self, driver: impl FnOnce(Vec<ArbiterHandle>) -> F) -> T {
        let system = System::new();
        system.block_on(async {
            let arbiters: Vec<Arbiter> = (0..self.threads).map(|_| Arbiter::new()).collect();
            let out = driver(arbiters.iter().map(Arbiter::handle).collect()).await;
            for arbiter in &arbiters {
                arbiter.stop();
            }
            out
        })
    }
}

fn gone<T>(_: T) -> Failure {
    Failure::failed("an actor stopped before it replied")
}

// 1. counting

struct Counter {
    total: u64,
}

impl Actor for Counter {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "()")]
struct Add(u64);

#[derive(Message)]
#[rtype(result = "u64")]
struct GetAndReset;

impl Handler<Add> for Counter {
    type Result = ();

    fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) {
        self.total += n;
    }
}

impl Handler<GetAndReset> for Counter {
    type Result = u64;

    fn handle(&mut self, _: GetAndReset, _: &mut Context<Self>) -> u64 {
        std::mem::take(&mut self.total)
    }
}

// 2. pingpong

#[derive(Message)]
#[rtype(result = "()")]
struct Ping;

#[derive(Message)]
#[rtype(result = "()")]
struct Pong;

struct Echo {
    client: Addr<Client>,
}

impl Actor for Echo {
    type Context = Context<Self>;
}

impl Handler<Ping> for Echo {
    type Result = ();

    fn handle(&mut self, _: Ping, _: &mut Context<Self>) {
        self.client.do_send(Pong);
    }
}

struct Client {
    echo: Option<Addr<Echo>>,
    total: u64,
    batch: u64,
    received: u64,
    outstanding: u64,
    done: Option<oneshot::Sender<u64>>,
}

impl Client {
    fn send_batch(&mut self) {
        let echo = self.echo.as_ref().expect("echo set");
        self.outstanding = self.batch.min(self.total - self.received);
        for _ in 0..self.outstanding {
            echo.do_send(Ping);
        }
    }
}

impl Actor for Client {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        self.send_batch();
    }
}

impl Handler<Pong> for Client {
    type Result = ();

    fn handle(&mut self, _: Pong, ctx: &mut Context<Self>) {
        self.received += 1;
        self.outstanding -= 1;
        if self.outstanding > 0 {
            return;
        }
        if self.received < self.total {
            self.send_batch();
        } else {
            if let Some(done) = self.done.take() {
                let _ = done.send(self.received);
            }
            self.echo = None;
            ctx.stop();
        }
    }
}

// 3. skynet

enum Parent {
    Node(Addr<Node>),
    Root(Option<oneshot::Sender<u64>>),
}

impl Parent {
    fn reply(&mut self, sum: u64) {
        match self {
            Parent::Node(node) => node.do_send(Sum(sum)),
            Parent::Root(done) => {
                if let Some(done) = done.take() {
                    let _ = done.send(sum);
                }
            }
        }
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Sum(u64);

struct Node {
    parent: Parent,
    ordinal: u64,
    level: u32,
    shape: Skynet,
    /// The root's children go one per arbiter, round robin; every other
    /// node's children stay on their parent's arbiter.
    arbiters: Vec<ArbiterHandle>,
    waiting: u64,
    sum: u64,
}

impl Actor for Node {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.level == self.shape.levels {
            self.parent.reply(self.ordinal);
            ctx.stop();
            return;
        }
        self.waiting = self.shape.fan_out;
        for k in 0..self.shape.fan_out {
            let child = Node {
                parent: Parent::Node(ctx.address()),
                ordinal: self.ordinal * self.shape.fan_out + k,
                level: self.level + 1,
                shape: self.shape.clone(),
                arbiters: Vec::new(),
                waiting: 0,
                sum: 0,
            };
            if self.arbiters.is_empty() {
                child.start();
            } else {
                let arbiter = &self.arbiters[k as usize % self.arbiters.len()];
                Node::start_in_arbiter(arbiter, move |_| child);
            }
        }
    }
}

impl Handler<Sum> for Node {
    type Result = ();

    fn handle(&mut self, Sum(n): Sum, ctx: &mut Context<Self>) {
        self.sum += n;
        self.waiting -= 1;
        if self.waiting == 0 {
            self.parent.reply(self.sum);
            ctx.stop();
        }
    }
}

// 4. fan-in

#[derive(Message)]
#[rtype(result = "()")]
struct One(u64);

struct Tally {
    count: u64,
    expected: u64,
    done: Option<oneshot::Sender<u64>>,
}

impl Actor for Tally {
    type Context = Context<Self>;
}

impl Handler<One> for Tally {
    type Result = ();

    fn handle(&mut self, One(n): One, ctx: &mut Context<Self>) {
        self.count += n;
        if self.count == self.expected {
            if let Some(done) = self.done.take() {
                let _ = done.send(self.count);
            }
            ctx.stop();
        }
    }
}

// 5. rings

#[derive(Message)]
#[rtype(result = "()")]
struct Token(u64);

#[derive(Clone)]
enum Next {
    Link(Addr<Link>),
    Master(Addr<Master>),
}

impl Next {
    fn pass(&self, token: u64) {
        match self {
            Next::Link(link) => link.do_send(Token(token)),
            Next::Master(master) => master.do_send(Token(token)),
        }
    }
}

struct Link {
    next: Next,
}

impl Actor for Link {
    type Context = Context<Self>;
}

impl Handler<Token> for Link {
    type Result = ();

    fn handle(&mut self, Token(token): Token, ctx: &mut Context<Self>) {
        self.next.pass(token);
        if token == 0 {
            ctx.stop();
        }
    }
}

struct Master {
    shape: Rings,
    collector: Addr<Collector>,
    worker: Option<Addr<Worker>>,
    first: Option<Addr<Link>>,
    built: usize,
}

impl Master {
    /// Builds a fresh ring, asks for a factorisation, sends the token.
    fn build_ring(&mut self, ctx: &mut Context<Self>) {
        self.built += 1;
        self.worker
            .as_ref()
            .expect("worker started")
            .do_send(Factorise(self.shape.target));
        let mut next = Next::Master(ctx.address());
        for _ in 0..self.shape.links {
            next = Next::Link(Link { next }.start());
        }
        let Next::Link(first) = next else {
            unreachable!("a ring has links")
        };
        first.do_send(Token(self.shape.token));
        self.first = Some(first);
    }
}

impl Actor for Master {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.worker = Some(
            Worker {
                collector: self.collector.clone(),
            }
            .start(),
        );
        self.build_ring(ctx);
    }
}

impl Handler<Token> for Master {
    type Result = ();

    fn handle(&mut self, Token(token): Token, ctx: &mut Context<Self>) {
        if token > 0 {
            self.first
                .as_ref()
                .expect("ring built")
                .do_send(Token(token - 1));
        } else if self.built < self.shape.builds {
            self.build_ring(ctx);
        } else {
            self.collector.do_send(MasterDone);
            self.first = None;
            self.worker = None;
            ctx.stop();
        }
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Factorise(u64);

struct Worker {
    collector: Addr<Collector>,
}

impl Actor for Worker {
    type Context = Context<Self>;
}

impl Handler<Factorise> for Worker {
    type Result = ();

    fn handle(&mut self, Factorise(n): Factorise, _: &mut Context<Self>) {
        self.collector.do_send(Factors(factorise(n)));
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Factors(Vec<u64>);

#[derive(Message)]
#[rtype(result = "()")]
struct MasterDone;

struct Collector {
    expected_factorisations: usize,
    expected_masters: usize,
    report: RingsReport,
    done: Option<oneshot::Sender<RingsReport>>,
}

impl Collector {
    fn finish_if_complete(&mut self, ctx: &mut Context<Self>) {
        if self.report.factorisations.len() == self.expected_factorisations
            && self.report.masters_done == self.expected_masters
        {
            if let Some(done) = self.done.take() {
                let _ = done.send(std::mem::take(&mut self.report));
            }
            ctx.stop();
        }
    }
}

impl Actor for Collector {
    type Context = Context<Self>;
}

impl Handler<Factors> for Collector {
    type Result = ();

    fn handle(&mut self, Factors(f): Factors, ctx: &mut Context<Self>) {
        self.report.factorisations.push(f);
        self.finish_if_complete(ctx);
    }
}

impl Handler<MasterDone> for Collector {
    type Result = ();

    fn handle(&mut self, _: MasterDone, ctx: &mut Context<Self>) {
        self.report.masters_done += 1;
        self.finish_if_complete(ctx);
    }
}

// 6. idle

struct Sleeper;

impl Actor for Sleeper {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        IDLE_CENSUS.started();
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        IDLE_CENSUS.stopped();
    }
}

// 8. pi

#[derive(Message)]
#[rtype(result = "()")]
struct Item(u64);

#[derive(Message)]
#[rtype(result = "()")]
struct Partial(f64);

struct PiWorker {
    terms: u64,
    coordinator: Addr<Coordinator>,
}

impl Actor for PiWorker {
    type Context = Context<Self>;
}

impl Handler<Item> for PiWorker {
    type Result = ();

    fn handle(&mut self, Item(item): Item, _: &mut Context<Self>) {
        self.coordinator
            .do_send(Partial(leibniz(item * self.terms, self.terms)));
    }
}

struct Coordinator {
    shape: Pi,
    arbiters: Vec<ArbiterHandle>,
    waiting: u64,
    sum: f64,
    done: Option<oneshot::Sender<f64>>,
}

impl Actor for Coordinator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let workers: Vec<Addr<PiWorker>> = (0..self.shape.workers)
            .map(|w| {
                let worker = PiWorker {
                    terms: self.shape.terms,
                    coordinator: ctx.address(),
                };
                PiWorker::start_in_arbiter(&self.arbiters[w % self.arbiters.len()], move |_| worker)
            })
            .collect();
        for item in 0..self.shape.items {
            workers[item as usize % workers.len()].do_send(Item(item));
        }
    }
}

impl Handler<Partial> for Coordinator {
    type Result = ();

    fn handle(&mut self, Partial(x): Partial, ctx: &mut Context<Self>) {
        self.sum += x;
        self.waiting -= 1;
        if self.waiting == 0 {
            if let Some(done) = self.done.take() {
                let _ = done.send(self.sum);
            }
            ctx.stop();
        }
    }
}

impl super::Contender for Actix {
    fn counting(&self, p: &Counting) -> Outcome<u64> {
        self.run(|_| async move {
            let clock = Stopwatch::start();
            let counter = Counter { total: 0 }.start();
            for _ in 0..p.adds {
                counter.do_send(Add(p.amount));
            }
            let total = counter.send(GetAndReset).await.map_err(Failure::failed)?;
            Ok(clock.stop(total))
        })
    }

    fn pingpong(&self, p: &PingPong) -> Outcome<Vec<u64>> {
        self.run(|arbiters| async move {
            let clock = Stopwatch::start();
            let mut results = Vec::with_capacity(p.pairs);
            for pair in 0..p.pairs {
                let (done, result) = oneshot::channel();
                let (total, batch) = (p.echoes_per_pair, p.batch);
                // Both actors of a pair on the same arbiter.
                Client::start_in_arbiter(&arbiters[pair % arbiters.len()], move |ctx| Client {
                    echo: Some(
                        Echo {
                            client: ctx.address(),
                        }
                        .start(),
                    ),
                    total,
                    batch,
                    received: 0,
                    outstanding: 0,
                    done: Some(done),
                });
                results.push(result);
            }
            let mut echoes = Vec::with_capacity(p.pairs);
            for result in results {
                echoes.push(result.await.map_err(gone)?);
            }
            Ok(clock.stop(echoes))
        })
    }

    fn skynet(&self, p: &Skynet) -> Outcome<u64> {
        self.run(|arbiters| async move {
            let clock = Stopwatch::start();
            let (done, sum) = oneshot::channel();
            Node {
                parent: Parent::Root(Some(done)),
                ordinal: 0,
                level: 0,
                shape: p.clone(),
                arbiters,
                waiting: 0,
                sum: 0,
            }
            .start();
            Ok(clock.stop(sum.await.map_err(gone)?))
        })
    }

    fn fanin(&self, p: &FanIn) -> Outcome<u64> {
        self.run(|_| async move {
            let (done, count) = oneshot::channel();
            let tally = Tally {
                count: 0,
                expected: p.senders as u64 * p.per_sender,
                done: Some(done),
            }
            .start();
            let per_sender = p.per_sender;
            let (clock, senders) = release_threads(p.senders, || {
                let tally = tally.clone();
                move || {
                    for _ in 0..per_sender {
                        tally.do_send(One(1));
                    }
                }
            });
            drop(tally);
            let run = clock.stop(count.await.map_err(gone)?);
            join_threads(senders)?;
            Ok(run)
        })
    }

    fn rings(&self, p: &Rings) -> Outcome<RingsReport> {
        self.run(|arbiters| async move {
            let clock = Stopwatch::start();
            let (done, report) = oneshot::channel();
            let collector = Collector {
                expected_factorisations: p.rings * p.builds,
                expected_masters: p.rings,
                report: RingsReport::default(),
                done: Some(done),
            }
            .start();
            for ring in 0..p.rings {
                let master = Master {
                    shape: p.clone(),
                    collector: collector.clone(),
                    worker: None,
                    first: None,
                    built: 0,
                };
                Master::start_in_arbiter(&arbiters[ring % arbiters.len()], move |_| master);
            }
            drop(collector);
            Ok(clock.stop(report.await.map_err(gone)?))
        })
    }

    fn idle(&self, p: &Idle, memory: &mut IdleMemory) -> Outcome<IdleReport> {
        let n = p.actors;
        self.run(|_| async move {
            memory.before_spawn();
            let clock = Stopwatch::start();
            let actors: Vec<Addr<Sleeper>> = (0..n).map(|_| Sleeper.start()).collect();
            IDLE_CENSUS.until_started(n).await;
            let run = clock.stop(());
            memory.all_spawned();
            // An actix actor stops once no address to it is left.
            drop(actors);
            IDLE_CENSUS.until_stopped(n).await;
            memory.all_stopped();
            Ok(run.map(|()| IDLE_CENSUS.report()))
        })
    }

    fn direct(&self, _: &Direct) -> Outcome<u64> {
        Err(Failure::Unsupported(
            "actix delivers every message through the actor's mailbox and its arbiter's event loop; \
             there is no synchronous dispatch on the owning thread"
                .into(),
        ))
    }

    fn pi(&self, p: &Pi) -> Outcome<f64> {
        self.run(|arbiters| async move {
            let clock = Stopwatch::start();
            let (done, sum) = oneshot::channel();
            Coordinator {
                waiting: p.items,
                shape: p.clone(),
                arbiters,
                sum: 0.0,
                done: Some(done),
            }
            .start();
            Ok(clock.stop(sum.await.map_err(gone)?))
        })
    }
}
