//! The seams extension crates build per-actor and per-system services on:
//! an actor's identity beyond one activation (`SpawnOptions::entity`,
//! `Context::entity`) and values attached to a system
//! (`SystemHandle::set_extension`), found from any handler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::EntityId;

struct Vehicle;
impl Actor for Vehicle {}

struct WhoAmI;
impl Message for WhoAmI {
    type Reply = Option<EntityId>;
}
impl Handler<WhoAmI> for Vehicle {
    fn handle(&mut self, _: WhoAmI, ctx: &mut Context<Self>) -> Option<EntityId> {
        ctx.entity().cloned()
    }
}

struct Crash;
impl Message for Crash {
    type Reply = ();
}
impl Handler<Crash> for Vehicle {
    fn handle(&mut self, _: Crash, ctx: &mut Context<Self>) {
        ctx.fail("crash on purpose");
    }
}

/// What a service attached to the system would be: read from a handler.
struct Fleet {
    name: &'static str,
}

struct FleetName;
impl Message for FleetName {
    type Reply = Option<&'static str>;
}
impl Handler<FleetName> for Vehicle {
    fn handle(&mut self, _: FleetName, ctx: &mut Context<Self>) -> Option<&'static str> {
        ctx.system().extension::<Fleet>().map(|f| f.name)
    }
}

#[test]
fn an_actor_knows_its_entity_and_keeps_it_across_restarts() {
    let system = ActorSystem::new();
    let me = EntityId::new("vehicle", "0012.01214");
    let v = system
        .spawn_factory_with_options(
            SpawnOptions::new()
                .entity(me.clone())
                .restart(Restart::Permanent),
            || Vehicle,
        )
        .unwrap();
    assert_eq!(v.ask(WhoAmI).wait().unwrap(), Some(me.clone()));
    // A restart is a new instance of the same actor: still the same entity.
    v.tell(Crash).unwrap();
    assert_eq!(v.ask(WhoAmI).wait().unwrap(), Some(me));
    system.shutdown(Duration::from_secs(5)).unwrap();
}

#[test]
fn an_actor_spawned_without_an_entity_has_none() {
    let system = ActorSystem::new();
    let plain = system.spawn(Vehicle).unwrap();
    assert_eq!(plain.ask(WhoAmI).wait().unwrap(), None);
    // Options that allocate the rest of the actor's configuration do not
    // make one up either.
    let bounded = system
        .spawn_with_options(SpawnOptions::new().mailbox(Mailbox::Bounded(8)), Vehicle)
        .unwrap();
    assert_eq!(bounded.ask(WhoAmI).wait().unwrap(), None);
    system.shutdown(Duration::from_secs(5)).unwrap();
}

#[test]
fn a_handler_finds_what_was_attached_to_its_own_system_only() {
    let (one, two) = (ActorSystem::new(), ActorSystem::new());
    let (a, b) = (one.spawn(Vehicle).unwrap(), two.spawn(Vehicle).unwrap());
    assert_eq!(
        a.ask(FleetName).wait().unwrap(),
        None,
        "nothing attached yet"
    );
    assert!(one.set_extension(Fleet { name: "north" }).is_none());
    assert_eq!(a.ask(FleetName).wait().unwrap(), Some("north"));
    assert_eq!(b.ask(FleetName).wait().unwrap(), None, "another system's");
    // One value per type: a second replaces the first and hands it back.
    let old = one.set_extension(Fleet { name: "south" }).unwrap();
    assert_eq!(old.name, "north");
    assert_eq!(a.ask(FleetName).wait().unwrap(), Some("south"));
    one.shutdown(Duration::from_secs(5)).unwrap();
    two.shutdown(Duration::from_secs(5)).unwrap();
}

/// A value that holds its own system's handle, as a service whose
/// callbacks reach actors does, and says when it is dropped.
struct HoldsItsSystem {
    _system: SystemHandle,
    dropped: Arc<AtomicBool>,
}
impl Drop for HoldsItsSystem {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

#[test]
fn shutdown_drops_what_was_attached_even_when_it_holds_the_system() {
    let system = ActorSystem::new();
    let dropped = Arc::new(AtomicBool::new(false));
    system.set_extension(HoldsItsSystem {
        _system: system.handle(),
        dropped: dropped.clone(),
    });
    assert!(!dropped.load(Ordering::SeqCst));
    system.shutdown(Duration::from_secs(5)).unwrap();
    assert!(dropped.load(Ordering::SeqCst), "the cycle was not broken");
    assert!(system.extension::<HoldsItsSystem>().is_none());

    // Attached after shutdown: nothing would ever drop it, so it is not
    // kept.
    let late = Arc::new(AtomicBool::new(false));
    system.set_extension(HoldsItsSystem {
        _system: system.handle(),
        dropped: late.clone(),
    });
    assert!(late.load(Ordering::SeqCst));
    assert!(system.extension::<HoldsItsSystem>().is_none());
}
