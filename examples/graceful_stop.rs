//! Graceful stop: a writer buffers lines and flushes them in batches; the
//! program queues its last lines and asks the writer to stop *gracefully*,
//! so every queued line is written before the writer's final flush, where
//! a plain `stop` would have overtaken them (Akka's `PoisonPill`).
//!
//! Run: `cargo run --example graceful_stop`

use std::sync::mpsc;
use troubadour::prelude::*;

/// Writes lines in batches of 100 to `out` (a stand-in for a file).
struct Writer {
    buffer: Vec<String>,
    out: mpsc::Sender<Vec<String>>,
}

impl Writer {
    fn flush(&mut self) {
        if !self.buffer.is_empty() {
            let _ = self.out.send(std::mem::take(&mut self.buffer));
        }
    }
}

impl Actor for Writer {
    /// Runs after every line queued before the graceful stop was handled.
    fn stopped(&mut self, _: &mut Context<Self>) {
        self.flush();
    }
}

struct Line(String);

impl Message for Line {
    type Reply = ();
}

impl Handler<Line> for Writer {
    fn handle(&mut self, Line(line): Line, _: &mut Context<Self>) {
        self.buffer.push(line);
        if self.buffer.len() == 100 {
            self.flush();
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let system = ActorSystem::new();
    let (out, written) = mpsc::channel();
    let writer = system.spawn(Writer {
        buffer: Vec::new(),
        out,
    })?;

    for i in 0..1050 {
        writer.tell(Line(format!("line {i}")))?;
    }
    // Behind the 1050 lines; from now on the writer takes no new line.
    writer.stop_gracefully();
    match writer.tell(Line("too late".into())) {
        Err(SendError::Stopped(_)) => println!("a line sent after the graceful stop is refused"),
        other => return Err(format!("expected a refusal, got {other:?}").into()),
    }

    let reason = system.block_on(writer.wait_stopped());
    let batches: Vec<Vec<String>> = written.try_iter().collect();
    let lines: Vec<String> = batches.concat();
    println!(
        "writer stopped ({reason}): {} lines in {} batches, {} dead letter(s)",
        lines.len(),
        batches.len(),
        system.dead_letter_count()
    );
    let expected: Vec<String> = (0..1050).map(|i| format!("line {i}")).collect();
    if lines != expected {
        return Err("lost or reordered lines".into());
    }
    system.shutdown(std::time::Duration::from_secs(5))?;
    Ok(())
}
