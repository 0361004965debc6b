// derive(RemoteMessage) is for messages with a stable name.
use troubadour_macros::RemoteMessage;

#[derive(RemoteMessage)]
#[message(reply = u64)]
struct Add(u64);

fn main() {}
