//! Supervision: a worker that panics is restarted with fresh state by its
//! supervisor; when it fails more often than the supervisor's intensity
//! allows, the supervisor gives up and escalates to its own parent.
//!
//! Run: `cargo run --example supervision`

use std::time::Duration;
use troubadour::prelude::*;

/// Parses numbers; panics on bad input, like code with a bug would.
struct Parser {
    parsed: u32,
}

impl Actor for Parser {
    fn started(&mut self, ctx: &mut Context<Self>) {
        println!("  parser {} started (parsed = {})", ctx.id(), self.parsed);
    }

    fn before_restart(&mut self, reason: &ExitReason, _: &mut Context<Self>) {
        println!("  parser restarting after: {reason}");
    }
}

struct Parse(&'static str);

impl Message for Parse {
    type Reply = u64;
}

impl Handler<Parse> for Parser {
    fn handle(&mut self, Parse(text): Parse, _: &mut Context<Self>) -> u64 {
        let n: u64 = text.parse().expect("not a number");
        self.parsed += 1;
        n
    }
}

/// Supervises one parser: at most 2 restarts within 10 seconds.
struct Service {
    parser: Option<ActorRef<Parser>>,
}

impl Actor for Service {
    fn started(&mut self, ctx: &mut Context<Self>) {
        // A factory, so the parser can be rebuilt on each restart.
        self.parser = ctx.spawn_with(|| Parser { parsed: 0 }).ok();
    }

    fn supervisor_strategy(&self) -> SupervisorStrategy {
        SupervisorStrategy::new(Strategy::OneForOne).intensity(2, Duration::from_secs(10))
    }
}

struct GetParser;

impl Message for GetParser {
    type Reply = Option<ActorRef<Parser>>;
}

impl Handler<GetParser> for Service {
    fn handle(&mut self, _: GetParser, _: &mut Context<Self>) -> Option<ActorRef<Parser>> {
        self.parser.clone()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let system = ActorSystem::new();
    let service = system.spawn(Service { parser: None })?;
    let parser = service.ask(GetParser).wait()?.ok_or("no parser")?;

    println!("parse \"42\" -> {:?}", parser.ask(Parse("42")).wait());
    for attempt in 1..=3 {
        println!("attempt {attempt}: parse \"forty-two\"");
        // The panic fails only the parser; the ask reports it.
        println!("  -> {:?}", parser.ask(Parse("forty-two")).wait());
        if attempt < 3 {
            // Same reference, new instance: state starts over.
            println!("  parse \"7\" -> {:?}", parser.ask(Parse("7")).wait());
        }
    }

    // The third failure exceeded the intensity: the service gave up, which
    // stopped the parser too. The service was spawned from a value, so the
    // system stops it with the escalated reason instead of restarting it.
    let reason = system.block_on(service.wait_stopped());
    println!("service stopped: {reason}");
    println!("parser alive: {}", parser.is_alive());
    system.shutdown(Duration::from_secs(5))?;
    Ok(())
}
