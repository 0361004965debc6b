// Each key once, also across several #[message] attributes.
use troubadour_macros::Message;

#[derive(Message)]
#[message(reply = u64, reply = String)]
struct ReplyTwice;

#[derive(Message)]
#[message(reply = u64)]
#[message(reply = u64)]
struct ReplyTwiceInTwoAttributes;

#[derive(Message)]
#[message(remote = "app.A", remote = "app.B")]
struct RemoteTwice;

fn main() {}
