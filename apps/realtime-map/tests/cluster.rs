//! The service as a local cluster, end to end, as a person would run it:
//! `realtime-map --cluster 3` (this package's binary) starts three node
//! processes on 127.0.0.1–127.0.0.3 with mutual TLS and SQLite stores; the
//! simulated buses become virtual actors spread over the nodes; any node
//! answers for any bus, and the map's stream carries every node's buses.
//! Then `kill -9` of one node: its buses answer again from the other two,
//! starting from the state they last flushed, and the cluster view counts
//! the failovers. SIGTERM stops everything.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{eventually, get, get_json};

const VEHICLES: usize = 120;

/// Every vehicle the cluster has, as node `addr` gathers them: id →
/// (owner, updates).
fn all_vehicles(addr: SocketAddr) -> Option<BTreeMap<String, (String, u64)>> {
    let (status, v) = get_json(addr, "/vehicles?bbox=-180,-90,180,90")?;
    if status != 200 || v.get("nodes_missing").is_some() {
        return None;
    }
    Some(
        v["vehicles"]
            .as_array()?
            .iter()
            .map(|s| {
                (
                    s["id"].as_str().unwrap().to_string(),
                    (
                        s["node"].as_str().unwrap().to_string(),
                        s["updates"].as_u64().unwrap(),
                    ),
                )
            })
            .collect(),
    )
}

/// The nodes whose buses the map's stream of `addr` carries, read for
/// `long`.
fn nodes_on_the_map(addr: SocketAddr, long: Duration) -> BTreeSet<String> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(format!("GET /events HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut nodes = BTreeSet::new();
    let start = Instant::now();
    while start.elapsed() < long {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {
                if let Some(data) = line.trim_end().strip_prefix("data: ") {
                    if let Ok(batch) = serde_json::from_str::<Value>(data) {
                        if let Some(node) = batch["node"].as_str() {
                            nodes.insert(node.to_string());
                        }
                    }
                }
            }
            Err(_) => continue,
        }
    }
    nodes
}

struct Launcher {
    child: Child,
    nodes: Vec<(u32, SocketAddr)>,
    /// What the launcher prints after its node lines.
    printed: std::sync::mpsc::Receiver<String>,
    log: std::path::PathBuf,
}

impl Launcher {
    fn start() -> Launcher {
        // A port free on 127.0.0.1 is, in practice, free on .2 and .3.
        let cluster_port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::env::temp_dir().join(format!(
            "realtime-map-cluster-test-{}.log",
            std::process::id()
        ));
        let mut child = Command::new(env!("CARGO_BIN_EXE_realtime-map"))
            .args(["--cluster", "3", "--vehicles", &VEHICLES.to_string()])
            .args(["--listen", "127.0.0.1:0", "--broker-listen", "127.0.0.1:0"])
            .args(["--cluster-listen", &format!("127.0.0.1:{cluster_port}")])
            .args(["--lease", "3s", "--flush-every", "500ms", "--shards", "64"])
            .args(["--workers", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut nodes = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            // node <n> pid <pid> http://<addr>
            let words: Vec<&str> = line.split_whitespace().collect();
            if let ["node", _, "pid", pid, url] = words[..] {
                let addr = url.strip_prefix("http://").unwrap().parse().unwrap();
                nodes.push((pid.parse().unwrap(), addr));
            }
            if nodes.len() == 3 {
                break;
            }
        }
        // Keep reading stdout so the launcher never blocks on it.
        let (tx, printed) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let launcher = Launcher {
            child,
            nodes,
            printed,
            log,
        };
        assert_eq!(launcher.nodes.len(), 3, "{}", launcher.log_text());
        launcher
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// What the nodes logged lately, to show with a failure: which shards
    /// moved, which leases were renewed late, what went wrong.
    fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(80)..].join("\n")
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for (pid, _) in &self.nodes {
            let _ = Command::new("kill")
                .args(["-9", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by the launcher) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn three_node_processes_serve_every_bus_and_survive_kill_9_of_one() {
    let launcher = Launcher::start();
    let addrs: Vec<SocketAddr> = launcher.nodes.iter().map(|(_, a)| *a).collect();
    let ips: BTreeSet<String> = addrs.iter().map(|a| a.ip().to_string()).collect();
    assert_eq!(
        ips,
        BTreeSet::from(["127.0.0.1".into(), "127.0.0.2".into(), "127.0.0.3".into()]),
        "one loopback address per node"
    );

    // The cluster forms: three members, each holding its lease and its
    // share of the shards.
    eventually("the cluster settles", Duration::from_secs(60), || {
        let (_, view) = get_json(addrs[0], "/cluster")?;
        let nodes = view["nodes"].as_array()?;
        (nodes.len() == 3
            && nodes.iter().all(|n| {
                n["balanced"] == true && n["lease_valid"] == true && n["shards"].as_u64() > Some(0)
            }))
        .then_some(())
    });

    // Each node's runtime dashboard shows the cluster as its lease store
    // says: three nodes up, every one of the 64 shards owned.
    let panel = eventually(
        "node1's dashboard shows the settled cluster",
        Duration::from_secs(60),
        || {
            let (_, overview) = get_json(addrs[0], "/dashboard/api/overview")?;
            let cluster = overview.get("cluster").filter(|c| !c.is_null())?.clone();
            let nodes = cluster["nodes"].as_array()?;
            let shards: u64 = nodes.iter().filter_map(|n| n["shards"].as_u64()).sum();
            (nodes.len() == 3 && shards == 64 && nodes.iter().all(|n| n["up"] == true))
                .then_some(cluster)
        },
    );
    assert_eq!(panel["node"], "node1");
    let here: Vec<_> = panel["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["here"] == true)
        .collect();
    assert_eq!(here.len(), 1, "{panel}");
    assert_eq!(here[0]["name"], "node1");
    // And its /metrics carries the cluster's and the remote layer's
    // families beside the runtime's.
    let (_, metrics) = get(addrs[0], "/metrics").unwrap();
    for line in [
        "troubadour_cluster_members{node=\"node1\"} 3",
        "troubadour_cluster_lease_valid{node=\"node1\"} 1",
        "troubadour_remote_handshakes_refused_total 0",
        "troubadour_persistence_failed_commits_total{store=\"sqlite\"} 0",
    ] {
        assert!(metrics.contains(line), "no `{line}` in:\n{metrics}");
    }
    let owners = metrics
        .lines()
        .filter(|l| l.starts_with("troubadour_cluster_shards_owned{node=\"node1\",owner="))
        .count();
    assert_eq!(owners, 3, "{metrics}");

    // Every bus is active somewhere, and every node gathers all of them.
    let vehicles = eventually("every bus is on the map", Duration::from_secs(60), || {
        all_vehicles(addrs[1]).filter(|v| v.len() == VEHICLES)
    });
    let owners: BTreeSet<&String> = vehicles.values().map(|(node, _)| node).collect();
    assert_eq!(owners.len(), 3, "buses live on all three nodes: {owners:?}");

    // Any node answers for any bus, from its owner.
    for (id, (owner, _)) in vehicles.iter().take(15) {
        for addr in &addrs {
            let (status, v) = get_json(*addr, &format!("/vehicle?id={id}")).unwrap();
            if status != 200 {
                let views: Vec<String> = addrs
                    .iter()
                    .map(|a| format!("{a}: {:?}", get_json(*a, "/cluster").map(|(_, v)| v)))
                    .collect();
                panic!(
                    "{id} through {addr}: {status} {v}\nthe nodes' views now:\n{}\nthe nodes' log:\n{}",
                    views.join("\n"),
                    launcher.log_tail()
                );
            }
            assert_eq!(v["node"].as_str(), Some(owner.as_str()), "{id} via {addr}");
        }
    }
    let (status, v) = get_json(addrs[2], "/vehicle?id=99/99999").unwrap();
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("no vehicle with id 99/99999"))
    );
    // Ids nobody reports leave no vehicle behind: after 40 of them the
    // cluster holds its buses again, long before the 60 s idle time.
    for i in 0..40 {
        let (status, _) = get_json(addrs[i % 3], &format!("/vehicle?id=made-up/{i}")).unwrap();
        assert_eq!(status, 404);
    }
    let vehicles_alive = |addr: SocketAddr| -> Option<usize> {
        let (_, metrics) = get(addr, "/metrics")?;
        let line = metrics
            .lines()
            .find(|l| l.starts_with("realtime_map_vehicles_alive "))?;
        line.rsplit(' ').next()?.parse().ok()
    };
    eventually(
        "made-up ids leave no vehicle",
        Duration::from_secs(10),
        || {
            let total: usize = addrs
                .iter()
                .map(|a| vehicles_alive(*a))
                .sum::<Option<usize>>()?;
            (total == VEHICLES).then_some(())
        },
    );

    // With no page open anywhere, no node has been sent the map's moves
    // (the buses have been moving since every one of them was on the map).
    let batches_received = |addr: SocketAddr| -> u64 {
        let (_, metrics) = get(addr, "/metrics").unwrap();
        let line = metrics
            .lines()
            .find(|l| l.starts_with("realtime_map_map_batches_received_total "))
            .unwrap_or_else(|| panic!("no batch counter in:\n{metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    for addr in &addrs {
        assert_eq!(
            batches_received(*addr),
            0,
            "batches sent to {addr} with no page open"
        );
    }

    // The live map of one node draws every node's buses.
    let drawn = nodes_on_the_map(addrs[2], Duration::from_secs(3));
    assert_eq!(
        drawn.len(),
        3,
        "the stream of node3 carried batches of {drawn:?}"
    );
    // Only the node with the page open was sent them.
    assert!(batches_received(addrs[2]) > 0);
    assert_eq!(batches_received(addrs[0]), 0, "node1 has no page open");

    // A healthy cluster gave up no flush of a moved shard's old path
    // (each would have held that shard's messages for a second).
    for (i, addr) in addrs.iter().enumerate() {
        let (_, metrics) = get(*addr, "/metrics").unwrap();
        let line = format!(
            "troubadour_cluster_flushes_given_up_total{{node=\"node{}\"}} 0",
            i + 1
        );
        assert!(
            metrics.contains(&line),
            "no `{line}` in:\n{metrics}\nthe nodes' log:\n{}",
            launcher.log_tail()
        );
    }

    // kill -9 of node2 while the feed runs.
    let (victim_pid, victim_addr) = launcher.nodes[1];
    let victim = "node2".to_string();
    let before = all_vehicles(addrs[0]).unwrap();
    let on_victim: Vec<(&String, u64)> = before
        .iter()
        .filter(|(_, (node, _))| *node == victim)
        .map(|(id, (_, updates))| (id, *updates))
        .collect();
    assert!(!on_victim.is_empty());
    let killed_at = Instant::now();
    let status = Command::new("kill")
        .args(["-9", &victim_pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    eventually("node2 is gone", Duration::from_secs(10), || {
        (!alive(victim_pid)).then_some(())
    });
    assert!(get(victim_addr, "/cluster").is_none());
    // The person running the cluster is told.
    let told = format!("node 2 pid {victim_pid} exited");
    eventually(
        "the launcher reports node2's exit",
        Duration::from_secs(10),
        || {
            launcher
                .printed
                .try_iter()
                .any(|line| line.starts_with(&told))
                .then_some(())
        },
    );

    // Its buses answer again from the other two, from the state they had
    // flushed (every 500 ms; a bus reports once a second, so at most two
    // positions can be lost), not from nothing.
    let survivors = [addrs[0], addrs[2]];
    let mut first_answer = None;
    for (i, (id, updates_before)) in on_victim.iter().enumerate() {
        let via = survivors[i % 2];
        let (owner, updates) = eventually(
            &format!("{id} answers again"),
            Duration::from_secs(60),
            || {
                let (status, v) = get_json(via, &format!("/vehicle?id={id}"))?;
                (status == 200).then(|| {
                    (
                        v["node"].as_str().unwrap().to_string(),
                        v["updates"].as_u64().unwrap(),
                    )
                })
            },
        );
        first_answer.get_or_insert_with(|| killed_at.elapsed());
        assert_ne!(owner, victim, "{id} answered from the dead node");
        assert!(
            updates + 2 >= *updates_before,
            "{id} had {updates_before} updates before the kill and {updates} after: its flushed state was not restored"
        );
    }
    eprintln!(
        "after kill -9 (lease 3 s): the first of node2's {} buses answered again in {:.1} s, all in {:.1} s",
        on_victim.len(),
        first_answer.unwrap_or_default().as_secs_f64(),
        killed_at.elapsed().as_secs_f64()
    );
    let (_, view) = get_json(addrs[0], "/cluster").unwrap();
    let nodes = view["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{view}");
    let failovers: u64 = nodes.iter().map(|n| n["failovers"].as_u64().unwrap()).sum();
    assert!(
        failovers > 0,
        "the survivors took node2's shards over: {view}"
    );
    // The dashboard of a survivor no longer counts node2: its shards are
    // owned by the two others.
    eventually(
        "node3's dashboard shows two nodes owning every shard",
        Duration::from_secs(60),
        || {
            let (_, overview) = get_json(addrs[2], "/dashboard/api/overview")?;
            let nodes = overview["cluster"]["nodes"].as_array()?.clone();
            let names: BTreeSet<&str> = nodes.iter().filter_map(|n| n["name"].as_str()).collect();
            let shards: u64 = nodes.iter().filter_map(|n| n["shards"].as_u64()).sum();
            (names == BTreeSet::from(["node1", "node3"]) && shards == 64).then_some(())
        },
    );
    let everything = eventually(
        "every bus is back on the map",
        Duration::from_secs(60),
        || all_vehicles(addrs[2]).filter(|v| v.len() == VEHICLES),
    );
    assert!(everything.values().all(|(node, _)| *node != victim));

    // SIGTERM stops the launcher and every node it started.
    let mut launcher = launcher;
    Command::new("kill")
        .args(["-TERM", &launcher.child.id().to_string()])
        .status()
        .unwrap();
    let exit = eventually("the launcher exits", Duration::from_secs(60), || {
        launcher.child.try_wait().unwrap()
    });
    assert!(exit.success(), "{exit:?}\n{}", launcher.log_text());
    for (pid, _) in &launcher.nodes {
        assert!(!alive(*pid), "node pid {pid} outlived the launcher");
    }
}
