//! Tier 2 of DISTRIBUTION.md's scenarios: five real processes on
//! 127.0.0.1–127.0.0.5, mutual TLS, leases in a PostgreSQL server the test
//! starts, and the operating system's own faults: `kill -9` of a node
//! under load, and `SIGSTOP` of another for three times the lease before
//! `SIGCONT`; and partitions made by the transport's test-only fault
//! switch (`Remote::cut_links_to`, feature `faults`). The nodes, their
//! counters and the checkers are `tiers`, which tier 3
//! (`tests/namespaces.rs`) shares.

use std::time::Instant;

mod common;
mod postgres;
mod tiers;
use tiers::{set_wall_clock, Five, Host, LEASE};

/// This process's wall clock, in seconds since the epoch.
fn wall_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

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
    five_processes(Pause::BetweenRounds);
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
    five_processes(Pause::MidRound);
}

/// The cluster split 3|2 by the transport for four leases under load
/// (each side still reaching the lease store, so each keeps its shards and
/// asks across the cut end with their timeouts), then healed: the five
/// find each other again, every counter answers, and the same checkers
/// hold: nothing acknowledged lost, every journal linear, no stale epoch.
#[test]
fn five_processes_split_three_two_by_the_transport_lose_nothing_acknowledged() {
    five_processes(Pause::Partition);
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
    five_processes(Pause::MidRoundWithClockJumps);
}

#[derive(PartialEq)]
enum Pause {
    /// No pause, no kill: a 3|2 partition by the fault switch.
    Partition,
    BetweenRounds,
    MidRound,
    MidRoundWithClockJumps,
}

fn five_processes(pause: Pause) {
    if tiers::is_node() {
        return;
    }
    let _one = tiers::one_cluster_at_a_time();
    let pg = postgres::Server::start();
    let url = pg.url();
    let jumps = pause == Pause::MidRoundWithClockJumps;
    let clocks = std::env::temp_dir().join(format!("troubadour-clocks-{}", std::process::id()));
    let hosts: Vec<Host> = (1..=5)
        .map(|i| Host {
            ip: format!("127.0.0.{i}"),
            wall_clock: jumps.then(|| {
                std::fs::create_dir_all(&clocks).unwrap();
                let file = clocks.join(format!("n{}", i - 1));
                std::fs::write(&file, "+0\n").unwrap();
                file
            }),
            ..Host::default()
        })
        .collect();
    let mut five = Five::start(pg, &url, &hosts, 300);
    for _ in 0..3 {
        five.round(&[0, 1, 2, 3, 4], 60);
    }
    if pause == Pause::Partition {
        for i in [0, 1, 2] {
            five.nodes[i].as_mut().unwrap().ask("cut n3 n4");
        }
        for i in [3, 4] {
            five.nodes[i].as_mut().unwrap().ask("cut n0 n1 n2");
        }
        // The cut holds: about half the increments go to a counter whose
        // shard the other side owns, and none of those is acknowledged.
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

    // kill -9 of n4 under load.
    five.nodes[4].as_ref().unwrap().signal("-KILL");
    five.nodes[4] = None;
    for _ in 0..6 {
        five.round(&[0, 1, 2, 3], 60);
    }

    // n3 stopped for three leases, while the others go on; then resumed
    // (mid-round: with what it was doing still to do).
    let mid_round = pause == Pause::MidRound || jumps;
    if mid_round {
        for i in 0..4 {
            five.ledger.send(&mut five.nodes, i, 60);
        }
    }
    five.nodes[3].as_ref().unwrap().signal("-STOP");
    let stopped = Instant::now();
    if jumps {
        set_wall_clock(&hosts[3], "-300");
        set_wall_clock(&hosts[1], "-300");
        set_wall_clock(&hosts[2], "+300");
    }
    if mid_round {
        for i in 0..3 {
            five.ledger.collect(&mut five.nodes, i);
        }
    }
    while stopped.elapsed() < 3 * LEASE {
        five.round(&[0, 1, 2], 60);
    }
    five.nodes[3].as_ref().unwrap().signal("-CONT");
    if mid_round {
        five.ledger.collect(&mut five.nodes, 3);
    }
    for _ in 0..6 {
        five.round(&[0, 1, 2, 3], 60);
    }
    five.wait_settled("four settled nodes", "4");
    if jumps {
        // The clocks did jump.
        let now = wall_now();
        for (i, offset) in [(1, -300), (2, 300), (3, -300), (0, 0)] {
            let wall: i64 = five.nodes[i].as_mut().unwrap().ask("wall").parse().unwrap();
            assert!(
                (wall - now - offset).abs() < 30,
                "n{i}'s wall clock is {} s from the real one, not {offset} s",
                wall - now
            );
        }
        let _ = std::fs::remove_dir_all(&clocks);
    }
    assert!(
        five.shards_taken_over() > 0,
        "no shard was taken over from a lost owner: the scenario proved nothing"
    );
    five.check();
}
