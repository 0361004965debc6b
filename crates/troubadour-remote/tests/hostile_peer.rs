//! A peer that passed TLS and the handshake and then sends whatever it
//! likes: well-framed frames of every kind with random codes, actor
//! numbers and payloads (proptest, a fixed number of cases per run). The
//! node must not panic or hang, must count what it drops, and must go on
//! serving a well-behaved node afterwards.

mod common;

use common::Ca;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use troubadour::{Actor, ActorSystem, Context, Handler, Message};
use troubadour_remote::codec::type_id;
use troubadour_remote::connection::Endpoint;
use troubadour_remote::frame::{encode_frame, Header, Kind, Lane, Limits};
use troubadour_remote::{Accepts, Remote, RemoteActor, RemoteMessage, RemoteStats, Security};

const GUARD: Duration = Duration::from_secs(30);
const CLUSTER: &str = "hostile-test";

#[derive(Serialize, Deserialize)]
struct Note(String);
impl Message for Note {
    type Reply = u32;
}
impl RemoteMessage for Note {
    const NAME: &'static str = "hostile.Note";
}

#[derive(Default)]
struct Notes(u32);
impl Actor for Notes {}
impl Handler<Note> for Notes {
    fn handle(&mut self, _: Note, _: &mut Context<Self>) -> u32 {
        self.0 += 1;
        self.0
    }
}
impl RemoteActor for Notes {
    const NAME: &'static str = "hostile.Notes";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts.handle::<Note>();
    }
}

/// The node under attack, shared by all cases: (system, remote, CA, the
/// exposed actor's serial).
struct Target {
    system: ActorSystem,
    remote: Remote,
    ca: Ca,
    serial: u64,
}

/// Panics anywhere in the process (the reader task's included, which
/// tokio would otherwise swallow).
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn target() -> &'static Target {
    static TARGET: OnceLock<Target> = OnceLock::new();
    TARGET.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
        let ca = Ca::new("hostile CA");
        let system = ActorSystem::builder().name("target").build();
        let remote = system
            .block_on(
                Remote::builder(CLUSTER, Security::Tls(ca.tls("target", &ca)))
                    .register::<Note>()
                    .listen("127.0.0.1:0".parse().unwrap())
                    .start(&system),
            )
            .unwrap();
        let notes = system.spawn(Notes::default()).unwrap();
        remote.expose("notes", &notes).unwrap();
        let serial = notes.id().serial();
        Target {
            system,
            remote,
            ca,
            serial,
        }
    })
}

/// One well-framed frame with hostile content.
fn frame() -> impl Strategy<Value = (Header, Vec<u8>)> {
    let t = target();
    let kinds = prop_oneof![
        Just((Lane::User, Kind::Message)),
        Just((Lane::User, Kind::Ask)),
        Just((Lane::User, Kind::Reply)),
        Just((Lane::Control, Kind::Control)),
        Just((Lane::Large, Kind::Message)),
    ];
    let codes = prop_oneof![
        any::<u64>(),
        Just(type_id(Note::NAME)),
        Just(type_id("troubadour.system.Down")),
        Just(type_id("troubadour.system.Exit")),
        Just(16u64), // the control message code
        0u64..8,
    ];
    let actors = prop_oneof![any::<u64>(), Just(t.serial), 0u64..4];
    (
        kinds,
        codes,
        actors.clone(),
        actors,
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|((lane, kind), code, sender, receiver, payload)| {
            (
                Header {
                    lane,
                    kind,
                    code,
                    sender,
                    receiver,
                },
                payload,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn hostile_frames_after_the_handshake_never_crash_or_hang_the_node(
        frames in proptest::collection::vec(frame(), 1..40)
    ) {
        let t = target();
        let addr = t.remote.local_addr().unwrap();
        let endpoint = Endpoint::new(CLUSTER, "attacker", 1, Security::Tls(t.ca.tls("attacker", &t.ca)));
        let mut wire = Vec::new();
        for (header, payload) in &frames {
            encode_frame(&mut wire, header, payload, &Limits::default()).unwrap();
        }
        let lost_before = RemoteStats::get(&t.remote.stats().connections_lost);
        t.system.block_on(async {
            let conn = tokio::time::timeout(GUARD, endpoint.connect(addr, "127.0.0.1"))
                .await
                .expect("hang guard")
                .unwrap();
            let (mut stream, _, _) = conn.into_parts();
            let _ = stream.write_all(&wire).await;
            let _ = stream.flush().await;
            let _ = stream.shutdown().await;
        });
        // The node has read everything: the attacker's close ended the
        // connection.
        let start = std::time::Instant::now();
        while RemoteStats::get(&t.remote.stats().connections_lost) == lost_before {
            prop_assert!(start.elapsed() < GUARD, "hang guard: the connection never ended");
            std::thread::sleep(Duration::from_millis(2));
        }
        prop_assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a hostile frame made the node panic");
        // A well-behaved node is still served.
        let system = ActorSystem::builder().name("friend").build();
        let friend = system
            .block_on(
                Remote::builder(CLUSTER, Security::Tls(t.ca.tls("friend", &t.ca)))
                    .register::<Note>()
                    .start(&system),
            )
            .unwrap();
        let notes = system
            .block_on(friend.lookup::<Notes>(addr, "notes"))
            .unwrap();
        let n = notes.ask(Note("hello".into())).timeout(GUARD).wait();
        prop_assert!(n.is_ok(), "{n:?}");
        prop_assert_eq!(RemoteStats::get(&t.remote.stats().framing_errors), 0);
    }
}
