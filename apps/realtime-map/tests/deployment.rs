//! Two node processes started the way the Kubernetes manifests start them
//! (`deploy/kubernetes/`): listening on every interface and advertising
//! their own address, finding each other through DNS (a headless
//! Service's name; here `localhost`, which resolves to the first node),
//! certificates that name the node but no address, made by the script
//! the deployment guide uses (`deploy/kubernetes/make-certs`, openssl),
//! peers identified by node name. Both become ready
//! (`/cluster/node/ready`) once they serve their share of the shards.

mod common;
use common::{eventually, get_json};

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Bounds a broken run only.
const LIMIT: Duration = Duration::from_secs(90);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A node process; killed when dropped.
struct NodeProcess {
    child: Child,
    http: SocketAddr,
    advertised: String,
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Node `name` with its cluster port on every interface at `port`,
/// advertising 127.0.0.1, its seeds `localhost:seed_port` in DNS.
fn start_node(
    dir: &std::path::Path,
    name: &str,
    port: u16,
    seed_port: u16,
    broker: SocketAddr,
) -> NodeProcess {
    let advertised = format!("127.0.0.1:{port}");
    let file = |f: String| dir.join(f).to_string_lossy().into_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_realtime-map"))
        .args(["--node", name, "--listen", "127.0.0.1:0"])
        .args(["--mqtt", &format!("mqtt://{broker}")])
        .args(["--cluster-listen", &format!("0.0.0.0:{port}")])
        .args(["--cluster-advertise", &advertised])
        .args(["--seeds-dns", &format!("localhost:{seed_port}")])
        .arg("--tls-identify-by-node-name")
        .args(["--tls-cert", &file(format!("{name}.pem"))])
        .args(["--tls-key", &file(format!("{name}.key"))])
        .args(["--tls-ca", &file("ca.pem".into())])
        .args([
            "--lease-store",
            &format!("sqlite:{}", file("leases.db".into())),
        ])
        .args([
            "--state-store",
            &format!("sqlite:{}", file("state.db".into())),
        ])
        .args(["--shards", "32", "--lease", "3s", "--expected-nodes", "2"])
        .args(["--workers", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join(format!("{name}.log"))).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // ready <name> http://<addr> cluster <addr>
    let http = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words[..] {
                ["ready", _, url, "cluster", _] => url.strip_prefix("http://")?.parse().ok(),
                _ => None,
            }
        })
        .unwrap_or_else(|| {
            panic!(
                "{name} did not start: {}",
                std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
            )
        });
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    NodeProcess {
        child,
        http,
        advertised,
    }
}

#[test]
fn nodes_started_as_in_kubernetes_find_each_other_through_dns_and_become_ready() {
    let dir = std::env::temp_dir().join(format!("realtime-map-deploy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // No address in the certificates: pods' addresses change.
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/kubernetes/make-certs"
    );
    let made = Command::new(script)
        .arg(&dir)
        .args(["node-0", "node-1"])
        .output()
        .unwrap();
    assert!(made.status.success(), "make-certs: {made:?}");
    let broker = realtime_map::broker::start("127.0.0.1:0".parse().unwrap()).unwrap();
    // The first node is its own seed, as a pod finds itself behind the
    // headless Service; the second finds the first.
    let seed_port = free_port();
    let first = start_node(&dir, "node-0", seed_port, seed_port, broker);
    let second = start_node(&dir, "node-1", free_port(), seed_port, broker);

    // Both ready: each hosts its share, and they see each other at the
    // advertised addresses, not at 0.0.0.0.
    let hosted = |s: &Value| s["shards"].as_array().map_or(0, Vec::len);
    eventually("both nodes are ready with the shards spread", LIMIT, || {
        let (a, sa) = get_json(first.http, "/cluster/node/ready")?;
        let (b, sb) = get_json(second.http, "/cluster/node/ready")?;
        (a == 200
            && b == 200
            && hosted(&sa) > 0
            && hosted(&sb) > 0
            && hosted(&sa) + hosted(&sb) == 32)
            .then_some(())
    });
    for (node, other) in [(&first, "node-1"), (&second, "node-0")] {
        let (_, s) = get_json(node.http, "/cluster/node/status").unwrap();
        let members: Vec<&str> = s["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(members.contains(&other), "{s}");
    }
    // The dashboard's network panel shows the other node connected over
    // TLS at its advertised address.
    let (_, overview) = get_json(first.http, "/dashboard/api/overview").unwrap();
    let peers = overview["network"]["peers"].as_array().unwrap();
    let peer = peers.iter().find(|p| p["node"] == "node-1").unwrap();
    assert_eq!(peer["state"], "connected", "{overview}");
    assert_eq!(peer["tls"], true);
    assert_eq!(peer["address"], second.advertised.as_str(), "{overview}");
    drop((first, second));
    let _ = std::fs::remove_dir_all(&dir);
}
