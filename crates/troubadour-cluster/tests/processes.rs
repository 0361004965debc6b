//! Tier 2 of DISTRIBUTION.md's scenarios: five real processes on
//! 127.0.0.1–127.0.0.5, mutual TLS, leases in a PostgreSQL server the test
//! starts, and the operating system's own faults: `kill -9` of a node
//! under load, and `SIGSTOP` of another for three times the lease before
//! `SIGCONT`; and partitions made by the transport's test-only fault
//! switch (`Remote::cut_links_to`, feature `faults`). The nodes, their
//! counters and the checkers are `tiers`, which tier 3
//! (`tests/namespaces.rs`) shares.

mod common;
mod postgres;
mod tiers;
use tiers::{Five, Host, Pause, WallClocks, LEASE};

/// A node of the cluster, when a test below starts this binary as one;
/// nothing otherwise.
#[test]
fn node_process() {
    tiers::node_process();
}

/// kill -9 of n4 under load, then n3 stopped between two rounds for three
/// leases (nothing of it in flight) and resumed: its shards moved, it
/// gives them up, and nothing it does afterwards is a second activation.
#[test]
fn five_processes_survive_kill_9_and_a_pause_past_the_lease() {
    five_processes(Scenario::KillThenPause(Pause::BetweenRounds));
}

/// The same with n3 stopped in the middle of a round: messages already in
/// its entities' mailboxes are handled when it resumes, before its region
/// sees that its lease ran out, by activations whose shards another node
/// now owns. Their writes carry the old epoch and the journal refuses
/// them once the new owner has recovered the counter (with CAS counters
/// that did not know the epoch, n3 wrote over the new owners' totals in
/// three runs of three).
#[test]
fn a_node_paused_in_the_middle_of_a_round_writes_nothing_stale_once_resumed() {
    five_processes(Scenario::KillThenPause(Pause::MidRound));
}

/// The cluster split 3|2 by the transport for four leases under load
/// (each side still reaching the lease store, so each keeps its shards and
/// asks across the cut end with their timeouts), then healed: the five
/// find each other again, every counter answers, and the same checkers
/// hold: nothing acknowledged lost, every journal linear, no stale epoch.
#[test]
fn five_processes_split_three_two_by_the_transport_lose_nothing_acknowledged() {
    five_processes(Scenario::Partition);
}

/// The mid-round pause with wall clocks jumped 300 s: n3's back while it
/// is stopped, n1's back and n2's forward while they run (libfaketime;
/// the monotonic clocks run on). A node keeps its lease by its monotonic
/// clock, so the resumed n3 still gives up its shards and its stale
/// writes are still refused; the running nodes keep theirs. Nothing
/// acknowledged is lost, every journal stays linear and the lease store
/// never had two valid epochs.
#[test]
fn wall_clocks_jumped_300_s_either_way_around_a_pause_write_nothing_stale() {
    five_processes(Scenario::KillThenPause(Pause::MidRoundWithClockJumps));
}

/// What a run of five processes goes through.
enum Scenario {
    /// A 3|2 partition by the fault switch, no pause, no kill.
    Partition,
    /// `kill -9` and a pause ([`tiers::kill_then_pause`]).
    KillThenPause(Pause),
}

fn five_processes(scenario: Scenario) {
    if tiers::is_node() {
        return;
    }
    let _one = tiers::one_cluster_at_a_time();
    let pg = postgres::Server::start();
    let url = pg.url();
    let mut hosts: Vec<Host> = (1..=5)
        .map(|i| Host {
            ip: format!("127.0.0.{i}"),
            ..Host::default()
        })
        .collect();
    let clocks = WallClocks::new();
    if matches!(
        scenario,
        Scenario::KillThenPause(Pause::MidRoundWithClockJumps)
    ) {
        clocks.attach(&mut hosts);
    }
    let mut five = Five::start(pg, &url, &hosts, 300);
    for _ in 0..3 {
        five.round(&[0, 1, 2, 3, 4], 60);
    }
    let pause = match scenario {
        Scenario::KillThenPause(pause) => pause,
        Scenario::Partition => {
            for i in [0, 1, 2] {
                five.nodes[i].as_mut().unwrap().ask("cut n3 n4");
            }
            for i in [3, 4] {
                five.nodes[i].as_mut().unwrap().ask("cut n0 n1 n2");
            }
            // The cut holds: about half the increments go to a counter
            // whose shard the other side owns, and none of those is
            // acknowledged.
            let (sent, acked) = five.rounds_for(4 * LEASE, 60);
            eprintln!("[tier2] during the split: {acked} of {sent} increments acknowledged");
            assert!(
                acked * 10 < sent * 8,
                "{acked} of {sent} acknowledged across a split"
            );
            for n in five.nodes.iter_mut().flatten() {
                assert_eq!(n.ask("heal"), "healed");
            }
            five.wait_settled("five settled nodes after the heal", "5");
            for _ in 0..3 {
                five.round(&[0, 1, 2, 3, 4], 60);
            }
            five.check();
            return;
        }
    };
    tiers::kill_then_pause(&mut five, &hosts, pause);
}
