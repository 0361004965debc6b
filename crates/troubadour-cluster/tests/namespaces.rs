//! Tier 3 of DISTRIBUTION.md's scenarios: the five node processes of
//! tier 2 (`tiers`), each in its own network namespace on a bridge, with
//! PostgreSQL on the bridge's address, and the network's faults made by
//! nftables in the nodes' namespaces: packets silently dropped on the way
//! in, so a cut looks to TCP and to the failure detector as a real one
//! does (no reset, no error, only silence). Partitions with the lease
//! store on one side, a link that works one way only, links that flap
//! while a share of every packet is lost, and tier 2's `kill -9` and pause
//! past the lease with wall clocks jumped 300 s either way.
//!
//! They need root, `ip` (iproute2) and `nft` (nftables), so they are
//! ignored by a plain `cargo test`; `scripts/tier3` runs them (and
//! `scripts/test` does, where the machine allows network namespaces).

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

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

const SUBNET: &str = "10.213.47";
const COUNTERS: u64 = 1_000;

fn node_ip(i: usize) -> String {
    format!("{SUBNET}.{}", i + 1)
}

fn store_ip() -> String {
    format!("{SUBNET}.254")
}

/// Runs `ip` or `nft` (optionally inside namespace `netns`, with `input`
/// on its stdin) and fails the test with what it said when it fails.
fn run(netns: Option<&str>, program: &str, args: &[&str], input: Option<&str>) {
    if let Err(e) = try_run(netns, program, args, input) {
        panic!("{e}");
    }
}

fn try_run(
    netns: Option<&str>,
    program: &str,
    args: &[&str],
    input: Option<&str>,
) -> Result<(), String> {
    let mut cmd = match netns {
        Some(ns) => {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", ns, program]);
            cmd
        }
        None => Command::new(program),
    };
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        format!(
            "could not run {program}: {e} (tier 3 needs iproute2 and nftables: \
             scripts/tier3 installs them)"
        )
    })?;
    if let Some(input) = input {
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| e.to_string())?;
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {args:?} in {netns:?} failed: {} (tier 3 needs root)",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Five network namespaces, each with one interface on a bridge in this
/// one, which has the store's address; removed on drop.
struct Network {
    bridge: String,
    namespaces: Vec<String>,
}

/// What one node's namespace drops on the way in.
#[derive(Default, Clone)]
struct Faults {
    /// Every packet from these addresses.
    from: BTreeSet<String>,
    /// This share of every packet from the bridge, in per cent.
    loss: u8,
}

impl Network {
    fn create(nodes: usize) -> Network {
        // Names unique to this process and network, short enough for an
        // interface (15 bytes): a namespace that is gone can leave its
        // veth behind for a while (until the kernel gives up on sockets
        // still retransmitting into it).
        static NETWORKS: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{}n{}",
            std::process::id() % 100_000,
            NETWORKS.fetch_add(1, Ordering::Relaxed) % 100
        );
        let network = Network {
            bridge: format!("t3b{id}"),
            namespaces: (0..nodes)
                .map(|i| format!("troubadour-t3-{id}-{i}"))
                .collect(),
        };
        run(
            None,
            "ip",
            &["link", "add", &network.bridge, "type", "bridge"],
            None,
        );
        run(
            None,
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", store_ip()),
                "dev",
                &network.bridge,
            ],
            None,
        );
        run(None, "ip", &["link", "set", &network.bridge, "up"], None);
        for (i, ns) in network.namespaces.iter().enumerate() {
            let veth = format!("t3v{id}x{i}");
            run(None, "ip", &["netns", "add", ns], None);
            run(
                None,
                "ip",
                &[
                    "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
                ],
                None,
            );
            run(
                None,
                "ip",
                &["link", "set", &veth, "master", &network.bridge, "up"],
                None,
            );
            let addr = format!("{}/24", node_ip(i));
            run(Some(ns), "ip", &["addr", "add", &addr, "dev", "eth0"], None);
            run(Some(ns), "ip", &["link", "set", "eth0", "up"], None);
            run(Some(ns), "ip", &["link", "set", "lo", "up"], None);
            // A socket closed with data unacknowledged keeps its namespace
            // (and veth) alive while it retransmits: give up soon.
            run(
                Some(ns),
                "sh",
                &["-c", "echo 1 > /proc/sys/net/ipv4/tcp_orphan_retries"],
                None,
            );
        }
        network
    }

    fn hosts(&self) -> Vec<Host> {
        self.namespaces
            .iter()
            .enumerate()
            .map(|(i, ns)| Host {
                ip: node_ip(i),
                netns: Some(ns.clone()),
                ..Host::default()
            })
            .collect()
    }

    /// Replaces node `i`'s rules with `faults`, in one transaction.
    fn set(&self, i: usize, faults: &Faults) {
        if let Err(e) = self.try_set(i, faults) {
            panic!("{e}");
        }
    }

    fn try_set(&self, i: usize, faults: &Faults) -> Result<(), String> {
        let mut rules = String::new();
        if !faults.from.is_empty() {
            let from: Vec<&str> = faults.from.iter().map(String::as_str).collect();
            rules += &format!("    ip saddr {{ {} }} drop\n", from.join(", "));
        }
        if faults.loss > 0 {
            rules += &format!(
                "    iifname \"eth0\" numgen random mod 100 < {} drop\n",
                faults.loss
            );
        }
        let script = format!(
            "table inet tier3 {{}}\ndelete table inet tier3\n\
             table inet tier3 {{\n  chain input {{\n    \
             type filter hook input priority 0; policy accept;\n{rules}  }}\n}}\n"
        );
        try_run(
            Some(&self.namespaces[i]),
            "nft",
            &["-f", "-"],
            Some(&script),
        )
    }

    /// Each group reaches only its own members; only `store_with`'s
    /// members reach the lease store.
    fn partition(&self, groups: &[&[usize]], store_with: usize) {
        for (g, group) in groups.iter().enumerate() {
            for &i in *group {
                let mut faults = Faults::default();
                for (h, other) in groups.iter().enumerate() {
                    if h != g {
                        faults.from.extend(other.iter().map(|&j| node_ip(j)));
                    }
                }
                if g != store_with {
                    faults.from.insert(store_ip());
                }
                self.set(i, &faults);
            }
        }
    }

    fn heal(&self) {
        for i in 0..self.namespaces.len() {
            self.set(i, &Faults::default());
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .status();
    }
}

/// Five nodes in their namespaces; dropped in this order: the nodes, the
/// network, and then the next test may start its own.
struct Tier3 {
    five: Five,
    hosts: Vec<Host>,
    network: Network,
    _clocks: Option<WallClocks>,
    _one: std::sync::MutexGuard<'static, ()>,
}

impl Drop for Tier3 {
    /// Healed before the nodes go, so that their connections close rather
    /// than retransmit into namespaces that are gone.
    fn drop(&mut self) {
        for i in 0..self.network.namespaces.len() {
            let _ = self.network.try_set(i, &Faults::default());
        }
    }
}

impl Tier3 {
    /// Five nodes in their namespaces, settled, after three rounds of
    /// load.
    fn start() -> Tier3 {
        Tier3::start_with(None)
    }

    /// The same, with wall clocks a test can move when `clocks` is given.
    fn start_with(clocks: Option<WallClocks>) -> Tier3 {
        let one = tiers::one_cluster_at_a_time();
        let network = Network::create(5);
        let mut hosts = network.hosts();
        if let Some(clocks) = &clocks {
            clocks.attach(&mut hosts);
        }
        let pg = postgres::Server::start_reachable(&store_ip(), &format!("{SUBNET}.0/24"));
        let url = pg.url_at(&store_ip());
        let mut five = Five::start(pg, &url, &hosts, COUNTERS);
        for _ in 0..3 {
            five.round(&[0, 1, 2, 3, 4], 60);
        }
        Tier3 {
            five,
            hosts,
            network,
            _clocks: clocks,
            _one: one,
        }
    }

    /// Healed: five settled again, three rounds answered, the checkers.
    fn heal_and_check(&mut self) {
        self.network.heal();
        self.five
            .wait_settled("five settled nodes after the heal", "5");
        for _ in 0..3 {
            self.five.round(&[0, 1, 2, 3, 4], 60);
        }
        self.five.check();
    }
}

/// 3|2 with the store on the three's side for four leases under load,
/// then 2|2|1 with the store beside the first two, then healed, with
/// 1,000 counters incremented from every node throughout (tier 1's
/// scenario on real processes and a real network): the sides without the
/// store lose their leases and stop their shards, the side with it takes
/// them over; nothing acknowledged is lost, every journal stays linear,
/// and the store never had two valid epochs of a shard.
#[test]
#[ignore = "needs root, iproute2 and nftables: scripts/tier3"]
fn partitions_three_two_then_two_two_one_then_heal_lose_no_acknowledged_increment() {
    if tiers::is_node() {
        return;
    }
    let mut t = Tier3::start();
    for (name, groups, store_with) in [
        ("3|2", &[&[0, 1, 2][..], &[3, 4]][..], 0),
        ("2|2|1", &[&[0, 1][..], &[2, 3], &[4]][..], 0),
    ] {
        t.network.partition(groups, store_with);
        let (sent, acked) = t.five.rounds_for(4 * LEASE, 60);
        eprintln!("[tier3] during {name}: {acked} of {sent} increments acknowledged");
        // Asks across the cut, and to the shards of the sides without the
        // store, end unanswered: the cut is real.
        assert!(
            acked * 10 < sent * 8,
            "{acked} of {sent} acknowledged across {name}"
        );
    }
    t.heal_and_check();
    assert!(
        t.five.shards_taken_over() > 0,
        "no shard was taken over from the sides without the store: the scenario proved nothing"
    );
}

/// Packets from n0 to n1 and from n2 to n3 lost for four leases under
/// load, the other way still delivered. TCP needs both ways, so to the
/// transport each link is dead both ways, while the two ends still hear
/// of each other through the other three: asks across a broken link end
/// with their timeouts, everything else is answered, and once healed the
/// checkers hold.
#[test]
#[ignore = "needs root, iproute2 and nftables: scripts/tier3"]
fn a_link_that_works_one_way_loses_no_acknowledged_increment() {
    if tiers::is_node() {
        return;
    }
    let mut t = Tier3::start();
    for (from, to) in [(0, 1), (2, 3)] {
        t.network.set(
            to,
            &Faults {
                from: BTreeSet::from([node_ip(from)]),
                loss: 0,
            },
        );
    }
    let (sent, acked) = t.five.rounds_for(4 * LEASE, 60);
    eprintln!("[tier3] with two one-way links: {acked} of {sent} increments acknowledged");
    assert!(
        acked < sent,
        "every increment acknowledged: the links were not cut"
    );
    t.heal_and_check();
}

/// Five per cent of every packet lost on the way into every node, and
/// every second one link cut or healed at random, for eight leases under
/// load; then healed. Nothing acknowledged is lost, and no node's
/// resident memory grows without bound: each ends within 64 MiB of where
/// it started (queues to unreachable nodes are bounded, and what they
/// held is dropped once the connection is).
#[test]
#[ignore = "needs root, iproute2 and nftables: scripts/tier3"]
fn flapping_links_with_loss_lose_nothing_acknowledged_and_memory_stays_bounded() {
    if tiers::is_node() {
        return;
    }
    let mut t = Tier3::start();
    let before: Vec<u64> = t.five.nodes.iter().flatten().map(resident_kib).collect();
    let mut faults = vec![
        Faults {
            from: BTreeSet::new(),
            loss: 5,
        };
        5
    ];
    for (i, f) in faults.iter().enumerate() {
        t.network.set(i, f);
    }
    // The flapping runs beside the load, which waits for asks across a
    // cut to time out.
    let stop = AtomicBool::new(false);
    let (flaps, (sent, acked)) = std::thread::scope(|scope| {
        let flapper = scope.spawn(|| {
            let mut lcg: u64 = 0x5eed;
            let mut next = |n: u64| {
                lcg = lcg
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (lcg >> 33) % n
            };
            let mut flaps = 0;
            while !stop.load(Ordering::Relaxed) {
                let (a, b) = (next(5) as usize, next(5) as usize);
                if a != b {
                    // Cut both ways if it was whole, healed if it was cut.
                    let (ip_a, ip_b) = (node_ip(a), node_ip(b));
                    if faults[a].from.remove(&ip_b) {
                        faults[b].from.remove(&ip_a);
                    } else {
                        faults[a].from.insert(ip_b);
                        faults[b].from.insert(ip_a);
                    }
                    t.network.set(a, &faults[a]);
                    t.network.set(b, &faults[b]);
                    flaps += 1;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            flaps
        });
        let load = t.five.rounds_for(8 * LEASE, 60);
        stop.store(true, Ordering::Relaxed);
        (flapper.join().unwrap(), load)
    });
    eprintln!("[tier3] {flaps} flaps with 5 % loss: {acked} of {sent} increments acknowledged");
    t.heal_and_check();
    let after: Vec<u64> = t.five.nodes.iter().flatten().map(resident_kib).collect();
    eprintln!("[tier3] resident memory (KiB) before {before:?}, after {after:?}");
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            *a <= b + 64 * 1024,
            "n{i}'s resident memory grew from {b} KiB to {a} KiB"
        );
    }
}

/// Tier 2's pause with wall clocks jumped, on the namespaced network:
/// `kill -9` of n4 under load, then n3 stopped in the middle of a round
/// for three leases and resumed, with n3's wall clock moved back 300 s
/// while it is stopped, n1's back and n2's forward while they run
/// (libfaketime; the monotonic clocks run on). A node keeps its lease by
/// its monotonic clock, so the resumed n3 gives up its shards and what it
/// still writes with its old epoch is refused; nothing acknowledged is
/// lost, every journal stays linear, the store never had two valid epochs.
#[test]
#[ignore = "needs root, iproute2 and nftables: scripts/tier3"]
fn wall_clocks_jumped_300_s_either_way_around_a_pause_write_nothing_stale() {
    if tiers::is_node() {
        return;
    }
    let mut t = Tier3::start_with(Some(WallClocks::new()));
    tiers::kill_then_pause(&mut t.five, &t.hosts, Pause::MidRoundWithClockJumps);
}

/// A node's resident memory (`VmRSS`), in KiB.
fn resident_kib(node: &tiers::NodeProcess) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", node.pid())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("no VmRSS in /proc/<pid>/status")
}
