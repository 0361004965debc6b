//! `--cluster N`: a local cluster of N node processes on loopback
//! (127.0.0.1 … 127.0.0.N), for a person or a script to open, load or
//! kill one node at a time.
//!
//! The launcher makes a CA and one certificate per node for the run,
//! runs the broker and the simulated feed itself (so that killing a node
//! does not stop the feed), and starts each node as this same program with
//! `--node`, sharing a SQLite lease store and a SQLite state store in the
//! run's directory. It prints one line per node once the node serves:
//! `node <n> pid <pid> http://<addr>:<port>`. Ctrl-C (or SIGTERM) makes
//! every node leave and stops them all.

use crate::ingest::Broker;
use crate::node::TlsFiles;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use troubadour_remote::dev_certs::DevCa;

/// What the local cluster is made of.
#[derive(Clone, Debug)]
pub struct LocalClusterConfig {
    /// How many node processes.
    pub nodes: usize,
    /// Each node serves HTTP on this port of its own address.
    pub http_port: u16,
    /// Each node listens for the others on this port of its own address.
    pub cluster_port: u16,
    /// Where certificates and stores go; a fresh temporary directory
    /// (removed at the end) if `None`.
    pub data_dir: Option<PathBuf>,
    /// The broker every node subscribes to.
    pub mqtt: Broker,
    /// Arguments passed through to every node (idle time, lease, …).
    pub node_args: Vec<String>,
}

/// A node process of the local cluster.
pub struct NodeProcess {
    /// 1-based.
    pub number: usize,
    /// Its name in the cluster.
    pub name: String,
    /// The process.
    pub child: Child,
    /// Where it serves HTTP.
    pub http: SocketAddr,
    /// How it ended, once it has.
    pub exited: Option<std::process::ExitStatus>,
}

/// Why the local cluster did not start.
#[derive(Debug)]
pub enum LaunchError {
    /// The run's directory or certificates could not be made.
    Setup(String),
    /// A node process did not start or did not report ready.
    Node(String),
}

impl std::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchError::Setup(e) => write!(f, "cannot prepare the local cluster: {e}"),
            LaunchError::Node(e) => write!(f, "a node did not start: {e}"),
        }
    }
}

impl std::error::Error for LaunchError {}

/// The running local cluster. Dropping it kills what is left of it.
pub struct LocalCluster {
    /// The node processes, in order.
    pub nodes: Vec<NodeProcess>,
    dir: PathBuf,
    remove_dir: bool,
}

/// Node `n`'s loopback address: 127.0.0.n.
pub fn node_ip(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, n as u8)
}

impl LocalCluster {
    /// Makes the certificates and starts every node, returning once each
    /// has said it serves (its log goes to this process's stderr, each
    /// line marked `[node<n>]`).
    pub fn start(config: &LocalClusterConfig) -> Result<LocalCluster, LaunchError> {
        if config.nodes == 0 || config.nodes > 254 {
            return Err(LaunchError::Setup(format!(
                "--cluster takes 1 to 254 nodes, not {}",
                config.nodes
            )));
        }
        let (dir, remove_dir) = match &config.data_dir {
            Some(d) => (d.clone(), false),
            None => (
                std::env::temp_dir().join(format!("realtime-map-cluster-{}", std::process::id())),
                true,
            ),
        };
        let setup =
            |e: &dyn std::fmt::Display| LaunchError::Setup(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(&dir).map_err(|e| setup(&e))?;
        let ca = DevCa::new("realtime-map local cluster").map_err(|e| setup(&e))?;
        for n in 1..=config.nodes {
            ca.write_node_at(&dir, &node_name(n), &[IpAddr::V4(node_ip(n))])
                .map_err(|e| setup(&e))?;
        }
        let mut cluster = LocalCluster {
            nodes: Vec::new(),
            dir,
            remove_dir,
        };
        for n in 1..=config.nodes {
            let node = cluster.spawn(config, n)?;
            cluster.nodes.push(node);
        }
        Ok(cluster)
    }

    fn spawn(&self, config: &LocalClusterConfig, n: usize) -> Result<NodeProcess, LaunchError> {
        let name = node_name(n);
        let ip = node_ip(n);
        let exe = std::env::current_exe().map_err(|e| LaunchError::Node(e.to_string()))?;
        let tls = TlsFiles::in_dir(&self.dir, &name);
        // Every other node is a seed: any one that is up lets this one in.
        let seeds: Vec<String> = (1..=config.nodes)
            .filter(|&m| m != n)
            .map(|m| SocketAddr::new(node_ip(m).into(), config.cluster_port).to_string())
            .collect();
        let mut cmd = Command::new(exe);
        cmd.arg("--node")
            .arg(&name)
            .arg("--listen")
            .arg(SocketAddr::new(ip.into(), config.http_port).to_string())
            .arg("--cluster-listen")
            .arg(SocketAddr::new(ip.into(), config.cluster_port).to_string())
            .arg("--expected-nodes")
            .arg(config.nodes.to_string())
            .arg("--tls-cert")
            .arg(&tls.cert)
            .arg("--tls-key")
            .arg(&tls.key)
            .arg("--tls-ca")
            .arg(&tls.ca)
            .arg("--lease-store")
            .arg(format!("sqlite:{}", self.dir.join("leases.db").display()))
            .arg("--state-store")
            .arg(format!("sqlite:{}", self.dir.join("state.db").display()))
            .arg("--mqtt")
            .arg(config.mqtt.to_string());
        if !seeds.is_empty() {
            cmd.arg("--seeds").arg(seeds.join(","));
        }
        cmd.args(&config.node_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| LaunchError::Node(format!("{name}: {e}")))?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let tag = name.clone();
        // Each node's log, on ours, each line marked with its node.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[{tag}] {line}");
            }
        });
        let http = match wait_ready(stdout, Duration::from_secs(60)) {
            Ok(http) => http,
            Err(why) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LaunchError::Node(format!("{name}: {why}")));
            }
        };
        Ok(NodeProcess {
            number: n,
            name,
            child,
            http,
            exited: None,
        })
    }

    /// The nodes that ended since the last call (killed, or failed), so
    /// that the person running the cluster sees it.
    pub fn newly_exited(&mut self) -> Vec<&NodeProcess> {
        let mut ended = Vec::new();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if node.exited.is_none() {
                if let Ok(Some(status)) = node.child.try_wait() {
                    node.exited = Some(status);
                    ended.push(i);
                }
            }
        }
        ended.into_iter().map(|i| &self.nodes[i]).collect()
    }

    /// The run's directory (certificates, lease and state stores).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Asks every node still running to leave (SIGTERM), waits up to
    /// `grace` for them, then kills the rest.
    pub fn stop(&mut self, grace: Duration) {
        for node in &mut self.nodes {
            if matches!(node.child.try_wait(), Ok(None)) {
                signal(&node.child, "TERM");
            }
        }
        let deadline = std::time::Instant::now() + grace;
        for node in &mut self.nodes {
            loop {
                match node.child.try_wait() {
                    Ok(None) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    Ok(None) => {
                        let _ = node.child.kill();
                        let _ = node.child.wait();
                        break;
                    }
                    _ => break,
                }
            }
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.child.kill();
            let _ = node.child.wait();
        }
        if self.remove_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Node `n`'s name.
pub fn node_name(n: usize) -> String {
    format!("node{n}")
}

/// The line a node prints on stdout once it serves.
pub fn ready_line(name: &str, http: SocketAddr, cluster: SocketAddr) -> String {
    format!("ready {name} http://{http} cluster {cluster}")
}

/// Reads a node's stdout until its ready line; the rest of its stdout is
/// drained on a thread so the node never blocks on a full pipe.
fn wait_ready(stdout: std::process::ChildStdout, limit: Duration) -> Result<SocketAddr, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let mut tx = Some(tx);
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix("ready ") {
                let http = rest
                    .split_whitespace()
                    .nth(1)
                    .and_then(|u| u.strip_prefix("http://"))
                    .and_then(|a| a.parse::<SocketAddr>().ok());
                if let (Some(tx), Some(http)) = (tx.take(), http) {
                    let _ = tx.send(http);
                }
            } else {
                println!("{line}");
            }
        }
    });
    rx.recv_timeout(limit).map_err(|_| {
        format!(
            "no ready line within {} s (it exited, or is still starting; see its log above)",
            limit.as_secs()
        )
    })
}

/// Sends `signal` (`TERM`, `KILL`, `STOP`, …) to a child process, with
/// the system's `kill`.
pub fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if let Err(e) = sent {
        tracing::warn!("cannot run kill -{signal} {}: {e}", child.id());
    }
}
