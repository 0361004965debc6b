//! The derives in use: `#[derive(Message)]`, `#[derive(RemoteMessage)]`
//! and `#[derive(RemoteActor)]` give the impls a user would write by hand
//! (the reply type, the stable name and its wire id, the accepted
//! messages), a derived message round-trips through the codec, and a
//! derived remote actor accepts across two nodes exactly what it lists.
//! What must not compile is in troubadour-macros' trybuild tests.

use bytes::BytesMut;
use serde::{Deserialize, Serialize};
use std::any::TypeId;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour_remote::codec::{encode_message, type_id, Registry};
use troubadour_remote::frame::{FrameDecoder, Limits};
use troubadour_remote::{Remote, RemoteActor, RemoteMessage, Security};

const GUARD: Duration = Duration::from_secs(10);

/// The reply of `M`, as a type id.
fn reply_of<M: Message>() -> TypeId {
    TypeId::of::<M::Reply>()
}

// ---- messages ----------------------------------------------------------------

/// Local, no attribute: replies `()`.
#[derive(troubadour::Message)]
struct Tick;

/// Local, with a reply.
#[derive(troubadour::Message)]
#[message(reply = Vec<u64>)]
struct Snapshot;

/// Remote through `derive(Message)`, with a reply.
#[derive(Debug, PartialEq, Serialize, Deserialize, troubadour::Message)]
#[message(reply = u64, remote = "test.derive.Add")]
struct Add(u64);

/// Remote through `derive(RemoteMessage)`, the reply left out; keys split
/// over two attributes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, RemoteMessage)]
#[message(remote = "test.derive.Post")]
#[message(reply = bool)]
struct Post {
    room: u32,
    text: String,
}

/// A message that is `RemoteMessage` but not in `Counter`'s list.
#[derive(Serialize, Deserialize, RemoteMessage)]
#[message(remote = "test.derive.Unlisted")]
struct Unlisted;

/// Generic, with a where-clause: a message for every `T` that makes it
/// one, remote for every `T` that serde can carry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, RemoteMessage)]
#[message(reply = Option<T>, remote = "test.derive.Echo")]
struct Echo<T>(T)
where
    T: Clone;

/// Local, with a lifetime and an enum: a message where `'a` is `'static`.
#[derive(troubadour::Message)]
#[message(reply = &'a str)]
enum Borrowed<'a> {
    Text(&'a str),
}

/// Local, in a crate that names only `troubadour_remote`.
#[derive(troubadour_remote::Message)]
#[message(crate = troubadour_remote, reply = String)]
struct Greet;

#[test]
fn derive_message_sets_the_reply_type_and_defaults_it_to_unit() {
    assert_eq!(reply_of::<Tick>(), TypeId::of::<()>());
    assert_eq!(reply_of::<Snapshot>(), TypeId::of::<Vec<u64>>());
    assert_eq!(reply_of::<Add>(), TypeId::of::<u64>());
    assert_eq!(reply_of::<Post>(), TypeId::of::<bool>());
    assert_eq!(reply_of::<Unlisted>(), TypeId::of::<()>());
    assert_eq!(reply_of::<Greet>(), TypeId::of::<String>());
    assert_eq!(reply_of::<Echo<String>>(), TypeId::of::<Option<String>>());
    assert_eq!(reply_of::<Borrowed<'static>>(), TypeId::of::<&str>());
    let Borrowed::Text(text) = Borrowed::Text("used");
    assert_eq!(text, "used");
}

#[test]
fn derive_remote_message_sets_the_stable_name_for_every_instantiation() {
    assert_eq!(Add::NAME, "test.derive.Add");
    assert_eq!(Post::NAME, "test.derive.Post");
    assert_eq!(<Echo<u8> as RemoteMessage>::NAME, "test.derive.Echo");
    assert_eq!(<Echo<String> as RemoteMessage>::NAME, "test.derive.Echo");
}

/// Encodes `value` as the frame a node would send, and decodes it as the
/// receiving node's registry would.
fn round_trip<M: RemoteMessage + Clone>(value: &M) -> M {
    let mut registry = Registry::new();
    let id = registry.register::<M>(M::NAME).unwrap();
    assert_eq!(id, type_id(M::NAME), "the wire id is the name's hash");
    let limits = Limits::default();
    let mut wire = BytesMut::new();
    encode_message(&mut wire, id, 1, 2, value, &limits).unwrap();
    let mut decoder = FrameDecoder::new(limits);
    decoder.feed(&wire);
    let frame = decoder.decode().unwrap().expect("one whole frame");
    let decoded = registry.decode(&frame).unwrap();
    decoded.downcast_ref::<M>().expect("decoded as M").clone()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Point {
    x: i32,
    y: i32,
}

#[test]
fn a_derived_remote_message_round_trips_through_the_codec() {
    let post = Post {
        room: 7,
        text: "hello".into(),
    };
    assert_eq!(round_trip(&post), post);
    let echo = Echo(Point { x: -1, y: 2 });
    assert_eq!(round_trip(&echo), echo);
}

// ---- a remote actor ----------------------------------------------------------

/// Resets the counter; handled by an `AsyncHandler`.
#[derive(Serialize, Deserialize, RemoteMessage)]
#[message(reply = u64, remote = "test.derive.Reset")]
struct Reset;

#[derive(Default, RemoteActor)]
#[remote(name = "test.derive.Counter", handle(Add, Post))]
#[remote(handle_async(Reset))]
struct Counter {
    total: u64,
    posts: Vec<String>,
}
impl Actor for Counter {}
impl Handler<Add> for Counter {
    fn handle(&mut self, Add(n): Add, _: &mut Context<Self>) -> u64 {
        self.total += n;
        self.total
    }
}
impl Handler<Post> for Counter {
    fn handle(&mut self, post: Post, _: &mut Context<Self>) -> bool {
        self.posts.push(post.text);
        self.posts.len() == 1
    }
}
impl AsyncHandler<Reset> for Counter {
    async fn handle(&mut self, _: Reset, _: &mut Context<Self>) -> u64 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        std::mem::take(&mut self.total)
    }
}
impl Handler<Unlisted> for Counter {
    fn handle(&mut self, _: Unlisted, _: &mut Context<Self>) {}
}

/// A generic remote actor: the derive carries `T` and its bounds through.
#[derive(RemoteActor)]
#[remote(name = "test.derive.Keeper", handle(Echo<T>))]
struct Keeper<T: Clone + Send + 'static> {
    last: Option<T>,
}
impl<T: Clone + Send + 'static> Actor for Keeper<T> {}
impl<T: Clone + Send + 'static> Handler<Echo<T>> for Keeper<T> {
    fn handle(&mut self, Echo(t): Echo<T>, _: &mut Context<Self>) -> Option<T> {
        self.last.replace(t)
    }
}

#[test]
fn derive_remote_actor_sets_the_stable_name() {
    assert_eq!(Counter::NAME, "test.derive.Counter");
    assert_eq!(<Keeper<u8> as RemoteActor>::NAME, "test.derive.Keeper");
}

fn node(name: &str) -> (ActorSystem, Remote) {
    let system = ActorSystem::builder().name(name).build();
    let remote = system
        .block_on(
            Remote::builder("derive-test", Security::PlaintextLoopbackOnly)
                .register::<Add>()
                .register::<Post>()
                .register::<Reset>()
                .register::<Unlisted>()
                .register::<Echo<String>>()
                .listen("127.0.0.1:0".parse().unwrap())
                .start(&system),
        )
        .unwrap();
    (system, remote)
}

#[test]
fn a_derived_remote_actor_accepts_what_it_lists_from_another_node() {
    let (alpha, alpha_remote) = node("alpha");
    let (beta, beta_remote) = node("beta");
    let local = beta.spawn(Counter::default()).unwrap();
    beta_remote.expose("counter", &local).unwrap();
    let addr = beta_remote.local_addr().unwrap();
    let counter = alpha
        .block_on(alpha_remote.lookup::<Counter>(addr, "counter"))
        .unwrap();

    // `handle(Add, Post)`: synchronous handlers.
    counter.tell(Add(2)).unwrap();
    assert_eq!(counter.ask(Add(3)).timeout(GUARD).wait().unwrap(), 5);
    let post = Post {
        room: 1,
        text: "hi".into(),
    };
    assert!(counter.ask(post).timeout(GUARD).wait().unwrap());
    // `handle_async(Reset)`: the async handler.
    assert_eq!(counter.ask(Reset).timeout(GUARD).wait().unwrap(), 5);
    assert_eq!(counter.ask(Add(1)).timeout(GUARD).wait().unwrap(), 1);
    // Registered, handled locally, but not listed: refused by the
    // receiving node.
    match counter.ask(Unlisted).timeout(GUARD).wait() {
        Err(AskError::Refused(reason)) => {
            assert!(reason.contains("does not accept"), "{reason}")
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    // Both refs reach the one actor.
    assert_eq!(local.ask(Add(0)).timeout(GUARD).wait().unwrap(), 1);
}

#[test]
fn a_derived_generic_remote_actor_accepts_its_generic_message() {
    let (alpha, alpha_remote) = node("alpha");
    let (beta, beta_remote) = node("beta");
    let local = beta.spawn(Keeper::<String> { last: None }).unwrap();
    beta_remote.expose("keeper", &local).unwrap();
    let addr = beta_remote.local_addr().unwrap();
    let keeper = alpha
        .block_on(alpha_remote.lookup::<Keeper<String>>(addr, "keeper"))
        .unwrap();
    let first = keeper.ask(Echo("a".to_string())).timeout(GUARD).wait();
    assert_eq!(first.unwrap(), None);
    let second = keeper.ask(Echo("b".to_string())).timeout(GUARD).wait();
    assert_eq!(second.unwrap(), Some("a".to_string()));
}
