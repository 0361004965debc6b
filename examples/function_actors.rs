//! Function actors: a closure and its state, spawned as an actor, with no
//! struct and no impl blocks (CAF's `spawn(fun)`, Akka Typed's
//! `Behaviors.receive`). A word counter keeps a map in its state; a parser
//! that panics on bad input is restarted from its initial state by its
//! supervisor, like any actor.
//!
//! Run: `cargo run --example function_actors`

use std::collections::BTreeMap;
use std::time::Duration;
use troubadour::prelude::*;

/// The word counter's messages: one type per function actor, so an enum.
enum Words {
    Count(String),
    Top(usize),
}

impl Message for Words {
    type Reply = Vec<(String, u32)>;
}

struct Parse(&'static str);

impl Message for Parse {
    type Reply = u64;
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let system = ActorSystem::new();

    let counter = system.spawn_fn(
        BTreeMap::<String, u32>::new(),
        |counts, msg: Words, _ctx| match msg {
            Words::Count(text) => {
                for word in text.split_whitespace() {
                    *counts.entry(word.to_lowercase()).or_default() += 1;
                }
                Vec::new()
            }
            Words::Top(n) => {
                let mut top: Vec<_> = counts.iter().map(|(w, c)| (w.clone(), *c)).collect();
                top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                top.truncate(n);
                top
            }
        },
    )?;
    for line in [
        "the quick brown fox",
        "jumps over the lazy dog",
        "The dog sleeps",
    ] {
        counter.tell(Words::Count(line.into()))?;
    }
    let top = counter
        .ask(Words::Top(2))
        .timeout(Duration::from_secs(5))
        .wait()?;
    println!("top words: {top:?}");
    if top != [("the".to_string(), 3), ("dog".to_string(), 2)] {
        return Err("wrong word counts".into());
    }

    // The state here counts what this incarnation parsed; `parse` panics on
    // bad input, the guardian restarts the actor from a fresh 0.
    let parser = system.spawn_fn(0u64, |parsed, Parse(text): Parse, _ctx| {
        let n: u64 = text.parse().expect("not a number");
        *parsed += 1;
        n + *parsed * 1000
    })?;
    let ask = |text| {
        parser
            .ask(Parse(text))
            .timeout(Duration::from_secs(5))
            .wait()
    };
    println!("parse 7  -> {:?}", ask("7"));
    println!(
        "parse x  -> {:?} (the parser panicked and is restarted)",
        ask("x")
    );
    let after = ask("8")?;
    println!("parse 8  -> {after} (fresh state: first parse of the new incarnation)");
    if after != 1008 {
        return Err("the parser was not restarted from its initial state".into());
    }
    system.shutdown(Duration::from_secs(5))?;
    Ok(())
}
