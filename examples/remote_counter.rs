//! A counter in one process, used from another: remote actors with mutual
//! TLS.
//!
//! ```text
//! # once: a CA and a certificate per node, FOR TRYING THIS EXAMPLE ONLY
//! cargo run -p troubadour-remote --example remote_counter -- certs ./example-certs
//! # terminal 1: the node that hosts the counter
//! cargo run -p troubadour-remote --example remote_counter -- serve 127.0.0.1:7100 ./example-certs
//! # terminal 2: a node that uses it
//! cargo run -p troubadour-remote --example remote_counter -- client 127.0.0.1:7100 ./example-certs
//! ```
//!
//! The client looks the counter up by name and gets an ordinary
//! `ActorRef<Counter>`: `tell`, `ask` and `monitor` work as for a local
//! actor. It also hands the counter a reference to one of its own actors
//! (`Watch`), to which the counter reports every change: references travel
//! inside messages. `serve` and `client` in one command (`demo`) run both
//! in one process, over the network all the same.
//!
//! The protocol is derived: `RemoteMessage` gives each message its reply
//! type and stable name, `RemoteActor` gives the counter its name and the
//! messages it accepts from other nodes.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_remote::{Remote, RemoteActor, RemoteMessage, Security, TlsConfig};

// ---- the protocol: shared by both programs ----------------------------------

/// Adds to the counter; answers the new total.
#[derive(Serialize, Deserialize, RemoteMessage)]
#[message(reply = u64, remote = "example.counter.Add")]
struct Add(u64);

/// Asks the counter to tell `Changed` to `to` on every change.
#[derive(Serialize, Deserialize, RemoteMessage)]
#[message(remote = "example.counter.Watch")]
struct Watch {
    to: Recipient<Changed>,
}

/// The counter changed.
#[derive(Debug, Serialize, Deserialize, RemoteMessage)]
#[message(remote = "example.counter.Changed")]
struct Changed {
    total: u64,
}

/// The counter, on the serving node: reachable from other nodes under its
/// type's stable name, for the messages listed.
#[derive(Default, RemoteActor)]
#[remote(name = "example.counter.Counter", handle(Add, Watch))]
struct Counter {
    total: u64,
    watchers: Vec<Recipient<Changed>>,
}
impl Actor for Counter {}
impl Handler<Add> for Counter {
    fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) -> u64 {
        self.total += n;
        let total = self.total;
        // A watcher whose node went away is dropped.
        self.watchers.retain(|w| w.tell(Changed { total }).is_ok());
        total
    }
}
impl Handler<Watch> for Counter {
    fn handle(&mut self, Watch { to }: Watch, _: &mut Context<Self>) {
        self.watchers.push(to);
    }
}

/// Prints what the counter reports, on the client's node.
struct Printer(std::sync::mpsc::Sender<u64>);
impl Actor for Printer {}
impl Handler<Changed> for Printer {
    fn handle(&mut self, c: Changed, _: &mut Context<Self>) {
        println!("client: the counter reports {c:?}");
        let _ = self.0.send(c.total);
    }
}

/// Node names: each node's certificate is issued for its name.
const SERVER: &str = "counter-node";
const CLIENT: &str = "client-node";

fn remote(
    node: &str,
    certs: &Path,
) -> Result<troubadour_remote::RemoteBuilder, Box<dyn std::error::Error>> {
    let tls = TlsConfig::from_pem(
        &std::fs::read(certs.join(format!("{node}.pem")))?,
        &std::fs::read(certs.join(format!("{node}.key")))?,
        &std::fs::read(certs.join("ca.pem"))?,
    )?;
    Ok(Remote::builder("example-cluster", Security::Tls(tls))
        .register::<Add>()
        .register::<Watch>()
        .register::<Changed>())
}

// ---- the two programs ----------------------------------------------------------

fn serve(
    addr: SocketAddr,
    certs: &Path,
    until: impl FnOnce(),
) -> Result<(), Box<dyn std::error::Error>> {
    let system = ActorSystem::builder().name(SERVER).build();
    let remote = system.block_on(remote(SERVER, certs)?.listen(addr).start(&system))?;
    let counter = system.spawn(Counter::default())?;
    remote.expose("counter", &counter)?;
    println!("serve: the counter is exposed as \"counter\" on {addr}");
    until();
    Ok(())
}

fn client(addr: SocketAddr, certs: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let system = ActorSystem::builder().name(CLIENT).build();
    // Recipients of `Changed` the counter gets travel as references.
    let remote = system.block_on(remote(CLIENT, certs)?.start(&system))?;
    let counter: ActorRef<Counter> = system.block_on(remote.lookup::<Counter>(addr, "counter"))?;
    println!("client: found {counter:?}");

    let (tx, rx) = std::sync::mpsc::channel();
    let printer = system.spawn(Printer(tx))?;
    counter.tell(Watch {
        to: printer.recipient(),
    })?;
    counter.tell(Add(10))?;
    let total = counter.ask(Add(5)).timeout(Duration::from_secs(5)).wait()?;
    println!("client: after adding 10 and 5 the total is {total}");
    // The two reports arrive in order, the last one with the same total.
    let reports: Vec<u64> = (0..2)
        .map(|_| rx.recv_timeout(Duration::from_secs(5)))
        .collect::<Result<_, _>>()?;
    assert_eq!(reports.last(), Some(&total));
    Ok(())
}

/// A CA and a certificate for each node (its node name, 127.0.0.1 and
/// localhost), written to `dir`. For trying the example only: a real
/// cluster's CA key stays offline.
fn certs(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let ca = troubadour_remote::dev_certs::DevCa::new("troubadour example CA - FOR TESTS ONLY")?;
    for node in [SERVER, CLIENT] {
        ca.write_node(dir, node)?;
    }
    println!(
        "certs: wrote ca.pem and {SERVER}.pem/.key, {CLIENT}.pem/.key to {}",
        dir.display()
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: remote_counter certs DIR | serve ADDR DIR | client ADDR DIR | demo";
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["certs", dir] => certs(Path::new(dir)),
        ["serve", addr, dir] => serve(addr.parse()?, Path::new(dir), || {
            println!("serve: press Enter to stop");
            let _ = std::io::stdin().read_line(&mut String::new());
        }),
        ["client", addr, dir] => client(addr.parse()?, Path::new(dir)),
        ["demo"] => {
            // Both sides in one process: what CI runs.
            let dir = std::env::temp_dir().join(format!("remote-counter-{}", std::process::id()));
            certs(&dir)?;
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
            let server_dir = dir.clone();
            let server = std::thread::spawn(move || {
                serve(addr, &server_dir, || {
                    let _ = ready_tx.send(());
                    let _ = stop_rx.recv();
                })
                .map_err(|e| e.to_string())
            });
            ready_rx.recv()?;
            let result = client(addr, &dir);
            let _ = stop_tx.send(());
            server.join().map_err(|_| "the server panicked")??;
            let _ = std::fs::remove_dir_all(&dir);
            result
        }
        _ => Err(usage.into()),
    }
}
