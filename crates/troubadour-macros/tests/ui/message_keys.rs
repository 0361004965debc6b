// Keys of #[message(..)] that are unknown, or given without their value.
use troubadour_macros::Message;

#[derive(Message)]
#[message(replay = u64)]
struct Typo;

#[derive(Message)]
#[message(response = u64)]
struct Unknown;

#[derive(Message)]
#[message(reply)]
struct ReplyWithoutType;

#[derive(Message)]
#[message(remote)]
struct RemoteWithoutName;

#[derive(Message)]
#[message(remote = counter.Add)]
struct NameNotAString;

#[derive(Message)]
#[message(remote = )]
struct NameLeftOut;

#[derive(Message)]
#[message(crate)]
struct CrateWithoutPath;

#[derive(Message)]
#[message]
struct NoKeys;

fn main() {}
