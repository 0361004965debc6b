// A remote message's stable name: not empty, not in the runtime's namespace.
use troubadour_macros::{Message, RemoteMessage};

#[derive(Message)]
#[message(reply = u64, remote = "")]
struct Empty;

#[derive(RemoteMessage)]
#[message(remote = "troubadour.system.Ping")]
struct Reserved;

#[derive(RemoteMessage)]
#[message(remote = "troubadour.system.")]
struct ReservedPrefixOnly;

fn main() {}
