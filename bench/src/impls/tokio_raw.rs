//! tokio-raw: one tokio task per actor, its mailbox an unbounded tokio mpsc
//! channel, on a multi-thread runtime with one worker per thread given. The
//! floor every tokio-based actor library sits on.
//!
//! Each workload's driver is itself a task (the main thread only waits for
//! it), so all work runs on the runtime's workers.

use std::future::Future;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

use super::Outcome;
use crate::measure::{
    join_threads, release_threads, HeldWorkers, IdleMemory, Stopwatch, IDLE_CENSUS,
};
use crate::workload::{
    factorise, leibniz, Backlog, BacklogReport, Counting, Direct, Failure, FanIn, Idle, IdleReport,
    Pi, PingPong, Rings, RingsReport, Skynet,
};

pub struct TokioRaw {
    threads: usize,
}

impl TokioRaw {
    pub fn new(threads: usize) -> TokioRaw {
        TokioRaw { threads }
    }

    /// Runs `driver` as a task on a fresh multi-thread runtime.
    fn run<T: Send + 'static>(&self, driver: impl Future<Output = T> + Send + 'static) -> T {
        super::run_on_tokio(self.threads, driver)
    }
}

fn gone<T>(_: T) -> Failure {
    Failure::failed("an actor stopped before it replied")
}

enum CounterMsg {
    Add(u64),
    GetAndReset(oneshot::Sender<u64>),
}

async fn counter(mut mailbox: UnboundedReceiver<CounterMsg>) {
    let mut total = 0u64;
    while let Some(msg) = mailbox.recv().await {
        match msg {
            CounterMsg::Add(n) => total += n,
            CounterMsg::GetAndReset(reply) => {
                let _ = reply.send(std::mem::take(&mut total));
            }
        }
    }
}

async fn echo(mut mailbox: UnboundedReceiver<u64>, client: UnboundedSender<u64>) {
    while let Some(n) = mailbox.recv().await {
        if client.send(n).is_err() {
            break;
        }
    }
}

/// Sends batches to `echo` until `total` pongs came back; returns the count.
async fn client(
    mut mailbox: UnboundedReceiver<u64>,
    echo: UnboundedSender<u64>,
    total: u64,
    batch: u64,
) -> u64 {
    let mut received = 0;
    while received < total {
        let n = batch.min(total - received);
        for i in 0..n {
            echo.send(i).expect("echo alive");
        }
        for _ in 0..n {
            mailbox.recv().await.expect("echo alive");
            received += 1;
        }
    }
    received
}

fn skynet_node(parent: UnboundedSender<u64>, ordinal: u64, level: u32, p: Skynet) {
    tokio::spawn(async move {
        if level == p.levels {
            let _ = parent.send(ordinal);
            return;
        }
        let (tx, mut mailbox) = unbounded_channel();
        for k in 0..p.fan_out {
            skynet_node(tx.clone(), ordinal * p.fan_out + k, level + 1, p.clone());
        }
        drop(tx);
        let mut sum = 0;
        for _ in 0..p.fan_out {
            sum += mailbox.recv().await.expect("child replied");
        }
        let _ = parent.send(sum);
    });
}

enum CollectorMsg {
    Factors(Vec<u64>),
    MasterDone,
}

/// A ring link: forwards each token to `next`, stops after forwarding 0.
async fn link(mut mailbox: UnboundedReceiver<u64>, next: UnboundedSender<u64>) {
    while let Some(token) = mailbox.recv().await {
        let _ = next.send(token);
        if token == 0 {
            break;
        }
    }
}

async fn master(p: Rings, collector: UnboundedSender<CollectorMsg>) {
    let (me, mut mailbox) = unbounded_channel::<u64>();
    let (worker, mut work) = unbounded_channel::<u64>();
    let to_collector = collector.clone();
    tokio::spawn(async move {
        while let Some(n) = work.recv().await {
            let _ = to_collector.send(CollectorMsg::Factors(factorise(n)));
        }
    });
    for _ in 0..p.builds {
        let _ = worker.send(p.target);
        let mut first = me.clone();
        for _ in 0..p.links {
            let (tx, rx) = unbounded_channel();
            tokio::spawn(link(rx, first));
            first = tx;
        }
        let _ = first.send(p.token);
        loop {
            let token = mailbox.recv().await.expect("ring alive");
            if token == 0 {
                break;
            }
            let _ = first.send(token - 1);
        }
    }
    let _ = collector.send(CollectorMsg::MasterDone);
}

async fn collector(
    mut mailbox: UnboundedReceiver<CollectorMsg>,
    p: Rings,
    done: oneshot::Sender<RingsReport>,
) {
    let mut report = RingsReport::default();
    while report.factorisations.len() < p.rings * p.builds || report.masters_done < p.rings {
        match mailbox.recv().await {
            Some(CollectorMsg::Factors(f)) => report.factorisations.push(f),
            Some(CollectorMsg::MasterDone) => report.masters_done += 1,
            None => break,
        }
    }
    let _ = done.send(report);
}

/// An idle actor: waits for messages until its mailbox closes.
async fn idle_actor(mut mailbox: UnboundedReceiver<()>) {
    IDLE_CENSUS.started();
    while mailbox.recv().await.is_some() {}
    IDLE_CENSUS.stopped();
}

/// A backlog receiver: adds up `per_receiver` values, then reports.
async fn backlog_receiver(
    j: usize,
    per_receiver: u64,
    mut mailbox: UnboundedReceiver<u64>,
    totals: std::sync::mpsc::Sender<(usize, u64)>,
) {
    let (mut total, mut count) = (0, 0);
    while let Some(value) = mailbox.recv().await {
        total += value;
        count += 1;
        if count == per_receiver {
            let _ = totals.send((j, total));
            return;
        }
    }
}

impl super::Contender for TokioRaw {
    fn counting(&self, p: &Counting) -> Outcome<u64> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let (tx, mailbox) = unbounded_channel();
            tokio::spawn(counter(mailbox));
            for _ in 0..p.adds {
                tx.send(CounterMsg::Add(p.amount)).map_err(gone)?;
            }
            let (reply, total) = oneshot::channel();
            tx.send(CounterMsg::GetAndReset(reply)).map_err(gone)?;
            Ok(clock.stop(total.await.map_err(gone)?))
        })
    }

    fn pingpong(&self, p: &PingPong) -> Outcome<Vec<u64>> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let mut clients = Vec::with_capacity(p.pairs);
            for _ in 0..p.pairs {
                let (client_tx, client_rx) = unbounded_channel();
                let (echo_tx, echo_rx) = unbounded_channel();
                tokio::spawn(echo(echo_rx, client_tx));
                clients.push(tokio::spawn(client(
                    client_rx,
                    echo_tx,
                    p.echoes_per_pair,
                    p.batch,
                )));
            }
            let mut echoes = Vec::with_capacity(p.pairs);
            for c in clients {
                echoes.push(c.await.map_err(Failure::failed)?);
            }
            Ok(clock.stop(echoes))
        })
    }

    fn skynet(&self, p: &Skynet) -> Outcome<u64> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let (tx, mut root) = unbounded_channel();
            skynet_node(tx, 0, 0, p);
            let sum = root.recv().await.ok_or_else(|| gone(()))?;
            Ok(clock.stop(sum))
        })
    }

    fn backlog(&self, p: &Backlog) -> Outcome<BacklogReport> {
        // The producer is the calling thread: every worker is held while it
        // tells.
        let runtime = super::tokio_runtime(self.threads);
        let (to_totals, totals) = std::sync::mpsc::channel();
        let mailboxes: Vec<UnboundedSender<u64>> = (0..p.receivers)
            .map(|j| {
                let (tx, rx) = unbounded_channel();
                runtime.spawn(backlog_receiver(j, p.per_receiver, rx, to_totals.clone()));
                tx
            })
            .collect();
        let held = HeldWorkers::new(self.threads);
        for _ in 0..self.threads {
            let held = held.clone();
            runtime.spawn(async move { held.hold() });
        }
        p.drive(&held, &totals, |j, value| {
            mailboxes[j].send(value).map_err(gone)
        })
    }

    fn fanin(&self, p: &FanIn) -> Outcome<u64> {
        let p = p.clone();
        self.run(async move {
            let expected = p.senders as u64 * p.per_sender;
            let (tx, mut mailbox) = unbounded_channel::<u64>();
            let receiver = tokio::spawn(async move {
                let mut count = 0;
                while count < expected {
                    match mailbox.recv().await {
                        Some(n) => count += n,
                        None => break,
                    }
                }
                count
            });
            let (clock, senders) = release_threads(p.senders, || {
                let tx = tx.clone();
                move || {
                    for _ in 0..p.per_sender {
                        tx.send(1).expect("receiver alive");
                    }
                }
            });
            drop(tx);
            let run = clock.stop(receiver.await.map_err(Failure::failed)?);
            join_threads(senders)?;
            Ok(run)
        })
    }

    fn rings(&self, p: &Rings) -> Outcome<RingsReport> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let (done, report) = oneshot::channel();
            let (to_collector, mailbox) = unbounded_channel();
            tokio::spawn(collector(mailbox, p.clone(), done));
            for _ in 0..p.rings {
                tokio::spawn(master(p.clone(), to_collector.clone()));
            }
            drop(to_collector);
            Ok(clock.stop(report.await.map_err(gone)?))
        })
    }

    fn idle(&self, p: &Idle, memory: &mut IdleMemory) -> Outcome<IdleReport> {
        let n = p.actors;
        let runtime = super::tokio_runtime(self.threads);
        memory.before_spawn();
        let (mailboxes, run) = runtime.block_on(async move {
            tokio::spawn(async move {
                let clock = Stopwatch::start();
                let mailboxes: Vec<UnboundedSender<()>> = (0..n)
                    .map(|_| {
                        let (tx, rx) = unbounded_channel();
                        tokio::spawn(idle_actor(rx));
                        tx
                    })
                    .collect();
                IDLE_CENSUS.until_started(n).await;
                (mailboxes, clock.stop(()))
            })
            .await
            .expect("driver task")
        });
        memory.all_spawned();
        drop(mailboxes);
        runtime.block_on(IDLE_CENSUS.until_stopped(n));
        memory.all_stopped();
        Ok(run.map(|()| IDLE_CENSUS.report()))
    }

    fn direct(&self, _: &Direct) -> Outcome<u64> {
        Err(Failure::Unsupported(
            "a tokio task is only reached through its channel and the scheduler; \
             there is no synchronous dispatch on the owning thread"
                .into(),
        ))
    }

    fn pi(&self, p: &Pi) -> Outcome<f64> {
        let p = p.clone();
        self.run(async move {
            let clock = Stopwatch::start();
            let (to_coordinator, mut replies) = unbounded_channel::<f64>();
            let workers: Vec<UnboundedSender<u64>> = (0..p.workers)
                .map(|_| {
                    let (tx, mut mailbox) = unbounded_channel::<u64>();
                    let reply = to_coordinator.clone();
                    tokio::spawn(async move {
                        while let Some(item) = mailbox.recv().await {
                            let _ = reply.send(leibniz(item * p.terms, p.terms));
                        }
                    });
                    tx
                })
                .collect();
            // The driver task is the coordinator: its mailbox is `replies`.
            for item in 0..p.items {
                workers[item as usize % workers.len()]
                    .send(item)
                    .map_err(gone)?;
            }
            let mut sum = 0.0;
            for _ in 0..p.items {
                sum += replies.recv().await.ok_or_else(|| gone(()))?;
            }
            Ok(clock.stop(sum))
        })
    }
}
