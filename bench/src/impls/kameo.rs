//! kameo: actors as the kameo book writes them: `#[derive(Actor)]` or an
//! `Actor` impl with `on_start`, one `Message<M>` impl per message, spawned
//! with an unbounded mailbox (`spawn_with_mailbox(.., mailbox::unbounded())`,
//! since no workload here needs backpressure), messages sent with `tell`,
//! replies with `ask`. Runs on a tokio multi-thread runtime with one worker
//! per thread given; each workload's driver is a task on it.

use std::future::Future;

use kameo::actor::{ActorRef, Spawn, WeakActorRef};
use kameo::error::{ActorStopReason, Infallible};
use kameo::mailbox;
use kameo::message::{Context, Message};
use kameo::Actor;
use tokio::sync::oneshot;

use super::Outcome;
use crate::measure::{
    join_threads, release_threads, HeldWorkers, IdleMemory, Stopwatch, IDLE_CENSUS,
};
use crate::workload::{
    factorise, leibniz, Backlog, BacklogReport, Counting, Direct, Failure, FanIn, Idle, IdleReport,
    Pi, PingPong, Rings, RingsReport, Skynet,
};

pub struct Kameo {
    threads: usize,
}

impl Kameo {
    pub fn new(threads: usize) -> Kameo {
        Kameo { threads }
    }

    fn runtime(&self) -> tokio::runtime::Runtime {
        super::tokio_runtime(self.threads)
    }

    /// Runs `driver` as a task on a fresh multi-thread runtime.
    fn run<T: Send + 'static>(&self, driver: impl Future<Output = T> + Send + 'static) -> T {
        super::run_on_tokio(self.threads, driver)
    }
}

fn spawn<A: Actor>(args: A::Args) -> ActorRef<A> {
    A::spawn_with_mailbox(args, mailbox::unbounded())
}

fn gone<T>(_: T) -> Failure {
    Failure::failed("an actor stopped before it replied")
}

// 1. counting

#[derive(Actor)]
struct Counter {
    total: u64,
}

struct Add(u64);
struct GetAndReset;

impl Message<Add> for Counter {
    type Reply = ();

    async fn handle(&mut self, Add(n): Add, _: &mut Context<Self, Self::Reply>) {
        self.total += n;
    }
}

impl Message<GetAndReset> for Counter {
    type Reply = u64;

    async fn handle(&mut self, _: GetAndReset, _: &mut Context<Self, Self::Reply>) -> u64 {
        std::mem::take(&mut self.total)
    }
}

// 2. pingpong

#[derive(Actor)]
struct Echo {
    client: ActorRef<Client>,
}

#[derive(Actor)]
struct Client {
    echo: Option<ActorRef<Echo>>,
    total: u64,
    batch: u64,
    received: u64,
    outstanding: u64,
    done: Option<oneshot::Sender<u64>>,
}

struct Ping;
struct Pong;
struct Serve(ActorRef<Echo>);

impl Client {
    async fn send_batch(&mut self) {
        let echo = self.echo.as_ref().expect("echo set");
        self.outstanding = self.batch.min(self.total - self.received);
        for _ in 0..self.outstanding {
            echo.tell(Ping).await.expect("echo alive");
        }
    }
}

impl Message<Ping> for Echo {
    type Reply = ();

    async fn handle(&mut self, _: Ping, _: &mut Context<Self, Self::Reply>) {
        let _ = self.client.tell(Pong).await;
    }
}

impl Message<Serve> for Client {
    type Reply = ();

    async fn handle(&mut self, Serve(echo): Serve, _: &mut Context<Self, Self::Reply>) {
        self.echo = Some(echo);
        self.send_batch().await;
    }
}

impl Message<Pong> for Client {
    type Reply = ();

    async fn handle(&mut self, _: Pong, ctx: &mut Context<Self, Self::Reply>) {
        self.received += 1;
        self.outstanding -= 1;
        if self.outstanding > 0 {
            return;
        }
        if self.received < self.total {
            self.send_batch().await;
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
    Node(ActorRef<Node>),
    Root(Option<oneshot::Sender<u64>>),
}

impl Parent {
    async fn reply(&mut self, sum: u64) {
        match self {
            Parent::Node(node) => {
                let _ = node.tell(Sum(sum)).await;
            }
            Parent::Root(done) => {
                if let Some(done) = done.take() {
                    let _ = done.send(sum);
                }
            }
        }
    }
}

struct Node {
    parent: Parent,
    waiting: u64,
    sum: u64,
}

struct NodeArgs {
    parent: Parent,
    ordinal: u64,
    level: u32,
    shape: Skynet,
}

struct Sum(u64);

impl Actor for Node {
    type Args = NodeArgs;
    type Error = Infallible;

    async fn on_start(mut args: NodeArgs, me: ActorRef<Self>) -> Result<Self, Infallible> {
        let shape = &args.shape;
        if args.level == shape.levels {
            // A leaf replies its ordinal and, with no one holding a
            // reference to it any more, stops.
            args.parent.reply(args.ordinal).await;
            return Ok(Node {
                parent: args.parent,
                waiting: 0,
                sum: 0,
            });
        }
        for k in 0..shape.fan_out {
            spawn::<Node>(NodeArgs {
                parent: Parent::Node(me.clone()),
                ordinal: args.ordinal * shape.fan_out + k,
                level: args.level + 1,
                shape: shape.clone(),
            });
        }
        Ok(Node {
            parent: args.parent,
            waiting: shape.fan_out,
            sum: 0,
        })
    }
}

impl Message<Sum> for Node {
    type Reply = ();

    async fn handle(&mut self, Sum(n): Sum, ctx: &mut Context<Self, Self::Reply>) {
        self.sum += n;
        self.waiting -= 1;
        if self.waiting == 0 {
            self.parent.reply(self.sum).await;
            ctx.stop();
        }
    }
}

// 9. backlog

#[derive(Actor)]
struct BacklogReceiver {
    j: usize,
    total: u64,
    count: u64,
    per_receiver: u64,
    totals: std::sync::mpsc::Sender<(usize, u64)>,
}

struct Value64(u64);

impl Message<Value64> for BacklogReceiver {
    type Reply = ();

    async fn handle(&mut self, Value64(value): Value64, _: &mut Context<Self, Self::Reply>) {
        self.total += value;
        self.count += 1;
        if self.count == self.per_receiver {
            let _ = self.totals.send((self.j, self.total));
        }
    }
}

/// Blocks the worker it runs on until the backlog is filled.
#[derive(Actor)]
struct Holder(std::sync::Arc<HeldWorkers>);

struct Hold;

impl Message<Hold> for Holder {
    type Reply = ();

    async fn handle(&mut self, _: Hold, _: &mut Context<Self, Self::Reply>) {
        self.0.hold();
    }
}

// 4. fan-in

#[derive(Actor)]
struct Tally {
    count: u64,
    expected: u64,
    done: Option<oneshot::Sender<u64>>,
}

struct One(u64);

impl Message<One> for Tally {
    type Reply = ();

    async fn handle(&mut self, One(n): One, _: &mut Context<Self, Self::Reply>) {
        self.count += n;
        if self.count == self.expected {
            if let Some(done) = self.done.take() {
                let _ = done.send(self.count);
            }
        }
    }
}

// 5. rings

#[derive(Clone)]
enum Next {
    Link(ActorRef<Link>),
    Master(ActorRef<Master>),
}

struct Token(u64);

impl Next {
    async fn pass(&self, token: u64) {
        let _ = match self {
            Next::Link(link) => link.tell(Token(token)).await,
            Next::Master(master) => master.tell(Token(token)).await,
        };
    }
}

#[derive(Actor)]
struct Link {
    next: Next,
}

impl Message<Token> for Link {
    type Reply = ();

    async fn handle(&mut self, Token(token): Token, ctx: &mut Context<Self, Self::Reply>) {
        self.next.pass(token).await;
        if token == 0 {
            ctx.stop();
        }
    }
}

struct Master {
    shape: Rings,
    first: Option<ActorRef<Link>>,
    built: usize,
    worker: ActorRef<Worker>,
    collector: ActorRef<Collector>,
}

impl Master {
    /// Builds a fresh ring, asks for a factorisation, sends the token.
    async fn build_ring(&mut self, me: &ActorRef<Master>) {
        self.built += 1;
        let _ = self.worker.tell(Factorise(self.shape.target)).await;
        let mut next = Next::Master(me.clone());
        for _ in 0..self.shape.links {
            next = Next::Link(spawn::<Link>(Link { next }));
        }
        let Next::Link(first) = next else {
            unreachable!("a ring has links")
        };
        let _ = first.tell(Token(self.shape.token)).await;
        self.first = Some(first);
    }
}

impl Actor for Master {
    type Args = (Rings, ActorRef<Collector>);
    type Error = Infallible;

    async fn on_start(
        (shape, collector): Self::Args,
        me: ActorRef<Self>,
    ) -> Result<Self, Infallible> {
        let worker = spawn::<Worker>(Worker {
            collector: collector.clone(),
        });
        let mut master = Master {
            shape,
            first: None,
            built: 0,
            worker,
            collector,
        };
        master.build_ring(&me).await;
        Ok(master)
    }
}

impl Message<Token> for Master {
    type Reply = ();

    async fn handle(&mut self, Token(token): Token, ctx: &mut Context<Self, Self::Reply>) {
        if token > 0 {
            let _ = self
                .first
                .as_ref()
                .expect("ring built")
                .tell(Token(token - 1))
                .await;
        } else if self.built < self.shape.builds {
            let me = ctx.actor_ref().clone();
            self.build_ring(&me).await;
        } else {
            self.first = None;
            let _ = self.collector.tell(MasterDone).await;
            ctx.stop();
        }
    }
}

#[derive(Actor)]
struct Worker {
    collector: ActorRef<Collector>,
}

struct Factorise(u64);

impl Message<Factorise> for Worker {
    type Reply = ();

    async fn handle(&mut self, Factorise(n): Factorise, _: &mut Context<Self, Self::Reply>) {
        let _ = self.collector.tell(Factors(factorise(n))).await;
    }
}

#[derive(Actor)]
struct Collector {
    expected_factorisations: usize,
    expected_masters: usize,
    report: RingsReport,
    done: Option<oneshot::Sender<RingsReport>>,
}

struct Factors(Vec<u64>);
struct MasterDone;

impl Collector {
    fn finish_if_complete(&mut self) {
        if self.report.factorisations.len() == self.expected_factorisations
            && self.report.masters_done == self.expected_masters
        {
            if let Some(done) = self.done.take() {
                let _ = done.send(std::mem::take(&mut self.report));
            }
        }
    }
}

impl Message<Factors> for Collector {
    type Reply = ();

    async fn handle(&mut self, Factors(f): Factors, _: &mut Context<Self, Self::Reply>) {
        self.report.factorisations.push(f);
        self.finish_if_complete();
    }
}

impl Message<MasterDone> for Collector {
    type Reply = ();

    async fn handle(&mut self, _: MasterDone, _: &mut Context<Self, Self::Reply>) {
        self.report.masters_done += 1;
        self.finish_if_complete();
    }
}

// 6. idle

struct Sleeper;

impl Actor for Sleeper {
    type Args = Self;
    type Error = Infallible;

    async fn on_start(sleeper: Self, _: ActorRef<Self>) -> Result<Self, Infallible> {
        IDLE_CENSUS.started();
        Ok(sleeper)
    }

    async fn on_stop(
        &mut self,
        _: WeakActorRef<Self>,
        _: ActorStopReason,
    ) -> Result<(), Infallible> {
        IDLE_CENSUS.stopped();
        Ok(())
    }
}

// 8. pi

#[derive(Actor)]
struct PiWorker {
    terms: u64,
    coordinator: ActorRef<Coordinator>,
}

struct Item(u64);
struct Partial(f64);

impl Message<Item> for PiWorker {
    type Reply = ();

    async fn handle(&mut self, Item(item): Item, _: &mut Context<Self, Self::Reply>) {
        let _ = self
            .coordinator
            .tell(Partial(leibniz(item * self.terms, self.terms)))
            .await;
    }
}

struct Coordinator {
    waiting: u64,
    sum: f64,
    done: Option<oneshot::Sender<f64>>,
}

impl Actor for Coordinator {
    type Args = (Pi, oneshot::Sender<f64>);
    type Error = Infallible;

    async fn on_start((p, done): Self::Args, me: ActorRef<Self>) -> Result<Self, Infallible> {
        let workers: Vec<_> = (0..p.workers)
            .map(|_| {
                spawn::<PiWorker>(PiWorker {
                    terms: p.terms,
                    coordinator: me.clone(),
                })
            })
            .collect();
        for item in 0..p.items {
            let _ = workers[item as usize % workers.len()]
                .tell(Item(item))
                .await;
        }
        Ok(Coordinator {
            waiting: p.items,
            sum: 0.0,
            done: Some(done),
        })
    }
}

impl Message<Partial> for Coordinator {
    type Reply = ();

    async fn handle(&mut self, Partial(x): Partial, ctx: &mut Context<Self, Self::Reply>) {
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

impl super::Contender for Kameo {
    fn counting(&self, p: &Counting) -> Outcome<u64> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let counter = spawn::<Counter>(Counter { total: 0 });
            for _ in 0..p.adds {
                counter.tell(Add(p.amount)).await.map_err(Failure::failed)?;
            }
            let total = counter.ask(GetAndReset).await.map_err(Failure::failed)?;
            Ok(clock.stop(total))
        })
    }

    fn pingpong(&self, p: &PingPong) -> Outcome<Vec<u64>> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let mut results = Vec::with_capacity(p.pairs);
            for _ in 0..p.pairs {
                let (done, result) = oneshot::channel();
                let client = spawn::<Client>(Client {
                    echo: None,
                    total: p.echoes_per_pair,
                    batch: p.batch,
                    received: 0,
                    outstanding: 0,
                    done: Some(done),
                });
                let echo = spawn::<Echo>(Echo {
                    client: client.clone(),
                });
                client.tell(Serve(echo)).await.map_err(Failure::failed)?;
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
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let (done, sum) = oneshot::channel();
            spawn::<Node>(NodeArgs {
                parent: Parent::Root(Some(done)),
                ordinal: 0,
                level: 0,
                shape: p,
            });
            Ok(clock.stop(sum.await.map_err(gone)?))
        })
    }

    fn backlog(&self, p: &Backlog) -> Outcome<BacklogReport> {
        // The producer is the calling thread (every worker is held while it
        // tells), with kameo's documented send from a blocking thread.
        let runtime = super::tokio_runtime(self.threads);
        let _context = runtime.enter();
        let (to_totals, totals) = std::sync::mpsc::channel();
        let receivers: Vec<ActorRef<BacklogReceiver>> = (0..p.receivers)
            .map(|j| {
                spawn::<BacklogReceiver>(BacklogReceiver {
                    j,
                    total: 0,
                    count: 0,
                    per_receiver: p.per_receiver,
                    totals: to_totals.clone(),
                })
            })
            .collect();
        let held = HeldWorkers::new(self.threads);
        for _ in 0..self.threads {
            let holder = spawn::<Holder>(Holder(held.clone()));
            holder.tell(Hold).blocking_send().map_err(gone)?;
        }
        p.drive(&held, &totals, |j, value| {
            receivers[j]
                .tell(Value64(value))
                .blocking_send()
                .map_err(gone)
        })
    }

    fn fanin(&self, p: &FanIn) -> Outcome<u64> {
        let p = p.clone();
        self.run(async move {
            let (done, count) = oneshot::channel();
            let tally = spawn::<Tally>(Tally {
                count: 0,
                expected: p.senders as u64 * p.per_sender,
                done: Some(done),
            });
            let (clock, senders) = release_threads(p.senders, || {
                let tally = tally.clone();
                move || {
                    for _ in 0..p.per_sender {
                        // kameo's documented send from a blocking thread.
                        tally.tell(One(1)).blocking_send().expect("receiver alive");
                    }
                }
            });
            let run = clock.stop(count.await.map_err(gone)?);
            join_threads(senders)?;
            Ok(run)
        })
    }

    fn rings(&self, p: &Rings) -> Outcome<RingsReport> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let (done, report) = oneshot::channel();
            let collector = spawn::<Collector>(Collector {
                expected_factorisations: p.rings * p.builds,
                expected_masters: p.rings,
                report: RingsReport::default(),
                done: Some(done),
            });
            for _ in 0..p.rings {
                spawn::<Master>((p.clone(), collector.clone()));
            }
            drop(collector);
            Ok(clock.stop(report.await.map_err(gone)?))
        })
    }

    fn idle(&self, p: &Idle, memory: &mut IdleMemory) -> Outcome<IdleReport> {
        let n = p.actors;
        let runtime = self.runtime();
        memory.before_spawn();
        let (actors, run) = runtime.block_on(async move {
            tokio::spawn(async move {
                let clock = Stopwatch::start();
                let actors: Vec<ActorRef<Sleeper>> =
                    (0..n).map(|_| spawn::<Sleeper>(Sleeper)).collect();
                IDLE_CENSUS.until_started(n).await;
                (actors, clock.stop(()))
            })
            .await
            .expect("driver task")
        });
        memory.all_spawned();
        // Dropping the last reference to a kameo actor stops it.
        drop(actors);
        runtime.block_on(IDLE_CENSUS.until_stopped(n));
        memory.all_stopped();
        Ok(run.map(|()| IDLE_CENSUS.report()))
    }

    fn direct(&self, _: &Direct) -> Outcome<u64> {
        Err(Failure::Unsupported(
            "kameo handlers run only in the actor's tokio task, reached through its mailbox; \
             there is no synchronous dispatch on the owning thread"
                .into(),
        ))
    }

    fn pi(&self, p: &Pi) -> Outcome<f64> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let (done, sum) = oneshot::channel();
            spawn::<Coordinator>((p, done));
            Ok(clock.stop(sum.await.map_err(gone)?))
        })
    }
}
