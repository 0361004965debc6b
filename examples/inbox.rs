//! An inbox: `main` is not an actor, yet actors can tell it results and ask
//! it questions, and it receives them with a timeout (CAF's
//! `scoped_actor`, Erlang's `receive .. after`).
//!
//! Workers square numbers; before starting, each asks `main` (through the
//! inbox) for a multiplier. `main` answers the questions and collects the
//! results until nothing more comes.
//!
//! Run: `cargo run --example inbox`

use std::time::Duration;
use troubadour::prelude::*;

/// Worker → main: a result.
struct Squared {
    worker: u64,
    value: u64,
}

/// Worker → main, as an `ask`: which multiplier to use.
struct Multiplier;

/// What reaches main's inbox: one message type per inbox, so an enum.
enum ToMain {
    Result(Squared),
    Question(Multiplier),
}

impl Message for ToMain {
    /// The answer to a question (`None` for a result, which is told).
    type Reply = Option<u64>;
}

struct Work(u64);

impl Message for Work {
    type Reply = ();
}

/// A worker squares a number and reports, after asking main for the
/// multiplier. Its handler awaits the answer without blocking its thread.
struct Worker {
    id: u64,
    main: Recipient<ToMain>,
}

impl Actor for Worker {}

impl AsyncHandler<Work> for Worker {
    async fn handle(&mut self, Work(n): Work, _: &mut Context<Self>) {
        let question = self.main.ask(ToMain::Question(Multiplier));
        let multiplier = question
            .timeout(Duration::from_secs(5))
            .await
            .ok()
            .flatten()
            .unwrap_or(1);
        let _ = self.main.tell(ToMain::Result(Squared {
            worker: self.id,
            value: n * n * multiplier,
        }));
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let system = ActorSystem::new();
    let mut inbox = system.inbox::<ToMain>()?;

    for id in 1..=4 {
        let worker = system.spawn(Worker {
            id,
            main: inbox.recipient(),
        })?;
        worker.tell(Work(id))?;
    }

    let mut total = 0;
    let mut questions = 0;
    // Receive until nothing has come for 500 ms: Erlang's `after`.
    while let Ok(received) = inbox.recv_timeout(Duration::from_millis(500)).wait() {
        match received.message() {
            ToMain::Question(Multiplier) => {
                questions += 1;
                received.reply(Some(10));
            }
            ToMain::Result(Squared { worker, value }) => {
                println!("worker {worker}: {value}");
                total += value;
            }
        }
    }
    println!("{questions} questions answered, total {total}");
    // 10 × (1 + 4 + 9 + 16)
    if (questions, total) != (4, 300) {
        return Err("wrong answers".into());
    }
    system.shutdown(Duration::from_secs(5))?;
    Ok(())
}
