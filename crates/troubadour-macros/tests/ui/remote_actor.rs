// #[remote(..)] of derive(RemoteActor): the name is required and checked,
// messages are listed in parentheses, each once.
use troubadour_macros::RemoteActor;

#[derive(RemoteActor)]
#[remote(handle(Add))]
struct NoName;

#[derive(RemoteActor)]
struct NoAttribute;

#[derive(RemoteActor)]
#[remote(name = "", handle(Add))]
struct EmptyName;

#[derive(RemoteActor)]
#[remote(name = "troubadour.system.Guardian")]
struct ReservedName;

#[derive(RemoteActor)]
#[remote(name = "app.A", handles(Add))]
struct Typo;

#[derive(RemoteActor)]
#[remote(name = "app.A", handle = Add)]
struct NotAList;

#[derive(RemoteActor)]
#[remote(name = "app.A", handle(Add, Get), handle_async(Add))]
struct ListedTwice;

#[derive(RemoteActor)]
#[remote(name = "app.A", name = "app.B")]
struct NameTwice;

#[derive(RemoteActor)]
#[remote = "app.A"]
struct NotParenthesized;

fn main() {}
