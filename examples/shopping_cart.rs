//! An event-sourced shopping cart that survives `kill -9`.
//!
//! Run: `cargo run --release -p troubadour-persistence --example shopping_cart`
//!
//! The demo starts a shopper process that adds items to Alice's cart, one
//! `ask` at a time, printing each item once the cart has acknowledged it
//! (the event is on disk). After 300 items it kills the shopper with
//! SIGKILL, mid-write, then recovers the cart from the SQLite file and
//! checks that every acknowledged item is there.
//!
//! By hand: `shopping_cart --shop cart.db` adds items until you kill it;
//! run it again and it goes on from the recovered cart.

use serde::{Deserialize, Serialize};
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_persistence::{
    Event, EventSourced, PersistError, Persistence, Persistent, SnapshotPolicy,
};

#[derive(Serialize, Deserialize)]
enum CartEvent {
    Added { item: String, quantity: u32 },
    Removed { item: String },
}

impl Event for CartEvent {
    const TYPE: &'static str = "shop.CartEvent";
}

/// What the cart holds: changed only by applying events.
#[derive(Serialize, Deserialize, Default)]
struct Items(Vec<(String, u32)>);

impl EventSourced for Items {
    type Event = CartEvent;
    fn apply(&mut self, event: &CartEvent) {
        match event {
            CartEvent::Added { item, quantity } => self.0.push((item.clone(), *quantity)),
            CartEvent::Removed { item } => self.0.retain(|(i, _)| i != item),
        }
    }
}

struct Cart {
    items: Persistent<Items>,
}

impl Cart {
    fn new(persistence: &Persistence, owner: &str) -> Self {
        Cart {
            items: Persistent::new(persistence, format!("cart-{owner}"), Items::default())
                .snapshots(SnapshotPolicy::every(100).delete_events(true)),
        }
    }
}

impl Actor for Cart {
    // Recover before the first message: later messages wait.
    fn activate(
        &mut self,
        _: &mut Context<Self>,
    ) -> Option<impl Future<Output = Result<(), ExitReason>> + Send + use<'_>> {
        Some(self.items.recovery())
    }
}

struct Add {
    item: String,
    quantity: u32,
}
impl Message for Add {
    type Reply = Result<usize, PersistError>;
}

impl AsyncHandler<Add> for Cart {
    /// Replies with the number of lines once the event is durable.
    async fn handle(&mut self, add: Add, ctx: &mut Context<Self>) -> Result<usize, PersistError> {
        if add.quantity == 0 {
            let event = CartEvent::Removed { item: add.item };
            self.items.persist(event, ctx).await?;
        } else {
            let event = CartEvent::Added {
                item: add.item,
                quantity: add.quantity,
            };
            self.items.persist(event, ctx).await?;
        }
        Ok(self.items.0.len())
    }
}

struct Contents;
impl Message for Contents {
    type Reply = Vec<String>;
}
impl Handler<Contents> for Cart {
    fn handle(&mut self, _: Contents, _: &mut Context<Self>) -> Vec<String> {
        self.items.0.iter().map(|(i, _)| i.clone()).collect()
    }
}

const WAIT: Duration = Duration::from_secs(30);

/// Adds items forever, printing each acknowledged one.
fn shop(db: &str) -> ExitCode {
    let system = ActorSystem::new();
    let persistence = Persistence::sqlite(db).expect("open the cart's database");
    let cart = system.spawn(Cart::new(&persistence, "alice")).unwrap();
    let mut next = cart.ask(Contents).timeout(WAIT).wait().unwrap().len();
    loop {
        next += 1;
        let item = format!("item-{next}");
        let add = Add {
            item: item.clone(),
            quantity: 1,
        };
        match cart.ask(add).timeout(WAIT).wait() {
            Ok(Ok(_)) => println!("added {item}"),
            other => {
                eprintln!("the cart failed: {other:?}");
                return ExitCode::FAILURE;
            }
        }
    }
}

fn demo() -> ExitCode {
    let dir = std::env::temp_dir().join(format!("shopping-cart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("cart.db");
    let mut shopper = Command::new(std::env::current_exe().unwrap())
        .arg("--shop")
        .arg(&db)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the shopper");
    let mut acknowledged = vec![];
    for line in BufReader::new(shopper.stdout.take().unwrap()).lines() {
        if let Some(item) = line.unwrap().strip_prefix("added ") {
            acknowledged.push(item.to_string());
        }
        if acknowledged.len() == 300 {
            shopper.kill().unwrap(); // SIGKILL
            break;
        }
    }
    let _ = shopper.wait();
    println!(
        "killed the shopper (kill -9) after {} acknowledged items",
        acknowledged.len()
    );

    let system = ActorSystem::new();
    let persistence = Persistence::sqlite(&db).unwrap();
    let cart = system.spawn(Cart::new(&persistence, "alice")).unwrap();
    let contents = cart.ask(Contents).timeout(WAIT).wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|i| !contents.contains(i))
        .collect();
    if !lost.is_empty() {
        eprintln!("lost acknowledged items: {lost:?}");
        return ExitCode::FAILURE;
    }
    println!(
        "recovered the cart: {} items, every acknowledged one among them",
        contents.len()
    );
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, db] if flag == "--shop" => shop(db),
        [] => demo(),
        _ => {
            eprintln!("usage: shopping_cart [--shop DB]");
            ExitCode::from(2)
        }
    }
}
