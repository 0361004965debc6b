//! ractor: actors as the ractor docs write them: a stateless behaviour struct
//! implementing `Actor` with `Msg`/`State`/`Arguments`, state built in
//! `pre_start`, work started in `post_start`, messages sent with `cast`
//! (ractor's mailboxes are unbounded), replies through an `RpcReplyPort`
//! with `call!`, actors stopped with `stop`. Runs on a tokio multi-thread
//! runtime with one worker per thread given; each workload's driver is a
//! task on it.

use std::future::Future;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::oneshot;

use super::Outcome;
use crate::measure::{
    join_threads, release_threads, HeldWorkers, IdleMemory, Stopwatch, IDLE_CENSUS,
};
use crate::workload::{
    factorise, leibniz, Backlog, BacklogReport, Counting, Direct, Failure, FanIn, Idle, IdleReport,
    Pi, PingPong, Rings, RingsReport, Skynet,
};

pub struct Ractor {
    threads: usize,
}

impl Ractor {
    pub fn new(threads: usize) -> Ractor {
        Ractor { threads }
    }

    fn runtime(&self) -> tokio::runtime::Runtime {
        super::tokio_runtime(self.threads)
    }

    /// Runs `driver` as a task on a fresh multi-thread runtime.
    fn run<T: Send + 'static>(&self, driver: impl Future<Output = T> + Send + 'static) -> T {
        super::run_on_tokio(self.threads, driver)
    }
}

type Handled = Result<(), ActorProcessingErr>;

async fn spawn<A: Actor>(actor: A, args: A::Arguments) -> ActorRef<A::Msg> {
    let (actor_ref, _) = Actor::spawn(None, actor, args).await.expect("spawn actor");
    actor_ref
}

fn gone<T>(_: T) -> Failure {
    Failure::failed("an actor stopped before it replied")
}

// 1. counting

struct Counter;

enum CounterMsg {
    Add(u64),
    GetAndReset(RpcReplyPort<u64>),
}

impl Actor for Counter {
    type Msg = CounterMsg;
    type State = u64;
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<CounterMsg>, _: ()) -> Result<u64, ActorProcessingErr> {
        Ok(0)
    }

    async fn handle(&self, _: ActorRef<CounterMsg>, msg: CounterMsg, total: &mut u64) -> Handled {
        match msg {
            CounterMsg::Add(n) => *total += n,
            CounterMsg::GetAndReset(reply) => reply.send(std::mem::take(total))?,
        }
        Ok(())
    }
}

// 2. pingpong

struct Ping;
struct Echo;

impl Actor for Echo {
    type Msg = Ping;
    type State = ActorRef<ClientMsg>;
    type Arguments = ActorRef<ClientMsg>;

    async fn pre_start(
        &self,
        _: ActorRef<Ping>,
        client: ActorRef<ClientMsg>,
    ) -> Result<ActorRef<ClientMsg>, ActorProcessingErr> {
        Ok(client)
    }

    async fn handle(
        &self,
        _: ActorRef<Ping>,
        _: Ping,
        client: &mut ActorRef<ClientMsg>,
    ) -> Handled {
        let _ = client.cast(ClientMsg::Pong);
        Ok(())
    }
}

enum ClientMsg {
    Serve(ActorRef<Ping>),
    Pong,
}

struct Client;

struct ClientState {
    echo: Option<ActorRef<Ping>>,
    total: u64,
    batch: u64,
    received: u64,
    outstanding: u64,
    done: Option<oneshot::Sender<u64>>,
}

impl ClientState {
    fn send_batch(&mut self) -> Handled {
        let echo = self.echo.as_ref().expect("echo set");
        self.outstanding = self.batch.min(self.total - self.received);
        for _ in 0..self.outstanding {
            echo.cast(Ping)?;
        }
        Ok(())
    }
}

impl Actor for Client {
    type Msg = ClientMsg;
    type State = ClientState;
    type Arguments = ClientState;

    async fn pre_start(
        &self,
        _: ActorRef<ClientMsg>,
        state: ClientState,
    ) -> Result<ClientState, ActorProcessingErr> {
        Ok(state)
    }

    async fn handle(
        &self,
        me: ActorRef<ClientMsg>,
        msg: ClientMsg,
        s: &mut ClientState,
    ) -> Handled {
        match msg {
            ClientMsg::Serve(echo) => {
                s.echo = Some(echo);
                s.send_batch()?;
            }
            ClientMsg::Pong => {
                s.received += 1;
                s.outstanding -= 1;
                if s.outstanding > 0 {
                    return Ok(());
                }
                if s.received < s.total {
                    s.send_batch()?;
                } else {
                    if let Some(done) = s.done.take() {
                        let _ = done.send(s.received);
                    }
                    if let Some(echo) = s.echo.take() {
                        echo.stop(None);
                    }
                    me.stop(None);
                }
            }
        }
        Ok(())
    }
}

// 3. skynet

enum Parent {
    Node(ActorRef<Sum>),
    Root(Option<oneshot::Sender<u64>>),
}

impl Parent {
    fn reply(&mut self, sum: u64) {
        match self {
            Parent::Node(node) => {
                let _ = node.cast(Sum(sum));
            }
            Parent::Root(done) => {
                if let Some(done) = done.take() {
                    let _ = done.send(sum);
                }
            }
        }
    }
}

struct Sum(u64);
struct Node;

struct NodeArgs {
    parent: Parent,
    ordinal: u64,
    level: u32,
    shape: Skynet,
}

struct NodeState {
    args: NodeArgs,
    waiting: u64,
    sum: u64,
}

impl Actor for Node {
    type Msg = Sum;
    type State = NodeState;
    type Arguments = NodeArgs;

    /// Children are spawned in `pre_start`, as ractor's own factory spawns
    /// its workers: `spawn` runs the child's `pre_start` before returning,
    /// so the tree is built depth first and a leaf has replied before its
    /// parent spawns the next one.
    async fn pre_start(
        &self,
        me: ActorRef<Sum>,
        mut args: NodeArgs,
    ) -> Result<NodeState, ActorProcessingErr> {
        let shape = args.shape.clone();
        if args.level == shape.levels {
            args.parent.reply(args.ordinal);
            return Ok(NodeState {
                args,
                waiting: 0,
                sum: 0,
            });
        }
        for k in 0..shape.fan_out {
            let child = NodeArgs {
                parent: Parent::Node(me.clone()),
                ordinal: args.ordinal * shape.fan_out + k,
                level: args.level + 1,
                shape: shape.clone(),
            };
            Actor::spawn(None, Node, child).await?;
        }
        Ok(NodeState {
            args,
            waiting: shape.fan_out,
            sum: 0,
        })
    }

    async fn post_start(&self, me: ActorRef<Sum>, s: &mut NodeState) -> Handled {
        if s.waiting == 0 {
            // A leaf: it replied in `pre_start`.
            me.stop(None);
        }
        Ok(())
    }

    async fn handle(&self, me: ActorRef<Sum>, Sum(n): Sum, s: &mut NodeState) -> Handled {
        s.sum += n;
        s.waiting -= 1;
        if s.waiting == 0 {
            s.args.parent.reply(s.sum);
            me.stop(None);
        }
        Ok(())
    }
}

// 4. fan-in

struct One(u64);
struct Tally;

struct TallyState {
    count: u64,
    expected: u64,
    done: Option<oneshot::Sender<u64>>,
}

impl Actor for Tally {
    type Msg = One;
    type State = TallyState;
    type Arguments = TallyState;

    async fn pre_start(
        &self,
        _: ActorRef<One>,
        state: TallyState,
    ) -> Result<TallyState, ActorProcessingErr> {
        Ok(state)
    }

    async fn handle(&self, me: ActorRef<One>, One(n): One, s: &mut TallyState) -> Handled {
        s.count += n;
        if s.count == s.expected {
            if let Some(done) = s.done.take() {
                let _ = done.send(s.count);
            }
            me.stop(None);
        }
        Ok(())
    }
}

// 9. backlog

struct BacklogReceiver;

struct BacklogState {
    j: usize,
    total: u64,
    count: u64,
    per_receiver: u64,
    totals: std::sync::mpsc::Sender<(usize, u64)>,
}

struct Value64(u64);

impl Actor for BacklogReceiver {
    type Msg = Value64;
    type State = BacklogState;
    type Arguments = BacklogState;

    async fn pre_start(
        &self,
        _: ActorRef<Value64>,
        state: BacklogState,
    ) -> Result<BacklogState, ActorProcessingErr> {
        Ok(state)
    }

    async fn handle(
        &self,
        _: ActorRef<Value64>,
        Value64(v): Value64,
        s: &mut BacklogState,
    ) -> Handled {
        s.total += v;
        s.count += 1;
        if s.count == s.per_receiver {
            let _ = s.totals.send((s.j, s.total));
        }
        Ok(())
    }
}

/// Blocks the worker it runs on until the backlog is filled.
struct Holder;

impl Actor for Holder {
    type Msg = ();
    type State = std::sync::Arc<HeldWorkers>;
    type Arguments = std::sync::Arc<HeldWorkers>;

    async fn pre_start(
        &self,
        _: ActorRef<()>,
        held: std::sync::Arc<HeldWorkers>,
    ) -> Result<std::sync::Arc<HeldWorkers>, ActorProcessingErr> {
        Ok(held)
    }

    async fn handle(
        &self,
        _: ActorRef<()>,
        _: (),
        held: &mut std::sync::Arc<HeldWorkers>,
    ) -> Handled {
        held.hold();
        Ok(())
    }
}

// 5. rings

struct Token(u64);
struct Link;

impl Actor for Link {
    type Msg = Token;
    type State = ActorRef<Token>;
    type Arguments = ActorRef<Token>;

    async fn pre_start(
        &self,
        _: ActorRef<Token>,
        next: ActorRef<Token>,
    ) -> Result<ActorRef<Token>, ActorProcessingErr> {
        Ok(next)
    }

    async fn handle(
        &self,
        me: ActorRef<Token>,
        Token(token): Token,
        next: &mut ActorRef<Token>,
    ) -> Handled {
        let _ = next.cast(Token(token));
        if token == 0 {
            me.stop(None);
        }
        Ok(())
    }
}

struct Master;

struct MasterState {
    shape: Rings,
    collector: ActorRef<CollectorMsg>,
    worker: Option<ActorRef<Factorise>>,
    first: Option<ActorRef<Token>>,
    built: usize,
}

impl MasterState {
    /// Builds a fresh ring, asks for a factorisation, sends the token.
    async fn build_ring(&mut self, me: &ActorRef<Token>) -> Handled {
        self.built += 1;
        self.worker
            .as_ref()
            .expect("worker spawned")
            .cast(Factorise(self.shape.target))?;
        let mut next = me.clone();
        for _ in 0..self.shape.links {
            next = spawn(Link, next).await;
        }
        next.cast(Token(self.shape.token))?;
        self.first = Some(next);
        Ok(())
    }
}

impl Actor for Master {
    type Msg = Token;
    type State = MasterState;
    type Arguments = (Rings, ActorRef<CollectorMsg>);

    async fn pre_start(
        &self,
        _: ActorRef<Token>,
        (shape, collector): Self::Arguments,
    ) -> Result<MasterState, ActorProcessingErr> {
        Ok(MasterState {
            shape,
            collector,
            worker: None,
            first: None,
            built: 0,
        })
    }

    async fn post_start(&self, me: ActorRef<Token>, s: &mut MasterState) -> Handled {
        s.worker = Some(spawn(Worker, s.collector.clone()).await);
        s.build_ring(&me).await
    }

    async fn handle(
        &self,
        me: ActorRef<Token>,
        Token(token): Token,
        s: &mut MasterState,
    ) -> Handled {
        if token > 0 {
            s.first
                .as_ref()
                .expect("ring built")
                .cast(Token(token - 1))?;
        } else if s.built < s.shape.builds {
            s.build_ring(&me).await?;
        } else {
            s.collector.cast(CollectorMsg::MasterDone)?;
            if let Some(worker) = s.worker.take() {
                // `drain`, not `stop`: a stop signal overtakes the worker's
                // queued factorisations, and the collector would wait for
                // one that never comes.
                worker.drain()?;
            }
            me.stop(None);
        }
        Ok(())
    }
}

struct Factorise(u64);
struct Worker;

impl Actor for Worker {
    type Msg = Factorise;
    type State = ActorRef<CollectorMsg>;
    type Arguments = ActorRef<CollectorMsg>;

    async fn pre_start(
        &self,
        _: ActorRef<Factorise>,
        collector: ActorRef<CollectorMsg>,
    ) -> Result<ActorRef<CollectorMsg>, ActorProcessingErr> {
        Ok(collector)
    }

    async fn handle(
        &self,
        _: ActorRef<Factorise>,
        Factorise(n): Factorise,
        collector: &mut ActorRef<CollectorMsg>,
    ) -> Handled {
        collector.cast(CollectorMsg::Factors(factorise(n)))?;
        Ok(())
    }
}

enum CollectorMsg {
    Factors(Vec<u64>),
    MasterDone,
}

struct Collector;

struct CollectorState {
    expected_factorisations: usize,
    expected_masters: usize,
    report: RingsReport,
    done: Option<oneshot::Sender<RingsReport>>,
}

impl Actor for Collector {
    type Msg = CollectorMsg;
    type State = CollectorState;
    type Arguments = CollectorState;

    async fn pre_start(
        &self,
        _: ActorRef<CollectorMsg>,
        s: CollectorState,
    ) -> Result<CollectorState, ActorProcessingErr> {
        Ok(s)
    }

    async fn handle(
        &self,
        me: ActorRef<CollectorMsg>,
        msg: CollectorMsg,
        s: &mut CollectorState,
    ) -> Handled {
        match msg {
            CollectorMsg::Factors(f) => s.report.factorisations.push(f),
            CollectorMsg::MasterDone => s.report.masters_done += 1,
        }
        if s.report.factorisations.len() == s.expected_factorisations
            && s.report.masters_done == s.expected_masters
        {
            if let Some(done) = s.done.take() {
                let _ = done.send(std::mem::take(&mut s.report));
            }
            me.stop(None);
        }
        Ok(())
    }
}

// 6. idle

struct Sleeper;

impl Actor for Sleeper {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn post_start(&self, _: ActorRef<()>, _: &mut ()) -> Handled {
        IDLE_CENSUS.started();
        Ok(())
    }

    async fn post_stop(&self, _: ActorRef<()>, _: &mut ()) -> Handled {
        IDLE_CENSUS.stopped();
        Ok(())
    }
}

// 8. pi

struct Item(u64);
struct Partial(f64);
struct PiWorker;

impl Actor for PiWorker {
    type Msg = Item;
    type State = (u64, ActorRef<Partial>);
    type Arguments = (u64, ActorRef<Partial>);

    async fn pre_start(
        &self,
        _: ActorRef<Item>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _: ActorRef<Item>,
        Item(item): Item,
        (terms, coordinator): &mut Self::State,
    ) -> Handled {
        coordinator.cast(Partial(leibniz(item * *terms, *terms)))?;
        Ok(())
    }
}

struct Coordinator;

struct CoordinatorState {
    shape: Pi,
    workers: Vec<ActorRef<Item>>,
    waiting: u64,
    sum: f64,
    done: Option<oneshot::Sender<f64>>,
}

impl Actor for Coordinator {
    type Msg = Partial;
    type State = CoordinatorState;
    type Arguments = (Pi, oneshot::Sender<f64>);

    async fn pre_start(
        &self,
        _: ActorRef<Partial>,
        (shape, done): Self::Arguments,
    ) -> Result<CoordinatorState, ActorProcessingErr> {
        Ok(CoordinatorState {
            waiting: shape.items,
            shape,
            workers: Vec::new(),
            sum: 0.0,
            done: Some(done),
        })
    }

    async fn post_start(&self, me: ActorRef<Partial>, s: &mut CoordinatorState) -> Handled {
        for _ in 0..s.shape.workers {
            s.workers
                .push(spawn(PiWorker, (s.shape.terms, me.clone())).await);
        }
        for item in 0..s.shape.items {
            s.workers[item as usize % s.workers.len()].cast(Item(item))?;
        }
        Ok(())
    }

    async fn handle(
        &self,
        me: ActorRef<Partial>,
        Partial(x): Partial,
        s: &mut CoordinatorState,
    ) -> Handled {
        s.sum += x;
        s.waiting -= 1;
        if s.waiting == 0 {
            if let Some(done) = s.done.take() {
                let _ = done.send(s.sum);
            }
            for worker in s.workers.drain(..) {
                worker.stop(None);
            }
            me.stop(None);
        }
        Ok(())
    }
}

impl super::Contender for Ractor {
    fn counting(&self, p: &Counting) -> Outcome<u64> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let counter = spawn(Counter, ()).await;
            for _ in 0..p.adds {
                counter
                    .cast(CounterMsg::Add(p.amount))
                    .map_err(Failure::failed)?;
            }
            let total = ractor::call!(counter, CounterMsg::GetAndReset).map_err(Failure::failed)?;
            let run = clock.stop(total);
            counter.stop(None);
            Ok(run)
        })
    }

    fn pingpong(&self, p: &PingPong) -> Outcome<Vec<u64>> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let mut results = Vec::with_capacity(p.pairs);
            for _ in 0..p.pairs {
                let (done, result) = oneshot::channel();
                let client = spawn(
                    Client,
                    ClientState {
                        echo: None,
                        total: p.echoes_per_pair,
                        batch: p.batch,
                        received: 0,
                        outstanding: 0,
                        done: Some(done),
                    },
                )
                .await;
                let echo = spawn(Echo, client.clone()).await;
                client
                    .cast(ClientMsg::Serve(echo))
                    .map_err(Failure::failed)?;
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
            spawn(
                Node,
                NodeArgs {
                    parent: Parent::Root(Some(done)),
                    ordinal: 0,
                    level: 0,
                    shape: p,
                },
            )
            .await;
            Ok(clock.stop(sum.await.map_err(gone)?))
        })
    }

    fn backlog(&self, p: &Backlog) -> Outcome<BacklogReport> {
        // The producer is the calling thread (every worker is held while it
        // tells); ractor's `cast` needs no runtime.
        let runtime = super::tokio_runtime(self.threads);
        let (to_totals, totals) = std::sync::mpsc::channel();
        let held = HeldWorkers::new(self.threads);
        let (receivers, holders) = runtime.block_on({
            let (p, held, threads) = (p.clone(), held.clone(), self.threads);
            async move {
                let mut receivers = Vec::with_capacity(p.receivers);
                for j in 0..p.receivers {
                    let state = BacklogState {
                        j,
                        total: 0,
                        count: 0,
                        per_receiver: p.per_receiver,
                        totals: to_totals.clone(),
                    };
                    receivers.push(spawn(BacklogReceiver, state).await);
                }
                let mut holders = Vec::new();
                for _ in 0..threads {
                    holders.push(spawn(Holder, held.clone()).await);
                }
                (receivers, holders)
            }
        });
        for holder in &holders {
            holder.cast(()).map_err(gone)?;
        }
        p.drive(&held, &totals, |j, value| {
            receivers[j].cast(Value64(value)).map_err(gone)
        })
    }

    fn fanin(&self, p: &FanIn) -> Outcome<u64> {
        let p = p.clone();
        self.run(async move {
            let (done, count) = oneshot::channel();
            let tally = spawn(
                Tally,
                TallyState {
                    count: 0,
                    expected: p.senders as u64 * p.per_sender,
                    done: Some(done),
                },
            )
            .await;
            let (clock, senders) = release_threads(p.senders, || {
                let tally = tally.clone();
                move || {
                    for _ in 0..p.per_sender {
                        tally.cast(One(1)).expect("receiver alive");
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
            let collector = spawn(
                Collector,
                CollectorState {
                    expected_factorisations: p.rings * p.builds,
                    expected_masters: p.rings,
                    report: RingsReport::default(),
                    done: Some(done),
                },
            )
            .await;
            for _ in 0..p.rings {
                spawn(Master, (p.clone(), collector.clone())).await;
            }
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
                let mut actors = Vec::with_capacity(n);
                for _ in 0..n {
                    actors.push(spawn(Sleeper, ()).await);
                }
                IDLE_CENSUS.until_started(n).await;
                (actors, clock.stop(()))
            })
            .await
            .expect("driver task")
        });
        memory.all_spawned();
        for actor in &actors {
            actor.stop(None);
        }
        drop(actors);
        runtime.block_on(IDLE_CENSUS.until_stopped(n));
        memory.all_stopped();
        Ok(run.map(|()| IDLE_CENSUS.report()))
    }

    fn direct(&self, _: &Direct) -> Outcome<u64> {
        Err(Failure::Unsupported(
            "ractor handlers run only in the actor's tokio task, reached through its mailbox; \
             there is no synchronous dispatch on the owning thread"
                .into(),
        ))
    }

    fn pi(&self, p: &Pi) -> Outcome<f64> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let (done, sum) = oneshot::channel();
            spawn(Coordinator, (p, done)).await;
            Ok(clock.stop(sum.await.map_err(gone)?))
        })
    }
}
