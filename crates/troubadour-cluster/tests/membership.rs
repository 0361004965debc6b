//! Membership (foca over the control lane) on the simulated network, for
//! many seeds: joining through one seed, a node cut off and healed, a crash
//! and a restart, a graceful leave. Time is virtual, so "within N seconds"
//! is a statement about the protocol, not about this machine's speed.
//! `TROUBADOUR_SIM_SEED=<seed>` replays one seed.

use std::sync::mpsc;
use std::time::Duration;
use troubadour::prelude::*;
use troubadour::NodeId;
use troubadour_cluster::{MemberEvent, Membership, MembershipConfig};
use troubadour_testkit::{seeds, simulate_network, NodeIndex, SimNetwork};

const S: Duration = Duration::from_secs(1);

/// Logs the events it is sent.
struct Log(mpsc::Sender<MemberEvent>);
impl Actor for Log {}
impl Handler<MemberEvent> for Log {
    fn handle(&mut self, e: MemberEvent, _: &mut Context<Self>) {
        let _ = self.0.send(e);
    }
}

fn start(net: &SimNetwork, i: NodeIndex) -> Membership {
    let config = MembershipConfig::expected_size(5).seed(net.seed() * 31 + i as u64);
    Membership::start(net.system(i), net.remote(i), config).unwrap()
}

/// `n` nodes, each with membership, all joined through node 0.
fn cluster(net: &mut SimNetwork, n: usize) -> Vec<Membership> {
    let members: Vec<Membership> = (0..n)
        .map(|i| {
            let node = net.node(&format!("n{i}"), |b| b);
            start(net, node)
        })
        .collect();
    let seed = net.system(0).node();
    for m in &members[1..] {
        m.join([seed.clone()]);
    }
    members
}

/// `n` nodes whose remote layers are configured as a cluster's (a node
/// is declared down only when replaced, so partitions of any length
/// heal), each with membership, not joined yet.
fn as_a_cluster(net: &mut SimNetwork, n: usize) -> Vec<Membership> {
    (0..n)
        .map(|i| {
            let node = net.node(&format!("n{i}"), |b| b.node_down_only_when_replaced());
            start(net, node)
        })
        .collect()
}

/// As [`as_a_cluster`], every node joined through node 0.
fn joined_as_a_cluster(net: &mut SimNetwork, n: usize) -> Vec<Membership> {
    let members = as_a_cluster(net, n);
    for m in &members[1..] {
        m.join([net.system(0).node()]);
    }
    members
}

fn names(nodes: &[NodeId]) -> Vec<String> {
    nodes.iter().map(|n| n.name().to_string()).collect()
}

fn all(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("n{i}")).collect()
}

#[test]
fn nodes_joining_through_one_seed_all_learn_every_member() {
    simulate_network(seeds(20), |net| {
        let members = cluster(net, 5);
        net.run_for(5 * S);
        for m in &members {
            assert_eq!(names(&m.members()), all(5), "as {} sees it", m.myself());
            assert!(m.is_active());
            assert_eq!(m.rejected(), 0);
        }
    });
}

#[test]
fn a_node_cut_off_is_declared_down_within_seconds_and_rejoins_after_the_heal() {
    simulate_network(seeds(20), |net| {
        let members = cluster(net, 5);
        net.run_for(5 * S);
        let (tx, events) = mpsc::channel();
        let log = net.system(0).spawn(Log(tx)).unwrap();
        members[0].subscribe(log.recipient());
        net.run_until_idle();
        let cut = members[4].myself().clone();
        for i in 0..4 {
            net.partition(i, 4);
        }
        // A probe a second, half a second to answer, about three seconds
        // of suspicion: ten seconds is ample.
        net.run_for(10 * S);
        for m in &members[..4] {
            assert_eq!(names(&m.members()), all(4), "as {} sees it", m.myself());
            assert!(!m.is_up(&cut));
        }
        let got: Vec<MemberEvent> = events.try_iter().collect();
        assert!(got.contains(&MemberEvent::Down(cut.clone())), "{got:?}");
        // Healed, the cut node learns it was declared down, rejoins under
        // a bumped identity, and every node sees all five again.
        for i in 0..4 {
            net.heal(i, 4);
        }
        net.run_for(90 * S);
        for m in &members {
            assert_eq!(names(&m.members()), all(5), "as {} sees it", m.myself());
        }
        let got: Vec<MemberEvent> = events.try_iter().collect();
        assert!(got.contains(&MemberEvent::Up(cut)), "{got:?}");
    });
}

/// A split that lasts minutes (far past the remote layer's 30 s of
/// patience for a silent node) heals within seconds of the network: each
/// side announces itself to the members it holds down, and the remote
/// layer, configured as a cluster's is, never gave up on them.
#[test]
fn a_split_of_minutes_heals_within_seconds_of_the_network() {
    simulate_network(seeds(20), |net| {
        let members = joined_as_a_cluster(net, 5);
        net.run_for(5 * S);
        for a in 0..3 {
            for b in 3..5 {
                net.partition(a, b);
            }
        }
        net.run_for(120 * S);
        for m in &members[..3] {
            assert_eq!(names(&m.members()), all(3), "as {} sees it", m.myself());
        }
        for m in &members[3..] {
            assert_eq!(
                names(&m.members()),
                ["n3", "n4"],
                "as {} sees it",
                m.myself()
            );
        }
        net.heal_all();
        // Announces to down members every 5 s, a probe a second.
        net.run_for(15 * S);
        for m in &members {
            assert_eq!(names(&m.members()), all(5), "as {} sees it", m.myself());
        }
    });
}

/// Every node cut from every other long enough to be alone: foca stops
/// announcing once a node has no member left, so without the rounds of
/// announcements a node alone makes to the members it knew, the cluster
/// would stay five clusters of one after the network healed.
#[test]
fn nodes_a_partition_left_alone_find_each_other_again_after_it_heals() {
    simulate_network(seeds(20), |net| {
        let members = joined_as_a_cluster(net, 5);
        net.run_for(5 * S);
        for a in 0..5 {
            for b in a + 1..5 {
                net.partition(a, b);
            }
        }
        net.run_for(60 * S);
        for m in &members {
            assert_eq!(m.members().len(), 1, "as {} sees it", m.myself());
            assert!(!m.is_active(), "{} is alone", m.myself());
        }
        net.heal_all();
        // A round every 2 s to three of the four others, then the probe
        // and suspicion cycle of a renewed identity.
        net.run_for(20 * S);
        for m in &members {
            assert_eq!(names(&m.members()), all(5), "as {} sees it", m.myself());
        }
    });
}

/// A seed that cannot be reached when a node joins (not up yet, or cut
/// off): the node keeps announcing itself and joins once it can.
#[test]
fn a_node_joins_once_its_seed_can_be_reached() {
    simulate_network(seeds(20), |net| {
        let members = as_a_cluster(net, 2);
        net.partition(0, 1);
        members[1].join([net.system(0).node()]);
        net.run_for(30 * S);
        assert_eq!(names(&members[1].members()), ["n1"]);
        net.heal_all();
        net.run_for(10 * S);
        for m in &members {
            assert_eq!(names(&m.members()), all(2), "as {} sees it", m.myself());
        }
    });
}

#[test]
fn a_crashed_node_is_declared_down_and_its_restart_is_a_new_member() {
    simulate_network(seeds(20), |net| {
        let members = cluster(net, 4);
        net.run_for(5 * S);
        let old = members[3].myself().clone();
        net.crash(3);
        net.run_for(10 * S);
        for m in &members[..3] {
            assert!(!m.is_up(&old), "{} still sees the crashed node", m.myself());
            assert_eq!(m.members().len(), 3);
        }
        net.restart(3, |b| b);
        let again = start(net, 3);
        again.join([net.system(0).node()]);
        net.run_for(5 * S);
        let new = again.myself().clone();
        assert_ne!(new, old, "a restart is another incarnation");
        for m in members[..3].iter().chain([&again]) {
            assert_eq!(names(&m.members()), all(4), "as {} sees it", m.myself());
            assert!(m.is_up(&new) && !m.is_up(&old));
        }
    });
}

#[test]
fn a_node_that_leaves_is_down_for_the_others_at_once() {
    simulate_network(seeds(20), |net| {
        let members = cluster(net, 4);
        net.run_for(5 * S);
        let leaver = members[2].myself().clone();
        members[2].leave();
        // No suspicion time: the leave is gossiped as it is.
        net.run_for(S);
        for (i, m) in members.iter().enumerate() {
            if i != 2 {
                assert!(!m.is_up(&leaver), "{} still sees the leaver", m.myself());
            }
        }
    });
}

// ---- over real TCP with mutual TLS -----------------------------------------

mod over_tls {
    use super::*;
    use troubadour_remote::dev_certs::DevCa;
    use troubadour_remote::{Remote, Security};

    const GUARD: Duration = Duration::from_secs(60);

    fn eventually(what: &str, cond: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !cond() {
            assert!(start.elapsed() < GUARD, "hang guard: {what} never held");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    struct TlsNode {
        system: ActorSystem,
        remote: Remote,
        membership: Membership,
    }

    fn tls_node(ca: &DevCa, name: &str) -> TlsNode {
        let system = ActorSystem::builder().name(name).build();
        let remote = system
            .block_on(
                Remote::builder("membership-test", Security::Tls(ca.tls(name).unwrap()))
                    .listen("127.0.0.1:0".parse().unwrap())
                    .start(&system),
            )
            .unwrap();
        // Quick probes, so the test does not wait out LAN defaults.
        let config = MembershipConfig::expected_size(3)
            .probe_period(Duration::from_millis(200))
            .probe_rtt(Duration::from_millis(100))
            .suspect_to_down_after(Duration::from_secs(1));
        let membership = Membership::start(&system, &remote, config).unwrap();
        TlsNode {
            system,
            remote,
            membership,
        }
    }

    /// Three processes' worth of nodes on loopback: they join through
    /// the addresses of the first, all see all three, and a node whose
    /// remote layer shuts down is declared down by the others.
    #[test]
    fn three_nodes_join_by_address_and_see_a_lost_one_go_down() {
        let ca = DevCa::new("membership test CA").unwrap();
        let nodes: Vec<TlsNode> = ["a", "b", "c"].iter().map(|n| tls_node(&ca, n)).collect();
        let seed = nodes[0].remote.local_addr().unwrap();
        for n in &nodes[1..] {
            let found = n
                .system
                .block_on(n.membership.join_addresses(&n.remote, &[seed]));
            assert_eq!(found, 1);
        }
        eventually("every node sees three members", || {
            nodes.iter().all(|n| n.membership.members().len() == 3)
        });
        let lost = nodes[2].membership.myself().clone();
        nodes[2].remote.shutdown();
        eventually("the others declare the lost node down", || {
            nodes[..2].iter().all(|n| !n.membership.is_up(&lost))
        });
        for n in &nodes[..2] {
            assert_eq!(names(&n.membership.members()), ["a", "b"]);
        }
    }
}
