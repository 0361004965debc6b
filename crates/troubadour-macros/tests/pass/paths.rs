// What the expansions name. This crate stands in for `troubadour_remote`
// (`extern crate self`), and there is no `troubadour` at all: a remote
// message and a remote actor compile with `troubadour_remote` alone, and
// so does a local message with `crate = troubadour_remote`.
extern crate self as troubadour_remote;

use std::marker::PhantomData;
use troubadour_macros::{Message, RemoteActor, RemoteMessage};

pub trait Message: Send + 'static {
    type Reply: Send + 'static;
}
pub trait RemoteMessage: Message {
    const NAME: &'static str;
}
pub trait RemoteActor: Sized {
    const NAME: &'static str;
    fn accepts(accepts: &mut Accepts<Self>);
}
pub struct Accepts<A>(Vec<(&'static str, bool)>, PhantomData<A>);
impl<A> Accepts<A> {
    pub fn handle<M: RemoteMessage>(&mut self) -> &mut Self {
        self.0.push((M::NAME, false));
        self
    }
    pub fn handle_async<M: RemoteMessage>(&mut self) -> &mut Self {
        self.0.push((M::NAME, true));
        self
    }
}

#[derive(Message)]
#[message(reply = u64, remote = "app.Add")]
struct Add;

#[derive(RemoteMessage)]
#[message(remote = "app.Reset")]
struct Reset;

#[derive(Message)]
#[message(crate = troubadour_remote, reply = String)]
struct Local;

#[derive(Message)]
#[message(crate = "crate", reply = bool)]
struct LocalByString;

#[derive(RemoteActor)]
#[remote(name = "app.Counter", handle(Add), handle_async(Reset))]
struct Counter;

fn reply<M: Message>() -> &'static str {
    std::any::type_name::<M::Reply>()
}

fn main() {
    assert_eq!(reply::<Add>(), "u64");
    assert_eq!(reply::<Reset>(), "()");
    assert_eq!(reply::<Local>(), "alloc::string::String");
    assert_eq!(reply::<LocalByString>(), "bool");
    assert_eq!((Add::NAME, Reset::NAME), ("app.Add", "app.Reset"));
    assert_eq!(<Counter as RemoteActor>::NAME, "app.Counter");
    let mut accepts = Accepts(Vec::new(), PhantomData);
    Counter::accepts(&mut accepts);
    assert_eq!(accepts.0, [("app.Add", false), ("app.Reset", true)]);
}
