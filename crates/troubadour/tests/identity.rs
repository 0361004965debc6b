//! Identity across systems: several systems in one process (the multi-node
//! test kit, the remote layer) must never confuse their actors, as Erlang
//! never confuses two nodes' pids.

use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use troubadour::prelude::*;

struct Nobody;
impl Actor for Nobody {}

fn manual() -> ActorSystem {
    ActorSystem::builder().manual_scheduling().build()
}

#[test]
fn the_first_actors_of_two_systems_have_different_ids_and_unequal_refs() {
    let (one, two) = (manual(), manual());
    let a = one.spawn(Nobody).unwrap();
    let b = two.spawn(Nobody).unwrap();
    assert_ne!(a.id(), b.id(), "two actors in two systems");
    assert_ne!(a, b, "refs to two different actors must differ");
    assert_eq!(a, a.clone());
}

#[test]
fn a_hash_set_keeps_ids_and_refs_from_two_systems_apart() {
    let (one, two) = (manual(), manual());
    let a = one.spawn(Nobody).unwrap();
    let b = two.spawn(Nobody).unwrap();
    let ids: HashSet<ActorId> = [a.id(), b.id(), a.id()].into_iter().collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    // A ref hashes its id, which never changes; the cell's mutability does
    // not reach the hash.
    #[allow(clippy::mutable_key_type)]
    let refs: HashSet<ActorRef<Nobody>> = [a.clone(), b, a].into_iter().collect();
    assert_eq!(refs.len(), 2);
}

#[test]
fn spawning_from_many_threads_into_many_systems_gives_unique_ids() {
    const THREADS: usize = 8;
    const EACH: usize = 200;
    let systems: Vec<ActorSystem> = (0..2).map(|_| manual()).collect();
    let handles: Vec<SystemHandle> = systems.iter().map(|s| s.handle()).collect();
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let system = handles[t % handles.len()].clone();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                (0..EACH)
                    .map(|_| system.spawn(Nobody).unwrap().id())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut seen = HashSet::new();
    for t in threads {
        for id in t.join().unwrap() {
            assert!(seen.insert(id), "{id} was handed out twice");
        }
    }
    assert_eq!(seen.len(), THREADS * EACH);
}

#[test]
fn an_ids_node_names_its_system_and_display_shows_it() {
    let orders = ActorSystem::builder()
        .name("orders")
        .manual_scheduling()
        .build();
    let billing = ActorSystem::builder()
        .name("billing")
        .manual_scheduling()
        .build();
    let a = orders.spawn(Nobody).unwrap();
    let b = billing.spawn(Nobody).unwrap();
    assert_eq!(a.id().node(), orders.node());
    assert_eq!(a.id().node().name(), "orders");
    assert_eq!(b.id().node().name(), "billing");
    assert_ne!(a.id().node(), b.id().node());
    assert_eq!(a.id().serial(), 1, "the first actor of its system");
    assert_eq!(b.id().serial(), 1, "the first actor of its system");
    assert_eq!(a.id().to_string(), "<orders.1>");
    assert_eq!(b.id().to_string(), "<billing.1>");
    assert!(format!("{a:?}").contains("<orders.1>"), "{a:?}");
}

#[test]
fn a_system_without_a_name_is_called_troubadour_and_has_no_address() {
    let system = manual();
    assert_eq!(system.node().name(), "troubadour");
    assert_eq!(system.node().address(), None);
    let a = system.spawn(Nobody).unwrap();
    assert_eq!(a.id().to_string(), "<troubadour.1>");
}

#[test]
fn two_systems_with_one_name_are_two_incarnations() {
    let build = || {
        ActorSystem::builder()
            .name("orders")
            .manual_scheduling()
            .build()
    };
    let (one, two) = (build(), build());
    assert_eq!(one.node().name(), two.node().name());
    assert_ne!(one.node().incarnation(), two.node().incarnation());
    assert_ne!(one.node(), two.node());
    let (a, b) = (one.spawn(Nobody).unwrap(), two.spawn(Nobody).unwrap());
    assert_ne!(a.id(), b.id());
    assert_eq!(a.id().node(), one.node());
    assert_eq!(b.id().node(), two.node());
}

#[test]
fn ids_of_one_system_order_by_spawn_order() {
    let system = manual();
    let ids: Vec<ActorId> = (0..5).map(|_| system.spawn(Nobody).unwrap().id()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    assert_eq!(
        ids.iter().map(|id| id.serial()).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
}

#[test]
fn invalid_system_names_are_typed_errors() {
    for bad in ["", "-lead", "_lead", "has space", "dot.ted", "ünï"] {
        let err = ActorSystem::builder()
            .name(bad)
            .manual_scheduling()
            .try_build()
            .err()
            .unwrap_or_else(|| panic!("{bad:?} was accepted"));
        assert!(
            matches!(&err, troubadour::BuildError::InvalidName { name, .. } if name == bad),
            "{bad:?}: {err:?}"
        );
        assert!(err.to_string().contains("letters, digits"), "{err}");
    }
    for good in ["a", "orders", "Orders-2", "x_y", "9lives"] {
        let system = ActorSystem::builder()
            .name(good)
            .manual_scheduling()
            .try_build()
            .unwrap_or_else(|e| panic!("{good:?}: {e}"));
        assert_eq!(system.node().name(), good);
    }
}
