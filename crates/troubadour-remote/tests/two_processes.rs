//! The remote guarantees between two OS processes on loopback, over mutual
//! TLS: this test binary starts itself again as the second node (the
//! `child_node` "test", which does nothing unless the environment asks it
//! to), then uses that node's actor, and kills the process with SIGKILL
//! mid-ask to check that nothing hangs.
//!
//! Waits are hang guards only.

mod common;

use common::Ca;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_remote::{Accepts, Remote, RemoteActor, RemoteMessage, Security};

const GUARD: Duration = Duration::from_secs(30);
const CHILD_ENV: &str = "TROUBADOUR_REMOTE_CHILD_DIR";

#[derive(Serialize, Deserialize)]
struct Push(u64);
impl Message for Push {
    type Reply = ();
}
impl RemoteMessage for Push {
    const NAME: &'static str = "two.Push";
}

#[derive(Serialize, Deserialize)]
struct Pushed;
impl Message for Pushed {
    type Reply = Vec<u64>;
}
impl RemoteMessage for Pushed {
    const NAME: &'static str = "two.Pushed";
}

/// Never answered: an ask outstanding when the process dies.
#[derive(Serialize, Deserialize)]
struct Stall;
impl Message for Stall {
    type Reply = ();
}
impl RemoteMessage for Stall {
    const NAME: &'static str = "two.Stall";
}

#[derive(Default)]
struct List {
    items: Vec<u64>,
    stalled: Vec<troubadour::DeferredReply<()>>,
}
impl Actor for List {}
impl Handler<Push> for List {
    fn handle(&mut self, Push(n): Push, _: &mut Context<Self>) {
        self.items.push(n);
    }
}
impl Handler<Pushed> for List {
    fn handle(&mut self, _: Pushed, _: &mut Context<Self>) -> Vec<u64> {
        self.items.clone()
    }
}
impl Handler<Stall> for List {
    fn handle(&mut self, _: Stall, ctx: &mut Context<Self>) {
        self.stalled.extend(ctx.defer_reply::<Stall>());
    }
}
impl RemoteActor for List {
    const NAME: &'static str = "two.List";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts
            .handle::<Push>()
            .handle::<Pushed>()
            .handle::<Stall>();
    }
}

struct Watcher(mpsc::Sender<ExitReason>);
impl Actor for Watcher {}
impl Handler<Down> for Watcher {
    fn handle(&mut self, d: Down, _: &mut Context<Self>) {
        let _ = self.0.send(d.reason);
    }
}
struct MonitorIt(ActorRef<List>);
impl Message for MonitorIt {
    type Reply = ();
}
impl Handler<MonitorIt> for Watcher {
    fn handle(&mut self, MonitorIt(l): MonitorIt, ctx: &mut Context<Self>) {
        ctx.monitor(&l);
    }
}

fn remote(dir: &std::path::Path, name: &str) -> troubadour_remote::RemoteBuilder {
    let tls = troubadour_remote::dev_certs::read_node(dir, name).unwrap();
    Remote::builder("two-processes", Security::Tls(tls))
        .register::<Push>()
        .register::<Pushed>()
        .register::<Stall>()
}

/// The second node, when started by a test below; a no-op otherwise.
#[test]
fn child_node() {
    let Some(dir) = std::env::var_os(CHILD_ENV).map(PathBuf::from) else {
        return;
    };
    let system = ActorSystem::builder().name("child").build();
    let remote = system
        .block_on(
            remote(&dir, "child")
                .listen("127.0.0.1:0".parse().unwrap())
                .start(&system),
        )
        .unwrap();
    let list = system.spawn(List::default()).unwrap();
    remote.expose("list", &list).unwrap();
    println!("READY {}", remote.local_addr().unwrap());
    // Until the parent kills this process.
    std::thread::sleep(Duration::from_secs(120));
}

struct ChildProcess(Child);
impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_child(ca: &Ca) -> (ChildProcess, SocketAddr, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "troubadour-two-processes-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    for name in ["child", "parent"] {
        ca.write_node(&dir, name);
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_node", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let child = ChildProcess(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end, so that the child never writes into a closed pipe.
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest prints "test child_node ... " on the same line.
            if let Some(at) = line.find("READY ") {
                let _ = tx.send(line[at + 6..].trim().parse::<SocketAddr>().unwrap());
            }
        }
    });
    let addr = rx
        .recv_timeout(GUARD)
        .expect("the child node did not start");
    (child, addr, dir)
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

#[test]
fn two_processes_keep_order_and_a_killed_peer_ends_asks_and_monitors() {
    let ca = Ca::new("two-processes CA");
    let (mut child, addr, dir) = start_child(&ca);
    let system = ActorSystem::builder().name("parent").build();
    let remote = system
        .block_on(remote(&dir, "parent").start(&system))
        .unwrap();
    let list = system
        .block_on(remote.lookup::<List>(addr, "list"))
        .unwrap();
    assert_eq!(remote.is_tls(addr), Some(true));

    // Per sender→receiver order across processes.
    for n in 0..10_000 {
        let mut m = Push(n);
        loop {
            match list.tell(m) {
                Ok(()) => break,
                Err(SendError::Full(back)) => {
                    m = back;
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    let items = list.ask(Pushed).timeout(GUARD).wait().unwrap();
    assert_eq!(items, (0..10_000).collect::<Vec<_>>());

    // A monitor, and an ask outstanding, when the process is killed.
    let (tx, downs) = mpsc::channel();
    let watcher = system.spawn(Watcher(tx)).unwrap();
    watcher
        .ask(MonitorIt(list.clone()))
        .timeout(GUARD)
        .wait()
        .unwrap();
    list.ask(Pushed).timeout(GUARD).wait().unwrap();
    let stalled = list.ask(Stall).timeout(GUARD);
    list.ask(Pushed).timeout(GUARD).wait().unwrap();
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    assert_eq!(system.block_on(stalled), Err(AskError::ConnectionLost));
    assert_eq!(downs.recv_timeout(GUARD).unwrap(), ExitReason::NoConnection);
    let _ = std::fs::remove_dir_all(&dir);
}
