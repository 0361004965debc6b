//! A chat room: members join a group and every message fans out to them;
//! a timer posts a periodic heartbeat and a registered name lets anyone find
//! the room.
//!
//! Run: `cargo run --example chat`

use std::time::Duration;
use troubadour::prelude::*;
use troubadour::TimerRef;

#[derive(Clone, Debug)]
struct Said {
    from: String,
    text: String,
}

impl Message for Said {
    type Reply = ();
}

/// A member prints what it hears and counts it.
struct Member {
    name: String,
    heard: usize,
}

impl Actor for Member {}

impl Handler<Said> for Member {
    fn handle(&mut self, msg: Said, _: &mut Context<Self>) {
        self.heard += 1;
        println!("[{}] {}: {}", self.name, msg.from, msg.text);
    }
}

struct Heard;

impl Message for Heard {
    type Reply = usize;
}

impl Handler<Heard> for Member {
    fn handle(&mut self, _: Heard, _: &mut Context<Self>) -> usize {
        self.heard
    }
}

/// The room relays posts to its group and sends a heartbeat every 50 ms.
struct Room {
    group: &'static str,
    beats: u32,
    heartbeat: Option<TimerRef>,
}

impl Actor for Room {
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.heartbeat = Some(ctx.send_interval(Duration::from_millis(50), Beat));
    }
}

struct Post(Said);

impl Message for Post {
    type Reply = usize;
}

impl Handler<Post> for Room {
    fn handle(&mut self, Post(said): Post, ctx: &mut Context<Self>) -> usize {
        ctx.system().broadcast(self.group, said)
    }
}

#[derive(Clone)]
struct Beat;

impl Message for Beat {
    type Reply = ();
}

impl Handler<Beat> for Room {
    fn handle(&mut self, _: Beat, ctx: &mut Context<Self>) {
        self.beats += 1;
        let text = format!("heartbeat {}", self.beats);
        ctx.system().broadcast(
            self.group,
            Said {
                from: "room".into(),
                text,
            },
        );
        if self.beats == 3 {
            if let Some(t) = self.heartbeat.take() {
                t.cancel();
            }
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let system = ActorSystem::new();
    let room = system.spawn_with_options(
        SpawnOptions::new().name("lobby"),
        Room {
            group: "lobby-members",
            beats: 0,
            heartbeat: None,
        },
    )?;

    let members: Vec<_> = ["ada", "grace", "linus"]
        .iter()
        .map(|n| {
            system.spawn(Member {
                name: n.to_string(),
                heard: 0,
            })
        })
        .collect::<Result<_, _>>()?;
    for m in &members {
        system.join_group("lobby-members", m.recipient::<Said, _>());
    }

    // Anyone can find the room by name.
    let lobby = system
        .whereis::<Room>("lobby")
        .ok_or("lobby not registered")?;
    assert_eq!(lobby, room);
    let delivered = lobby
        .ask(Post(Said {
            from: "ada".into(),
            text: "hello, everyone".into(),
        }))
        .wait()?;
    println!("delivered to {delivered} members");

    // Three heartbeats, then the timer cancels itself.
    std::thread::sleep(Duration::from_millis(250));
    for m in &members {
        println!("{:?} heard {} messages", m.id(), m.ask(Heard).wait()?);
    }
    system.shutdown(Duration::from_secs(5))?;
    Ok(())
}
