//! Remote actors end to end: two actor systems in this process, each
//! networked with mutual TLS on 127.0.0.1 (certificates made here by
//! rcgen), one looking up the other's actors and using them through
//! ordinary `ActorRef`s. Each test asserts a promise of DISTRIBUTION.md.
//!
//! Waits are hang guards only ([`GUARD`]), never speed assertions.

// Test helpers pass closures around; naming each type adds nothing.
#![allow(clippy::type_complexity)]

mod common;

use common::Ca;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::NodeId;
use troubadour_remote::{
    Accepts, ChannelError, ConfigError, ControlChannel, LookupError, PeerState, PeerStatus, Remote,
    RemoteActor, RemoteError, RemoteMessage, RemoteStats, Security,
};

const GUARD: Duration = Duration::from_secs(30);
const CLUSTER: &str = "test-cluster";

// ---- the messages and actors -------------------------------------------

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Add(u64);
impl Message for Add {
    type Reply = ();
}
impl RemoteMessage for Add {
    const NAME: &'static str = "test.Add";
}

/// Carries its sender's sequence number, to check order.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Seq(u32, u64);
impl Message for Seq {
    type Reply = ();
}
impl RemoteMessage for Seq {
    const NAME: &'static str = "test.Seq";
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Get;
impl Message for Get {
    type Reply = Vec<u64>;
}
impl RemoteMessage for Get {
    const NAME: &'static str = "test.Get";
}

/// An ask whose handler never answers until told to stop: for asks
/// outstanding when the node goes away.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Hold;
impl Message for Hold {
    type Reply = u8;
}
impl RemoteMessage for Hold {
    const NAME: &'static str = "test.Hold";
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Fail(String);
impl Message for Fail {
    type Reply = ();
}
impl RemoteMessage for Fail {
    const NAME: &'static str = "test.Fail";
}

/// A registered type that no actor accepts.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Stray;
impl Message for Stray {
    type Reply = ();
}
impl RemoteMessage for Stray {
    const NAME: &'static str = "test.Stray";
}

/// A type never registered with the remote layer.
#[derive(Debug, PartialEq)]
struct Local(u8);
impl Message for Local {
    type Reply = ();
}

/// A type whose serialization fails on the sender.
#[derive(Debug, PartialEq, Deserialize)]
struct Poison;
impl Serialize for Poison {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("poison refuses to be serialized"))
    }
}
impl Message for Poison {
    type Reply = ();
}
impl RemoteMessage for Poison {
    const NAME: &'static str = "test.Poison";
}

/// Records what it got; per-sender sequence numbers must grow by one.
#[derive(Default)]
struct Store {
    got: Vec<u64>,
    next: std::collections::HashMap<u32, u64>,
    held: Vec<troubadour::DeferredReply<u8>>,
}
impl Actor for Store {}
impl Handler<Add> for Store {
    fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) {
        self.got.push(n);
    }
}
impl Handler<Seq> for Store {
    fn handle(&mut self, Seq(sender, n): Seq, _: &mut Context<Self>) {
        let next = self.next.entry(sender).or_insert(0);
        assert_eq!(
            n, *next,
            "sender {sender}: message {n} arrived out of order"
        );
        *next += 1;
        self.got.push(n);
    }
}
impl Handler<Get> for Store {
    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> Vec<u64> {
        self.got.clone()
    }
}
impl Handler<Hold> for Store {
    fn handle(&mut self, _: Hold, ctx: &mut Context<Self>) -> u8 {
        self.held.extend(ctx.defer_reply::<Hold>());
        0
    }
}
impl Handler<Fail> for Store {
    fn handle(&mut self, Fail(why): Fail, ctx: &mut Context<Self>) {
        ctx.fail(why);
    }
}
impl Handler<Local> for Store {
    fn handle(&mut self, _: Local, _: &mut Context<Self>) {}
}
impl Handler<Poison> for Store {
    fn handle(&mut self, _: Poison, _: &mut Context<Self>) {}
}
impl Handler<Stray> for Store {
    fn handle(&mut self, _: Stray, _: &mut Context<Self>) {}
}
impl RemoteActor for Store {
    const NAME: &'static str = "test.Store";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts
            .handle::<Add>()
            .handle::<Seq>()
            .handle::<Get>()
            .handle::<Hold>()
            .handle::<Fail>()
            .handle::<Poison>();
    }
}

/// Another remote actor type, to look up under the wrong type.
struct Other;
impl Actor for Other {}
impl RemoteActor for Other {
    const NAME: &'static str = "test.Other";
    fn accepts(_: &mut Accepts<Self>) {}
}

/// A local actor that monitors or links to remote ones and logs what it
/// hears.
struct Watcher(mpsc::Sender<String>);
impl Actor for Watcher {}
impl Handler<Down> for Watcher {
    fn handle(&mut self, d: Down, _: &mut Context<Self>) {
        let _ = self.0.send(format!("down: {}", d.reason));
    }
}
impl Handler<Answer> for Watcher {
    fn handle(&mut self, Answer(n): Answer, _: &mut Context<Self>) {
        let _ = self.0.send(format!("answer {n}"));
    }
}
impl RemoteActor for Watcher {
    const NAME: &'static str = "test.Watcher";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts.handle::<Answer>();
    }
}
struct Do(Box<dyn FnOnce(&mut Context<Watcher>) + Send>);
impl Message for Do {
    type Reply = ();
}
impl Handler<Do> for Watcher {
    fn handle(&mut self, Do(f): Do, ctx: &mut Context<Self>) {
        f(ctx)
    }
}

/// Carries a reference to reply to: an `ActorRef` or a `Recipient`.
#[derive(Serialize, Deserialize)]
struct AskBack {
    n: u64,
    reply_to: ActorRef<Collector>,
}
impl Message for AskBack {
    type Reply = ();
}
impl RemoteMessage for AskBack {
    const NAME: &'static str = "test.AskBack";
}

#[derive(Serialize, Deserialize)]
struct AskBackRecipient {
    n: u64,
    reply_to: Recipient<Answer>,
}
impl Message for AskBackRecipient {
    type Reply = ();
}
impl RemoteMessage for AskBackRecipient {
    const NAME: &'static str = "test.AskBackRecipient";
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Answer(u64);
impl Message for Answer {
    type Reply = ();
}
impl RemoteMessage for Answer {
    const NAME: &'static str = "test.Answer";
}

/// A message holding a reference to the echoing actor itself, sent back to
/// its own node: it must arrive as the local actor, not a proxy.
#[derive(Serialize, Deserialize)]
struct WhoAmI(ActorRef<Echoer>);
impl Message for WhoAmI {
    type Reply = bool;
}
impl RemoteMessage for WhoAmI {
    const NAME: &'static str = "test.WhoAmI";
}

/// Asks for its own reference (the reply holds a reference).
#[derive(Serialize, Deserialize)]
struct Myself;
impl Message for Myself {
    type Reply = ActorRef<Echoer>;
}
impl RemoteMessage for Myself {
    const NAME: &'static str = "test.Myself";
}

/// Answers to the reference a message carries, and monitors it.
struct Echoer(mpsc::Sender<String>);
impl Actor for Echoer {}
impl Handler<AskBack> for Echoer {
    fn handle(&mut self, m: AskBack, ctx: &mut Context<Self>) {
        ctx.monitor(&m.reply_to);
        m.reply_to.tell(Answer(m.n * 10)).unwrap();
    }
}
impl Handler<AskBackRecipient> for Echoer {
    fn handle(&mut self, m: AskBackRecipient, _: &mut Context<Self>) {
        m.reply_to.tell(Answer(m.n * 100)).unwrap();
    }
}
impl Handler<WhoAmI> for Echoer {
    fn handle(&mut self, WhoAmI(r): WhoAmI, ctx: &mut Context<Self>) -> bool {
        r == ctx.myself() && r.id().node() == ctx.myself().id().node()
    }
}
impl Handler<Myself> for Echoer {
    fn handle(&mut self, _: Myself, ctx: &mut Context<Self>) -> ActorRef<Echoer> {
        ctx.myself()
    }
}
impl Handler<Down> for Echoer {
    fn handle(&mut self, d: Down, _: &mut Context<Self>) {
        let _ = self.0.send(format!("echoer saw down: {}", d.reason));
    }
}
impl RemoteActor for Echoer {
    const NAME: &'static str = "test.Echoer";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts
            .handle::<AskBack>()
            .handle::<AskBackRecipient>()
            .handle::<WhoAmI>()
            .handle::<Myself>()
            .handle::<Burst>()
            .handle::<Blob>()
            .handle::<AskAround>();
    }
}

/// Tells `n` answers to `to`, then stops: the `Down` of a monitor by `to`
/// must come after all of them.
#[derive(Serialize, Deserialize)]
struct Burst {
    n: u64,
    to: ActorRef<Watcher>,
}
impl Message for Burst {
    type Reply = ();
}
impl RemoteMessage for Burst {
    const NAME: &'static str = "test.Burst";
}
impl Handler<Burst> for Echoer {
    fn handle(&mut self, Burst { n, to }: Burst, ctx: &mut Context<Self>) {
        for i in 0..n {
            to.tell(Answer(i)).unwrap();
        }
        ctx.stop();
    }
}

/// A large message: over the user lane's cap, under the large lane's.
#[derive(Serialize, Deserialize)]
struct Blob(Vec<u8>);
impl Message for Blob {
    type Reply = usize;
}
impl RemoteMessage for Blob {
    const NAME: &'static str = "test.Blob";
}
impl Handler<Blob> for Echoer {
    fn handle(&mut self, Blob(b): Blob, _: &mut Context<Self>) -> usize {
        b.len()
    }
}

/// Asks the store it carries (on the sender's node) and waits for the
/// answer inside the handler; replies with it and the thread's name.
#[derive(Serialize, Deserialize)]
struct AskAround(ActorRef<Store>);
impl Message for AskAround {
    type Reply = (Vec<u64>, String);
}
impl RemoteMessage for AskAround {
    const NAME: &'static str = "test.AskAround";
}
impl Handler<AskAround> for Echoer {
    fn handle(&mut self, AskAround(store): AskAround, _: &mut Context<Self>) -> (Vec<u64>, String) {
        let got = store.ask(Get).timeout(GUARD).wait().unwrap();
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        (got, thread)
    }
}

/// Keeps a reference to a collector on another node and forwards to it.
#[derive(Default)]
struct Holder(Option<ActorRef<Collector>>);
impl Actor for Holder {}
impl RemoteActor for Holder {
    const NAME: &'static str = "test.Holder";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts.handle::<Keep>().handle::<Forward>();
    }
}

#[derive(Serialize, Deserialize)]
struct Keep(ActorRef<Collector>);
impl Message for Keep {
    type Reply = ();
}
impl RemoteMessage for Keep {
    const NAME: &'static str = "test.Keep";
}
impl Handler<Keep> for Holder {
    fn handle(&mut self, Keep(c): Keep, _: &mut Context<Self>) {
        self.0 = Some(c);
    }
}

/// Tells `Answer(n)` to the kept collector: whether the send was taken.
#[derive(Serialize, Deserialize)]
struct Forward(u64);
impl Message for Forward {
    type Reply = bool;
}
impl RemoteMessage for Forward {
    const NAME: &'static str = "test.Forward";
}
impl Handler<Forward> for Holder {
    fn handle(&mut self, Forward(n): Forward, _: &mut Context<Self>) -> bool {
        self.0.as_ref().unwrap().tell(Answer(n)).is_ok()
    }
}

/// Asks `Answer(n)` of the kept collector and waits: how the ask ended.
struct AskAnswer(u64);
impl Message for AskAnswer {
    type Reply = Result<(), AskError>;
}
impl Handler<AskAnswer> for Holder {
    fn handle(&mut self, AskAnswer(n): AskAnswer, _: &mut Context<Self>) -> Result<(), AskError> {
        self.0
            .as_ref()
            .unwrap()
            .ask(Answer(n))
            .timeout(GUARD)
            .wait()
    }
}

/// Collects answers on the asking node.
struct Collector(mpsc::Sender<u64>);
impl Actor for Collector {}
impl Handler<Answer> for Collector {
    fn handle(&mut self, Answer(n): Answer, _: &mut Context<Self>) {
        let _ = self.0.send(n);
    }
}
impl RemoteActor for Collector {
    const NAME: &'static str = "test.Collector";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts.handle::<Answer>();
    }
}

/// A local actor type never registered for references.
struct Unlisted;
impl Actor for Unlisted {}

#[derive(Serialize, Deserialize)]
struct CarriesUnlisted(ActorRef<Unlisted>);
impl Message for CarriesUnlisted {
    type Reply = ();
}
impl RemoteMessage for CarriesUnlisted {
    const NAME: &'static str = "test.CarriesUnlisted";
}
impl Handler<CarriesUnlisted> for Echoer {
    fn handle(&mut self, _: CarriesUnlisted, _: &mut Context<Self>) {}
}

// ---- two nodes ------------------------------------------------------------

struct Node {
    system: ActorSystem,
    remote: Remote,
}

impl Node {
    fn addr(&self) -> SocketAddr {
        self.remote.local_addr().unwrap()
    }
}

fn builder(security: Security) -> troubadour_remote::RemoteBuilder {
    registered(security).listen("127.0.0.1:0".parse().unwrap())
}

/// Every test type registered; listening nowhere.
fn registered(security: Security) -> troubadour_remote::RemoteBuilder {
    Remote::builder(CLUSTER, security)
        .register::<Add>()
        .register::<Seq>()
        .register::<Get>()
        .register::<Hold>()
        .register::<Fail>()
        .register::<Stray>()
        .register::<Poison>()
        .register::<AskBack>()
        .register::<AskBackRecipient>()
        .register::<Answer>()
        .register::<WhoAmI>()
        .register::<Myself>()
        .register::<CarriesUnlisted>()
        .register::<Burst>()
        .register::<Blob>()
        .register::<AskAround>()
        .actor::<Collector>()
        .actor::<Watcher>()
        .actor::<Echoer>()
        .actor::<Store>()
        .actor::<Holder>()
        .register::<Keep>()
        .register::<Forward>()
}

fn node(
    name: &str,
    ca: &Ca,
    configure: impl FnOnce(troubadour_remote::RemoteBuilder) -> troubadour_remote::RemoteBuilder,
) -> Node {
    let system = ActorSystem::builder().name(name).build();
    let security = Security::Tls(ca.tls(name, ca));
    let remote = system
        .block_on(configure(builder(security)).start(&system))
        .unwrap();
    Node { system, remote }
}

fn pair() -> (Node, Node) {
    let ca = Ca::new("test CA");
    (node("alpha", &ca, |b| b), node("beta", &ca, |b| b))
}

/// Beta exposes a `Store` as "store"; alpha looks it up.
fn store_on_beta(alpha: &Node, beta: &Node) -> (ActorRef<Store>, ActorRef<Store>) {
    let local = beta.system.spawn(Store::default()).unwrap();
    beta.remote.expose("store", &local).unwrap();
    let remote = alpha
        .system
        .block_on(alpha.remote.lookup::<Store>(beta.addr(), "store"))
        .unwrap();
    (local, remote)
}

fn wait<R>(system: &ActorSystem, f: impl std::future::Future<Output = R>) -> R {
    system.block_on(async { tokio::time::timeout(GUARD, f).await.expect("hang guard") })
}

// ---- the tests ---------------------------------------------------------------

#[test]
fn tell_and_ask_reach_a_remote_actor_through_an_ordinary_actor_ref() {
    let (alpha, beta) = pair();
    let (_, store) = store_on_beta(&alpha, &beta);
    assert_eq!(store.id().node().name(), "beta");
    assert!(store.is_alive());
    assert_eq!(
        alpha.remote.is_tls(beta.addr()),
        Some(true),
        "TLS is the default"
    );
    store.tell(Add(1)).unwrap();
    store.tell(Add(2)).unwrap();
    let got = store.ask(Get).timeout(GUARD).wait().unwrap();
    assert_eq!(got, [1, 2]);
    // A `Recipient` of a remote actor works the same.
    let r: Recipient<Add> = store.recipient();
    r.tell(Add(3)).unwrap();
    assert_eq!(store.ask(Get).timeout(GUARD).wait().unwrap(), [1, 2, 3]);
}

/// A node's certificate revoked while it is connected (its key leaked):
/// reloading the lists closes its connections at once and it cannot
/// connect again, without a restart; a node the lists do not name goes
/// on undisturbed.
#[test]
fn reloading_revocation_lists_closes_connections_to_revoked_nodes_at_once() {
    let ca = Ca::new("test CA");
    let alpha = node("alpha", &ca, |b| b);
    let beta = node("beta", &ca, |b| b);
    let gamma = node("gamma", &ca, |b| b);
    let (_, on_beta) = store_on_beta(&alpha, &beta);
    on_beta.tell(Add(1)).unwrap();
    assert_eq!(on_beta.ask(Get).timeout(GUARD).wait().unwrap(), [1]);
    let local = alpha.system.spawn(Store::default()).unwrap();
    alpha.remote.expose("store", &local).unwrap();
    let from_gamma = gamma
        .system
        .block_on(gamma.remote.lookup::<Store>(alpha.addr(), "store"))
        .unwrap();
    from_gamma.tell(Add(2)).unwrap();
    assert_eq!(from_gamma.ask(Get).timeout(GUARD).wait().unwrap(), [2]);
    let (_watcher, downs) = watching(&alpha, &on_beta);

    let closed = alpha
        .remote
        .reload_revocations(ca.revocation_list(&["beta"]).as_bytes())
        .unwrap();
    assert_eq!(closed, 1, "the one connection to beta");
    let down = downs
        .recv_timeout(GUARD)
        .expect("the monitor of beta's actor fired");
    assert_eq!(down, format!("down: {}", ExitReason::NoConnection));
    // Beta is refused from now on, whichever side dials.
    assert!(on_beta
        .ask(Get)
        .timeout(Duration::from_secs(3))
        .wait()
        .is_err());
    let peers = alpha.remote.peers();
    let beta_status = peers.iter().find(|p| p.node == "beta").unwrap();
    assert_ne!(beta_status.state, PeerState::Connected, "{beta_status:?}");
    // Gamma goes on.
    from_gamma.tell(Add(3)).unwrap();
    assert_eq!(from_gamma.ask(Get).timeout(GUARD).wait().unwrap(), [2, 3]);
    // Plaintext has nothing to revoke.
    let plain = ActorSystem::builder().name("plain").build();
    let plain = plain
        .block_on(builder(Security::PlaintextLoopbackOnly).start(&plain))
        .unwrap();
    assert!(matches!(
        plain.reload_revocations(ca.revocation_list(&[]).as_bytes()),
        Err(ConfigError::NotTls)
    ));
}

#[test]
fn messages_from_each_sender_arrive_in_the_order_sent() {
    let (alpha, beta) = pair();
    let (_, store) = store_on_beta(&alpha, &beta);
    const SENDERS: u32 = 4;
    const EACH: u64 = 5_000;
    let threads: Vec<_> = (0..SENDERS)
        .map(|s| {
            let store = store.clone();
            std::thread::spawn(move || {
                for n in 0..EACH {
                    let mut msg = Seq(s, n);
                    // A full outbound queue hands the message back: retry.
                    loop {
                        match store.tell(msg) {
                            Ok(()) => break,
                            Err(SendError::Full(m)) => {
                                msg = m;
                                std::thread::yield_now();
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // The Store asserts per-sender order on every message; a panic there
    // would fail it and this ask.
    let got = store.ask(Get).timeout(GUARD).wait().unwrap();
    assert_eq!(got.len() as u64, SENDERS as u64 * EACH);
}

#[test]
fn an_unregistered_or_unserializable_message_comes_back_in_a_typed_error() {
    let (alpha, beta) = pair();
    let (_, store) = store_on_beta(&alpha, &beta);
    let err = store.tell(Local(7)).unwrap_err();
    assert!(err.to_string().contains("not registered"), "{err}");
    assert_eq!(err, SendError::Unregistered(Local(7)));
    assert_eq!(
        store.ask(Local(8)).wait().unwrap_err(),
        AskError::Unregistered
    );

    match store.tell(Poison) {
        Err(SendError::Unencodable(Poison, reason)) => {
            // postcard keeps only that serialization failed, not the text.
            assert!(reason.contains("serialized"), "{reason}")
        }
        other => panic!("expected Unencodable, got {other:?}"),
    }
    // Nothing of the refused message went out: the connection still works.
    store.tell(Add(5)).unwrap();
    assert_eq!(store.ask(Get).timeout(GUARD).wait().unwrap(), [5]);
}

#[test]
fn a_type_the_receiver_does_not_accept_is_counted_and_refused_and_the_connection_stays_up() {
    let (alpha, beta) = pair();
    let (_, store) = store_on_beta(&alpha, &beta);
    // `Stray` is registered on both nodes but `Store` does not accept it.
    store.tell(Stray).unwrap();
    match store.ask(Stray).timeout(GUARD).wait() {
        Err(AskError::Refused(reason)) => assert!(reason.contains("does not accept"), "{reason}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    assert_eq!(RemoteStats::get(&beta.remote.stats().unknown_type), 2);
    store.tell(Add(9)).unwrap();
    assert_eq!(store.ask(Get).timeout(GUARD).wait().unwrap(), [9]);
    assert_eq!(RemoteStats::get(&beta.remote.stats().framing_errors), 0);
}

#[test]
fn lookups_of_a_missing_name_or_the_wrong_type_fail_with_the_reason() {
    let (alpha, beta) = pair();
    let _ = store_on_beta(&alpha, &beta);
    match alpha
        .system
        .block_on(alpha.remote.lookup::<Store>(beta.addr(), "nobody"))
    {
        Err(LookupError::NotFound(reason)) => assert!(reason.contains("nobody"), "{reason}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    match alpha
        .system
        .block_on(alpha.remote.lookup::<Other>(beta.addr(), "store"))
    {
        Err(LookupError::NotFound(reason)) => {
            assert!(
                reason.contains("test.Store") && reason.contains("test.Other"),
                "{reason}"
            )
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[test]
fn sends_to_a_stopped_remote_actor_are_dead_letters_counted_on_the_receiving_node() {
    let (alpha, beta) = pair();
    let (local, store) = store_on_beta(&alpha, &beta);
    local.stop();
    wait(&beta.system, local.wait_stopped());
    store.tell(Add(1)).unwrap(); // at most once: the sender cannot know yet
    assert_eq!(store.ask(Get).timeout(GUARD).wait(), Err(AskError::Stopped));
    let stats = beta.remote.stats();
    assert_eq!(
        RemoteStats::get(&stats.no_such_actor) + beta.system.dead_letter_count(),
        2,
        "both the tell and the ask are counted on the receiving side"
    );
}

#[test]
fn a_monitor_of_a_remote_actor_gets_its_exit_reason() {
    let (alpha, beta) = pair();
    let (_, store) = store_on_beta(&alpha, &beta);
    let (_watcher, rx) = watching(&alpha, &store);
    // The monitor request travels on the control lane, which overtakes;
    // an ask round trip makes sure it has arrived before the failure.
    store.ask(Get).timeout(GUARD).wait().unwrap();
    store.tell(Fail("boom".into())).unwrap();
    assert_eq!(rx.recv_timeout(GUARD).unwrap(), "down: failed: boom");
    // `wait_stopped` of a remote actor (already stopped: its reason).
    assert_eq!(
        wait(&alpha.system, store.wait_stopped()),
        ExitReason::Failed("boom".into())
    );
}

#[test]
fn a_lost_node_ends_asks_monitors_and_links_with_noconnection() {
    let ca = Ca::new("test CA");
    // Declared down at the first failed reconnect.
    let alpha = node("alpha", &ca, |b| b.node_down_after(Duration::ZERO));
    let beta = node("beta", &ca, |b| b);
    let (_, store) = store_on_beta(&alpha, &beta);
    let (_watcher, rx) = watching(&alpha, &store);
    let (linked, _rx2) = linked_to(&alpha, &store);
    store.ask(Get).timeout(GUARD).wait().unwrap();
    // An ask whose reply never comes, outstanding when the node goes.
    let held = store.ask(Hold).timeout(GUARD);
    store.ask(Get).timeout(GUARD).wait().unwrap();
    beta.remote.shutdown();
    assert_eq!(wait(&alpha.system, held), Err(AskError::ConnectionLost));
    assert_eq!(
        rx.recv_timeout(GUARD).unwrap(),
        "down: noconnection (the connection to the actor's node was lost)"
    );
    assert_eq!(
        wait(&alpha.system, linked.wait_stopped()),
        ExitReason::NoConnection
    );
    // The next send tries to reconnect; nothing listens any more, so the
    // node is declared down and its actors refuse sends as stopped ones.
    let _ = store.tell(Add(1));
    eventually(|| !store.is_alive());
    assert_eq!(store.tell(Add(2)), Err(SendError::Stopped(Add(2))));
    assert_eq!(store.ask(Get).wait(), Err(AskError::Stopped));
}

/// The answer to a remote ask leaves from whichever thread ends the local
/// ask: the replying actor's, the one that drops an unanswered reply, or
/// the timer's. Each ending reaches the asker as its own error.
#[test]
fn a_remote_ask_ends_with_no_reply_or_the_nodes_limit_when_the_actor_does_not_answer() {
    let ca = Ca::new("test CA");
    let alpha = node("alpha", &ca, |b| b);
    let beta = node("beta", &ca, |b| {
        b.remote_ask_limit(Duration::from_millis(200))
    });
    let (local, store) = store_on_beta(&alpha, &beta);
    // Held past beta's limit for remote asks: beta answers for the actor.
    let late = store.ask(Hold).timeout(GUARD).wait();
    assert!(
        matches!(&late, Err(AskError::Refused(why)) if why.contains("did not reply within")),
        "{late:?}"
    );
    // Held, then the actor stops: the reply is dropped unanswered.
    let held = store.ask(Hold).timeout(GUARD);
    store.ask(Get).timeout(GUARD).wait().unwrap();
    local.stop();
    assert_eq!(wait(&alpha.system, held), Err(AskError::NoReply));
    // The connection is still up, and the actor is known to have stopped.
    assert_eq!(store.ask(Get).timeout(GUARD).wait(), Err(AskError::Stopped));
}

/// A local actor on `node` that monitors `target`, and its log.
fn watching<A: Actor>(
    node: &Node,
    target: &ActorRef<A>,
) -> (ActorRef<Watcher>, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    let watcher = node.system.spawn(Watcher(tx)).unwrap();
    let t = target.clone();
    watcher
        .ask(Do(Box::new(move |ctx| ctx.monitor(&t))))
        .timeout(GUARD)
        .wait()
        .unwrap();
    (watcher, rx)
}

/// A local actor on `node` linked to `target`, and its log.
fn linked_to<A: Actor>(
    node: &Node,
    target: &ActorRef<A>,
) -> (ActorRef<Watcher>, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    let linked = node.system.spawn(Watcher(tx)).unwrap();
    let t = target.clone();
    linked
        .ask(Do(Box::new(move |ctx| ctx.link(&t))))
        .timeout(GUARD)
        .wait()
        .unwrap();
    (linked, rx)
}

/// Waits (hang guard only) until `cond` holds.
fn eventually(cond: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < GUARD,
            "hang guard: the condition never held"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Starts networking `system` again at `addr` (retrying while the old
/// listener's port is released), exposing `store` as "store".
fn restart_remote(system: &ActorSystem, ca: &Ca, name: &str, addr: SocketAddr) -> Remote {
    let start = std::time::Instant::now();
    loop {
        let security = Security::Tls(ca.tls(name, ca));
        match system.block_on(builder(security).listen(addr).start(system)) {
            Ok(r) => return r,
            Err(e) => {
                assert!(start.elapsed() < GUARD, "could not listen again: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn a_lost_connection_is_reestablished_by_the_next_send() {
    let ca = Ca::new("test CA");
    let alpha = node("alpha", &ca, |b| b);
    let beta = node("beta", &ca, |b| b);
    let (local, store) = store_on_beta(&alpha, &beta);
    let (_watcher, downs) = watching(&alpha, &store);
    store.tell(Add(1)).unwrap();
    store.ask(Get).timeout(GUARD).wait().unwrap();
    let addr = beta.addr();
    beta.remote.shutdown();
    drop(beta.remote);
    // Alpha has noticed: what was sent before is lost with the old
    // connection (at most once), what is sent from now on reconnects.
    assert_eq!(
        downs.recv_timeout(GUARD).unwrap(),
        "down: noconnection (the connection to the actor's node was lost)"
    );
    // Same system, same incarnation, listening again on the same address.
    let again = restart_remote(&beta.system, &ca, "beta", addr);
    again.expose("store", &local).unwrap();
    // The old reference works again; what is sent while reconnecting waits
    // in the new connection's buffer and arrives in order.
    eventually(|| store.tell(Add(2)).is_ok());
    store.tell(Add(3)).unwrap();
    let got = store.ask(Get).timeout(GUARD).wait().unwrap();
    assert_eq!(got[0], 1);
    assert_eq!(&got[got.len() - 2..], [2, 3]);
}

/// A TCP forwarder whose connections the test can cut, as a network
/// failure would, with both nodes still running.
struct Forwarder {
    addr: SocketAddr,
    live: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Forwarder {
    fn to(target: SocketAddr) -> Forwarder {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let live = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let tasks = live.clone();
        runtime.spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(task.abort_handle());
            }
        });
        Forwarder {
            addr,
            live,
            _runtime: runtime,
        }
    }

    /// Ends every connection through it; both ends see it closed.
    fn cut(&self) {
        for task in self.live.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// Alpha holds a reference to an actor of gamma, a node that listens
/// nowhere (it reached alpha by dialling, as a client process does),
/// through a forwarder the test can cut.
struct DialOnly {
    alpha: Node,
    _gamma_system: ActorSystem,
    gamma: Remote,
    forwarder: Forwarder,
    /// Alpha's holder, as gamma reaches it.
    held: ActorRef<Holder>,
    /// Alpha's holder, local to alpha.
    holder: ActorRef<Holder>,
    answers: mpsc::Receiver<u64>,
}

fn dial_only_gamma(
    ca: &Ca,
    configure_alpha: impl FnOnce(troubadour_remote::RemoteBuilder) -> troubadour_remote::RemoteBuilder,
) -> DialOnly {
    let alpha = node("alpha", ca, configure_alpha);
    let holder = alpha.system.spawn(Holder::default()).unwrap();
    alpha.remote.expose("holder", &holder).unwrap();
    let forwarder = Forwarder::to(alpha.addr());
    let gamma_system = ActorSystem::builder().name("gamma").build();
    let gamma = gamma_system
        .block_on(registered(Security::Tls(ca.tls("gamma", ca))).start(&gamma_system))
        .unwrap();
    assert_eq!(gamma.local_addr(), None, "gamma listens nowhere");
    let (tx, answers) = mpsc::channel();
    let collector = gamma_system.spawn(Collector(tx)).unwrap();
    let held = gamma_system
        .block_on(gamma.lookup::<Holder>(forwarder.addr, "holder"))
        .unwrap();
    held.ask(Keep(collector)).timeout(GUARD).wait().unwrap();
    assert!(holder.ask(Forward(1)).timeout(GUARD).wait().unwrap());
    assert_eq!(answers.recv_timeout(GUARD).unwrap(), 1);
    DialOnly {
        alpha,
        _gamma_system: gamma_system,
        gamma,
        forwarder,
        held,
        holder,
        answers,
    }
}

/// What is sent to a node that cannot be dialled back while it has no
/// connection waits, and goes out, in order, on the node's next
/// connection.
#[test]
fn what_is_sent_to_a_dial_only_node_waits_for_it_to_connect_again() {
    let ca = Ca::new("test CA");
    let t = dial_only_gamma(&ca, |b| b);
    t.forwarder.cut();
    eventually(|| RemoteStats::get(&t.alpha.remote.stats().connections_lost) > 0);
    // Until gamma has seen the loss too, its send could go out on the
    // dead connection and be lost with it, and nothing would redial.
    eventually(|| RemoteStats::get(&t.gamma.stats().connections_lost) > 0);
    for n in 2..=4 {
        assert!(
            t.holder.ask(Forward(n)).timeout(GUARD).wait().unwrap(),
            "a send to a node that is only away was refused"
        );
    }
    // Gamma sends again: it redials (through the forwarder), and what
    // waited on alpha goes out first, then what gamma's message caused.
    eventually(|| t.held.tell(Forward(99)).is_ok());
    let got: Vec<u64> = (0..4)
        .map(|_| t.answers.recv_timeout(GUARD).unwrap())
        .collect();
    assert_eq!(got, [2, 3, 4, 99]);
}

/// A node that cannot be dialled back and does not come back within
/// `node_down_after` of a send is declared down: the ask that waited ends
/// with `ConnectionLost`, and later sends are refused.
#[test]
fn a_dial_only_node_that_does_not_come_back_is_declared_down() {
    let ca = Ca::new("test CA");
    let t = dial_only_gamma(&ca, |b| b.node_down_after(Duration::from_millis(300)));
    t.forwarder.cut();
    eventually(|| RemoteStats::get(&t.alpha.remote.stats().connections_lost) > 0);
    let asked = t.holder.ask(AskAnswer(7)).timeout(GUARD).wait().unwrap();
    assert_eq!(asked, Err(AskError::ConnectionLost));
    assert!(!t.holder.ask(Forward(8)).timeout(GUARD).wait().unwrap());
}

/// A shutdown ends every connection, a re-established one too: later
/// sends through the proxies of that node are refused.
#[test]
fn shutdown_closes_a_reestablished_connection_too() {
    let ca = Ca::new("test CA");
    let alpha = node("alpha", &ca, |b| b);
    let beta = node("beta", &ca, |b| b);
    let (local, store) = store_on_beta(&alpha, &beta);
    store.ask(Get).timeout(GUARD).wait().unwrap();
    let addr = beta.addr();
    beta.remote.shutdown();
    drop(beta.remote);
    // Until alpha notices the loss, a send may still go to the old
    // connection and an ask on it end with `ConnectionLost`.
    eventually(|| RemoteStats::get(&alpha.remote.stats().connections_lost) > 0);
    let again = restart_remote(&beta.system, &ca, "beta", addr);
    again.expose("store", &local).unwrap();
    eventually(|| store.tell(Add(2)).is_ok());
    // The new connection is up.
    store.ask(Get).timeout(GUARD).wait().unwrap();
    alpha.remote.shutdown();
    assert!(matches!(store.tell(Add(3)), Err(SendError::Stopped(_))));
}

#[test]
fn a_restarted_node_is_a_new_node_and_the_old_one_is_declared_down() {
    let ca = Ca::new("test CA");
    let alpha = node("alpha", &ca, |b| b);
    let beta = node("beta", &ca, |b| b);
    let (_, old_store) = store_on_beta(&alpha, &beta);
    let (_watcher, downs) = watching(&alpha, &old_store);
    old_store.tell(Add(1)).unwrap();
    old_store.ask(Get).timeout(GUARD).wait().unwrap();
    let addr = beta.addr();
    beta.remote.shutdown();
    drop(beta);
    // Alpha has noticed the loss, so the next send reconnects.
    assert_eq!(
        downs.recv_timeout(GUARD).unwrap(),
        "down: noconnection (the connection to the actor's node was lost)"
    );
    // A new process would be a new system: a new incarnation.
    let system = ActorSystem::builder().name("beta").build();
    let remote = restart_remote(&system, &ca, "beta", addr);
    let fresh = system.spawn(Store::default()).unwrap();
    remote.expose("store", &fresh).unwrap();
    // The old reference reconnects, finds another incarnation: the old
    // node is declared down, its actors refuse sends as stopped ones.
    let _ = old_store.tell(Add(2));
    eventually(|| !old_store.is_alive());
    assert_eq!(old_store.tell(Add(3)), Err(SendError::Stopped(Add(3))));
    // A new lookup reaches the new node, which never saw the old messages.
    let new_store = alpha
        .system
        .block_on(alpha.remote.lookup::<Store>(addr, "store"))
        .unwrap();
    assert_ne!(new_store.id().node(), old_store.id().node());
    assert_eq!(
        new_store.ask(Get).timeout(GUARD).wait().unwrap(),
        Vec::<u64>::new()
    );
    // The old incarnation left the list of peers; the new one is there.
    let beta = peer_seen_by(&alpha.remote, "beta");
    assert_eq!(beta.incarnation, system.node().incarnation());
    assert_eq!(beta.state, PeerState::Connected);
}

/// How `of` sees the node named `name`.
fn peer_seen_by(of: &Remote, name: &str) -> PeerStatus {
    let mut found: Vec<PeerStatus> = of.peers().into_iter().filter(|p| p.node == name).collect();
    assert_eq!(found.len(), 1, "one peer named {name}: {found:?}");
    found.remove(0)
}

#[test]
fn each_peer_is_listed_with_its_connection_state_and_the_traffic_both_ways() {
    let (alpha, beta) = pair();
    let (_, store) = store_on_beta(&alpha, &beta);
    const N: u64 = 1_000;
    for i in 0..N {
        store.tell(Add(i)).unwrap();
    }
    assert_eq!(
        store.ask(Get).timeout(GUARD).wait().unwrap().len() as u64,
        N
    );
    let b = peer_seen_by(&alpha.remote, "beta");
    assert_eq!(b.incarnation, beta.system.node().incarnation());
    assert_eq!(b.address, Some(beta.addr()));
    assert_eq!(b.state, PeerState::Connected);
    assert!(b.tls);
    assert_eq!((b.connections, b.failed_attempts), (1, 0));
    // The tells and the ask, each a frame of at least a 32-byte header.
    assert!(b.frames_sent > N, "{b:?}");
    assert!(b.bytes_sent >= 32 * (N + 1), "{b:?}");
    assert!(b.frames_received >= 1, "the ask's reply: {b:?}");
    // What one side sent is what the other received, frame for frame and
    // byte for byte, once nothing is in flight (heartbeats come and go).
    eventually(|| {
        let b = peer_seen_by(&alpha.remote, "beta");
        let a = peer_seen_by(&beta.remote, "alpha");
        (
            b.frames_sent,
            b.bytes_sent,
            b.frames_received,
            b.bytes_received,
        ) == (
            a.frames_received,
            a.bytes_received,
            a.frames_sent,
            a.bytes_sent,
        )
    });
    // The same through the handle an exporter keeps.
    let view = alpha.remote.view();
    assert_eq!(view.peers().len(), 1);
    assert_eq!(view.peers()[0].node, "beta");
}

#[test]
fn a_lost_peer_shows_disconnected_then_connected_again_with_its_totals_kept() {
    let ca = Ca::new("test CA");
    let alpha = node("alpha", &ca, |b| b);
    let beta = node("beta", &ca, |b| b);
    let (local, store) = store_on_beta(&alpha, &beta);
    store.tell(Add(1)).unwrap();
    store.ask(Get).timeout(GUARD).wait().unwrap();
    let before = peer_seen_by(&alpha.remote, "beta");
    let addr = beta.addr();
    beta.remote.shutdown();
    drop(beta.remote);
    eventually(|| peer_seen_by(&alpha.remote, "beta").state == PeerState::Disconnected);
    let again = restart_remote(&beta.system, &ca, "beta", addr);
    again.expose("store", &local).unwrap();
    eventually(|| store.tell(Add(2)).is_ok());
    store.ask(Get).timeout(GUARD).wait().unwrap();
    let after = peer_seen_by(&alpha.remote, "beta");
    assert_eq!(after.state, PeerState::Connected);
    assert_eq!(after.connections, 2, "{after:?}");
    assert!(after.frames_sent >= before.frames_sent + 2, "{after:?}");
    assert!(after.bytes_received > before.bytes_received, "{after:?}");
}

/// A node listening on every interface tells the others the address it
/// advertises, and refuses to start without one.
#[test]
fn a_node_listening_on_every_interface_advertises_the_address_given() {
    let ca = Ca::new("test CA");
    let system = ActorSystem::builder().name("alpha").build();
    let tls = || Security::Tls(ca.tls("alpha", &ca));
    let wildcard: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let err = system
        .block_on(builder(tls()).listen(wildcard).start(&system))
        .unwrap_err();
    assert!(
        matches!(err, RemoteError::NoAdvertisedAddress(a) if a == wildcard),
        "{err}"
    );
    assert!(err.to_string().contains("advertise"), "{err}");

    // A free port, then every interface on it, advertised on loopback.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let advertised: SocketAddr = ([127, 0, 0, 1], port).into();
    let alpha = system
        .block_on(
            builder(tls())
                .listen(([0, 0, 0, 0], port).into())
                .advertise(advertised)
                .start(&system),
        )
        .unwrap();
    assert_eq!(alpha.advertised_addr(), Some(advertised));
    // Alpha dials beta: beta learns where alpha listens only from what
    // alpha tells it.
    let beta = node("beta", &ca, |b| b);
    let local = beta.system.spawn(Store::default()).unwrap();
    beta.remote.expose("store", &local).unwrap();
    let store = system
        .block_on(alpha.lookup::<Store>(beta.addr(), "store"))
        .unwrap();
    store.ask(Get).timeout(GUARD).wait().unwrap();
    eventually(|| peer_seen_by(&beta.remote, "alpha").address == Some(advertised));
}

#[test]
fn a_link_to_a_remote_actor_fails_the_local_one_with_the_remote_reason() {
    let (alpha, beta) = pair();
    let (_, store) = store_on_beta(&alpha, &beta);
    let (linked, _rx) = linked_to(&alpha, &store);
    store.ask(Get).timeout(GUARD).wait().unwrap();
    store.tell(Fail("remote failure".into())).unwrap();
    assert_eq!(
        wait(&alpha.system, linked.wait_stopped()),
        ExitReason::Failed("remote failure".into())
    );
}

#[test]
fn a_local_actor_ending_reaches_the_remote_actor_linked_to_it() {
    let (alpha, beta) = pair();
    let (local_store, store) = store_on_beta(&alpha, &beta);
    let (tx, _rx) = mpsc::channel();
    let linked = alpha.system.spawn(Watcher(tx)).unwrap();
    let s = store.clone();
    linked
        .ask(Do(Box::new(move |ctx| {
            ctx.link(&s);
            ctx.fail("local failure");
        })))
        .timeout(GUARD)
        .wait()
        .ok();
    assert_eq!(
        wait(&beta.system, local_store.wait_stopped()),
        ExitReason::Failed("local failure".into())
    );
}

#[test]
fn a_full_outbound_queue_refuses_tell_with_the_message() {
    let ca = Ca::new("test CA");
    let alpha = node("alpha", &ca, |b| b.outbound_queue_bytes(0));
    let beta = node("beta", &ca, |b| b);
    let (_, store) = store_on_beta(&alpha, &beta);
    assert_eq!(store.tell(Add(1)), Err(SendError::Full(Add(1))));
    assert_eq!(store.ask(Get).wait(), Err(AskError::Full));
}

#[test]
fn plaintext_is_an_explicit_opt_in_on_loopback() {
    let mk = |name: &str| {
        let system = ActorSystem::builder().name(name).build();
        let remote = system
            .block_on(builder(Security::PlaintextLoopbackOnly).start(&system))
            .unwrap();
        Node { system, remote }
    };
    let (alpha, beta) = (mk("alpha"), mk("beta"));
    let (_, store) = store_on_beta(&alpha, &beta);
    store.tell(Add(4)).unwrap();
    assert_eq!(store.ask(Get).timeout(GUARD).wait().unwrap(), [4]);
    assert_eq!(alpha.remote.is_tls(beta.addr()), Some(false));
    let system = ActorSystem::new();
    let refused = system.block_on(
        Remote::builder(CLUSTER, Security::PlaintextLoopbackOnly)
            .listen("0.0.0.0:0".parse().unwrap())
            .start(&system),
    );
    assert!(
        refused.is_err(),
        "plaintext on a non-loopback address is refused"
    );
}

#[test]
fn a_node_of_another_cluster_is_refused_before_any_message() {
    let ca = Ca::new("test CA");
    let alpha = node("alpha", &ca, |b| b);
    let system = ActorSystem::builder().name("gamma").build();
    let gamma = system
        .block_on(
            Remote::builder("other-cluster", Security::Tls(ca.tls("gamma", &ca)))
                .register::<Add>()
                .listen("127.0.0.1:0".parse().unwrap())
                .start(&system),
        )
        .unwrap();
    let store = system.spawn(Store::default()).unwrap();
    gamma.expose("store", &store).unwrap();
    match alpha.system.block_on(
        alpha
            .remote
            .lookup::<Store>(gamma.local_addr().unwrap(), "store"),
    ) {
        Err(LookupError::Connect(e)) => assert!(e.to_string().contains("cluster"), "{e}"),
        other => panic!("expected a refused connection, got {other:?}"),
    }
    assert_eq!(
        wait(&system, store.ask(Get)).unwrap(),
        Vec::<u64>::new(),
        "nothing was delivered"
    );
}

#[test]
fn send_await_waits_for_room_in_the_outbound_queue() {
    let (alpha, beta) = pair();
    let (_, store) = store_on_beta(&alpha, &beta);
    let s = store.clone();
    wait(&alpha.system, async move {
        for n in 0..2_000 {
            s.send(Add(n)).await.unwrap();
        }
    });
    assert_eq!(store.ask(Get).timeout(GUARD).wait().unwrap().len(), 2_000);
}

/// Beta exposes an `Echoer` as "echoer"; alpha looks it up.
fn echoer_on_beta(alpha: &Node, beta: &Node) -> (ActorRef<Echoer>, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel();
    let local = beta.system.spawn(Echoer(tx)).unwrap();
    beta.remote.expose("echoer", &local).unwrap();
    let remote = alpha
        .system
        .block_on(alpha.remote.lookup::<Echoer>(beta.addr(), "echoer"))
        .unwrap();
    (remote, rx)
}

#[test]
fn an_actor_ref_inside_a_message_works_on_the_far_side() {
    let (alpha, beta) = pair();
    let (echoer, beta_log) = echoer_on_beta(&alpha, &beta);
    let (tx, answers) = mpsc::channel();
    let collector = alpha.system.spawn(Collector(tx)).unwrap();
    for n in 1..=3 {
        echoer
            .tell(AskBack {
                n,
                reply_to: collector.clone(),
            })
            .unwrap();
    }
    let got: Vec<u64> = (0..3)
        .map(|_| answers.recv_timeout(GUARD).unwrap())
        .collect();
    assert_eq!(got, [10, 20, 30], "answers come back in order");
    // The far side monitored the reference it was given.
    collector.stop();
    assert_eq!(
        beta_log.recv_timeout(GUARD).unwrap(),
        "echoer saw down: normal"
    );
}

/// A handler woken by a remote message may wait for another ask to the
/// node that sent it: the answer comes in on the same connection, and the
/// wait must not keep that connection from being read, wherever the
/// receiving node runs the handler (it runs the turn of an actor a frame
/// woke on the connection's own I/O thread when it can; decision 0022).
/// The ask it waits on is written before it waits, not at the end of its
/// turn: heartbeats here are far apart, so nothing else would carry it out.
#[test]
fn a_handler_may_wait_for_an_answer_from_the_node_that_asked_it() {
    let ca = Ca::new("test CA");
    let quiet = |b: troubadour_remote::RemoteBuilder| {
        b.heartbeat(Duration::from_secs(600), Duration::from_secs(1200))
    };
    let (alpha, beta) = (node("alpha", &ca, quiet), node("beta", &ca, quiet));
    let (echoer, _) = echoer_on_beta(&alpha, &beta);
    let store = alpha.system.spawn(Store::default()).unwrap();
    store.tell(Add(7)).unwrap();
    let mut threads = Vec::new();
    for _ in 0..20 {
        let (got, thread) = echoer
            .ask(AskAround(store.clone()))
            .timeout(GUARD)
            .wait()
            .unwrap();
        assert_eq!(got, [7]);
        threads.push(thread);
    }
    // Otherwise this test would not have tried the case it is about.
    assert!(
        threads.iter().any(|t| t == "troubadour-io"),
        "no turn ran on the I/O thread: {threads:?}"
    );
}

/// With `turns_on_io_thread(false)` every turn runs on a worker.
#[test]
fn with_turns_on_io_thread_off_every_turn_runs_on_a_worker() {
    let ca = Ca::new("test CA");
    let off = |b: troubadour_remote::RemoteBuilder| b.turns_on_io_thread(false);
    let (alpha, beta) = (node("alpha", &ca, off), node("beta", &ca, off));
    let (echoer, _) = echoer_on_beta(&alpha, &beta);
    let store = alpha.system.spawn(Store::default()).unwrap();
    for _ in 0..20 {
        let (got, thread) = echoer
            .ask(AskAround(store.clone()))
            .timeout(GUARD)
            .wait()
            .unwrap();
        assert_eq!(got, Vec::<u64>::new());
        assert!(thread.starts_with("troubadour-worker"), "{thread}");
    }
}

#[test]
fn a_recipient_inside_a_message_works_on_the_far_side() {
    let (alpha, beta) = pair();
    let (echoer, _log) = echoer_on_beta(&alpha, &beta);
    let (tx, answers) = mpsc::channel();
    let collector = alpha.system.spawn(Collector(tx)).unwrap();
    echoer
        .tell(AskBackRecipient {
            n: 7,
            reply_to: collector.recipient(),
        })
        .unwrap();
    assert_eq!(answers.recv_timeout(GUARD).unwrap(), 700);
    // A recipient of something that is not an actor (an inbox) works too.
    let mut inbox = alpha.system.inbox::<Answer>().unwrap();
    echoer
        .tell(AskBackRecipient {
            n: 8,
            reply_to: inbox.recipient(),
        })
        .unwrap();
    let got = wait(&alpha.system, inbox.recv());
    assert_eq!(got.message(), &Answer(800));
}

#[test]
fn a_reference_sent_back_to_its_own_node_is_the_local_actor() {
    let (alpha, beta) = pair();
    let (echoer, _log) = echoer_on_beta(&alpha, &beta);
    // A reply that holds a reference: a proxy on alpha.
    let me = echoer.ask(Myself).timeout(GUARD).wait().unwrap();
    assert_eq!(me, echoer);
    // Sent back to beta, it is beta's local actor again.
    assert!(echoer.ask(WhoAmI(me)).timeout(GUARD).wait().unwrap());
}

#[test]
fn a_reference_to_an_unregistered_actor_type_is_a_typed_error_at_the_sender() {
    let (alpha, beta) = pair();
    let (echoer, _log) = echoer_on_beta(&alpha, &beta);
    let unlisted = alpha.system.spawn(Unlisted).unwrap();
    match echoer.tell(CarriesUnlisted(unlisted)) {
        Err(SendError::Unencodable(_, reason)) => {
            assert!(reason.contains("RemoteBuilder::actor::<"), "{reason}")
        }
        other => panic!(
            "expected Unencodable, got {:?}",
            other.map_err(|e| e.to_string())
        ),
    }
}

#[test]
fn a_down_from_another_node_comes_after_the_messages_its_actor_sent_first() {
    let (alpha, beta) = pair();
    let (echoer, _log) = echoer_on_beta(&alpha, &beta);
    let (watcher, log) = watching(&alpha, &echoer);
    echoer.ask(Myself).timeout(GUARD).wait().unwrap(); // the monitor is in place
    const N: u64 = 2_000;
    echoer
        .tell(Burst {
            n: N,
            to: watcher.clone(),
        })
        .unwrap();
    for i in 0..N {
        assert_eq!(log.recv_timeout(GUARD).unwrap(), format!("answer {i}"));
    }
    assert_eq!(log.recv_timeout(GUARD).unwrap(), "down: normal");
}

#[test]
fn a_message_over_the_user_cap_travels_on_the_large_lane_and_one_over_every_cap_is_refused() {
    let (alpha, beta) = pair();
    let (echoer, _log) = echoer_on_beta(&alpha, &beta);
    let big = 300 * 1024; // over the 256 KiB user cap
    assert_eq!(
        echoer
            .ask(Blob(vec![7; big]))
            .timeout(GUARD)
            .wait()
            .unwrap(),
        big
    );
    let huge = 17 * 1024 * 1024; // over the 16 MiB large cap
    match echoer.tell(Blob(vec![7; huge])) {
        Err(SendError::Unencodable(Blob(back), reason)) => {
            assert_eq!(back.len(), huge, "the message comes back whole");
            assert!(
                reason.contains("cap") || reason.contains("long"),
                "{reason}"
            );
        }
        other => panic!(
            "expected Unencodable, got {:?}",
            other.map_err(|e| e.to_string())
        ),
    }
    // Nothing was written: the connection still works.
    assert_eq!(
        echoer.ask(Blob(vec![1; 10])).timeout(GUARD).wait().unwrap(),
        10
    );
    assert_eq!(RemoteStats::get(&beta.remote.stats().framing_errors), 0);
}

/// The same stable name, two different shapes: what two builds that
/// disagree about a type send each other.
#[derive(Serialize, Deserialize)]
struct MismatchSend(String);
impl Message for MismatchSend {
    type Reply = ();
}
impl RemoteMessage for MismatchSend {
    const NAME: &'static str = "test.Mismatch";
}
#[derive(Serialize, Deserialize)]
struct MismatchRecv(u64);
impl Message for MismatchRecv {
    type Reply = ();
}
impl RemoteMessage for MismatchRecv {
    const NAME: &'static str = "test.Mismatch";
}
struct Strict;
impl Actor for Strict {}
impl Handler<MismatchRecv> for Strict {
    fn handle(&mut self, _: MismatchRecv, _: &mut Context<Self>) {}
}
impl Handler<MismatchSend> for Strict {
    fn handle(&mut self, _: MismatchSend, _: &mut Context<Self>) {}
}
impl Handler<Get> for Strict {
    fn handle(&mut self, _: Get, _: &mut Context<Self>) -> Vec<u64> {
        vec![42]
    }
}
impl RemoteActor for Strict {
    const NAME: &'static str = "test.Strict";
    fn accepts(accepts: &mut Accepts<Self>) {
        accepts.handle::<MismatchRecv>().handle::<Get>();
    }
}

#[test]
fn a_payload_that_does_not_decode_is_counted_and_refused_and_the_connection_stays_up() {
    let ca = Ca::new("test CA");
    let alpha = node("alpha", &ca, |b| b.register::<MismatchSend>());
    let beta = node("beta", &ca, |b| b.register::<MismatchRecv>());
    let strict = beta.system.spawn(Strict).unwrap();
    beta.remote.expose("strict", &strict).unwrap();
    let remote = alpha
        .system
        .block_on(alpha.remote.lookup::<Strict>(beta.addr(), "strict"))
        .unwrap();
    remote.tell(MismatchSend("not a number".into())).unwrap();
    match remote
        .ask(MismatchSend("again".into()))
        .timeout(GUARD)
        .wait()
    {
        Err(AskError::Refused(reason)) => assert!(reason.contains("did not decode"), "{reason}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    assert_eq!(RemoteStats::get(&beta.remote.stats().undecodable), 2);
    assert_eq!(remote.ask(Get).timeout(GUARD).wait().unwrap(), [42]);
}

#[test]
fn a_silent_peer_is_lost_at_the_heartbeat_timeout() {
    let ca = Ca::new("test CA");
    let alpha = node("alpha", &ca, |b| {
        b.heartbeat(Duration::from_millis(20), Duration::from_millis(200))
    });
    // A peer that passes TLS and the handshake, then never sends a byte.
    let endpoint = troubadour_remote::connection::Endpoint::new(
        CLUSTER,
        "mute",
        7,
        Security::Tls(ca.tls("mute", &ca)),
    );
    let conn = alpha
        .system
        .block_on(endpoint.connect(alpha.addr(), "127.0.0.1"))
        .unwrap();
    eventually(|| RemoteStats::get(&alpha.remote.stats().connections_lost) == 1);
    drop(conn);
}

// ---- control channels ----------------------------------------------------

/// Opens control channel `name` on `remote`, logging what it receives:
/// the sender's name and the bytes.
fn open_logged(
    remote: &Remote,
    name: &'static str,
) -> (ControlChannel, mpsc::Receiver<(String, Vec<u8>)>) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let channel = remote
        .control_channel(name, move |from, bytes| {
            let _ = tx
                .lock()
                .unwrap()
                .send((from.name().to_string(), bytes.to_vec()));
        })
        .unwrap();
    (channel, rx)
}

/// An extension's bytes reach the channel of the same name on the other
/// node, in the order sent, with the sending node named; a node known only
/// by its address is found with `connect`.
#[test]
fn a_control_channel_carries_bytes_to_the_same_channel_on_the_other_node() {
    let (alpha, beta) = pair();
    let (from_alpha, _) = open_logged(&alpha.remote, "test.gossip");
    let (from_beta, at_beta) = open_logged(&beta.remote, "test.gossip");
    let beta_node = alpha
        .system
        .block_on(alpha.remote.connect(beta.addr()))
        .unwrap();
    assert_eq!(beta_node.name(), "beta");
    assert_eq!(beta_node.incarnation(), beta.system.node().incarnation());
    for i in 0..20u8 {
        from_alpha.send(&beta_node, &[i, i]).unwrap();
    }
    for i in 0..20u8 {
        assert_eq!(
            at_beta.recv_timeout(GUARD).unwrap(),
            ("alpha".to_string(), vec![i, i])
        );
    }
    drop(from_beta);
}

/// A frame for a channel the receiver never opened is counted and
/// dropped; the connection stays up. A name opened twice is refused.
#[test]
fn a_channel_the_receiver_never_opened_is_counted_and_the_connection_stays_up() {
    let (alpha, beta) = pair();
    let (only_alpha, _) = open_logged(&alpha.remote, "test.only-alpha");
    let (from_alpha, _) = open_logged(&alpha.remote, "test.both");
    let (_, at_beta) = open_logged(&beta.remote, "test.both");
    let beta_node = alpha
        .system
        .block_on(alpha.remote.connect(beta.addr()))
        .unwrap();
    only_alpha.send(&beta_node, b"lost").unwrap();
    from_alpha.send(&beta_node, b"kept").unwrap();
    assert_eq!(at_beta.recv_timeout(GUARD).unwrap().1, b"kept".to_vec());
    assert_eq!(RemoteStats::get(&beta.remote.stats().unknown_channel), 1);
    assert_eq!(RemoteStats::get(&beta.remote.stats().connections_lost), 0);
    let again = alpha.remote.control_channel("test.both", |_, _| {});
    assert!(matches!(again, Err(RemoteError::NameTaken(n)) if n == "test.both"));
}

/// Sending to a node declared down is refused with the reason.
#[test]
fn a_channel_refuses_a_node_declared_down() {
    let ca = Ca::new("test CA");
    let alpha = node("alpha", &ca, |b| b);
    let beta = node("beta", &ca, |b| b);
    let (from_alpha, _) = open_logged(&alpha.remote, "test.gossip");
    let beta_node = alpha
        .system
        .block_on(alpha.remote.connect(beta.addr()))
        .unwrap();
    let addr = beta.addr();
    beta.remote.shutdown();
    drop(beta);
    // A new process at the address: the old incarnation is declared down
    // when alpha next dials it.
    let system = ActorSystem::builder().name("beta").build();
    let _new_beta = restart_remote(&system, &ca, "beta", addr);
    eventually(|| {
        let _ = from_alpha.send(&beta_node, b"anyone?");
        matches!(
            from_alpha.send(&beta_node, b"anyone?"),
            Err(ChannelError::NodeDown(_))
        )
    });
    let refused = from_alpha.send(&beta_node, b"x").unwrap_err();
    assert!(refused.to_string().contains("new incarnation"), "{refused}");
}

/// Two nodes that learn of each other at once (as cluster members do from
/// gossip) dial each other at the same moment: two connections, one each
/// way. A lookup each way, started together, is answered on both.
#[test]
fn two_nodes_that_dial_each_other_at_once_both_get_answers() {
    for _ in 0..20 {
        let (alpha, beta) = pair();
        for n in [&alpha, &beta] {
            let store = n.system.spawn(Store::default()).unwrap();
            n.remote.expose("store", &store).unwrap();
        }
        let id_of = |n: &Node| {
            NodeId::remote(
                n.system.node().name(),
                Some(n.addr()),
                n.system.node().incarnation(),
            )
            .unwrap()
        };
        let (to_beta, to_alpha) = (id_of(&beta), id_of(&alpha));
        let (a_lookup, b_lookup) = (alpha.remote.node_lookup(), beta.remote.node_lookup());
        let from_alpha = alpha
            .system
            .tokio_handle()
            .spawn(async move { a_lookup.lookup::<Store>(&to_beta, "store").await });
        let from_beta = beta
            .system
            .tokio_handle()
            .spawn(async move { b_lookup.lookup::<Store>(&to_alpha, "store").await });
        let a = alpha.system.block_on(from_alpha).unwrap();
        let b = beta.system.block_on(from_beta).unwrap();
        let (a, b) = (
            a.expect("alpha's lookup of beta"),
            b.expect("beta's lookup of alpha"),
        );
        a.tell(Add(1)).unwrap();
        assert_eq!(a.ask(Get).timeout(GUARD).wait().unwrap(), [1]);
        b.tell(Add(2)).unwrap();
        assert_eq!(b.ask(Get).timeout(GUARD).wait().unwrap(), [2]);
    }
}
