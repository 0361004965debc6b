//! A PostgreSQL server that goes away and comes back (its own server, so
//! other tests' are not disturbed): writes fail with a typed error, the
//! actor stops rather than run on a state the store may lack, nothing
//! acknowledged is lost, and the same store works again once the server
//! is back.

mod common;

use common::postgres::Server;
use common::*;
use troubadour::prelude::*;
use troubadour_persistence::*;

#[test]
fn the_database_goes_away_and_comes_back() {
    let server = Server::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let store = runtime
        .block_on(PostgresStore::connect(&server.url()))
        .unwrap();
    let persistence = Persistence::new(store.clone(), store);
    let system = ActorSystem::new();
    let add = |c: &ActorRef<Counter>, n: u64| c.ask(Add(vec![n])).timeout(LIVENESS).wait().unwrap();

    let c = system.spawn(Counter::new(&persistence, "outage")).unwrap();
    assert_eq!(add(&c, 1), Ok(1));
    assert_eq!(add(&c, 2), Ok(3));

    server.down();
    match add(&c, 100) {
        Err(PersistError::Journal(JournalError::Unavailable(why))) => {
            assert!(why.contains("PostgreSQL"), "{why}")
        }
        other => panic!("a write to a stopped server: {other:?}"),
    }
    assert!(matches!(
        system.block_on(c.wait_stopped()),
        ExitReason::Failed(_)
    ));

    server.up();
    // The same store (its pool reconnects): the history is what was
    // acknowledged, and writing goes on.
    let c = system.spawn(Counter::new(&persistence, "outage")).unwrap();
    let (total, _) = c.ask(Get).timeout(LIVENESS).wait().unwrap();
    assert_eq!(total.amounts, vec![1, 2]);
    assert_eq!(add(&c, 3), Ok(6));
}
