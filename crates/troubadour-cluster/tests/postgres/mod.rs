//! A PostgreSQL server for tests: Debian's PostgreSQL (which `scripts/test`
//! installs), started in a temporary directory on a free loopback port,
//! stopped and removed on drop.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A PostgreSQL server for one test; stopped and removed on drop.
pub struct Server {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// Whether commits are synced (`fsync=on`); tests run without.
    durable: bool,
    /// Only TLS connections, with this server's certificate (see
    /// [`Server::start_tls`]).
    tls: bool,
    /// Another address to listen on, and the network allowed to connect
    /// to it (see [`Server::start_reachable`]).
    reachable: Option<(String, String)>,
}

fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is not installed: `apt-get install postgresql` (scripts/test does it)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("no PostgreSQL version with initdb under /usr/lib/postgresql")
}

/// Runs a server binary, as the `postgres` user when this is root
/// (PostgreSQL refuses to run as root).
fn pg(bin: &Path, tool: &str, args: &[&str]) -> std::process::Output {
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    let tool = bin.join(tool);
    let out = if is_root {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(&tool)
            .args(args)
            .output()
    } else {
        Command::new(&tool).args(args).output()
    }
    .expect("could not run a PostgreSQL tool");
    out
}

static SERVERS: AtomicU32 = AtomicU32::new(0);

impl Server {
    pub fn start() -> Server {
        Self::start_with(false, None)
    }

    /// A server whose commits are synced, as in production: for benchmarks.
    pub fn start_durable() -> Server {
        Self::start_with(true, None)
    }

    /// A server that accepts only TLS connections, presenting `cert_pem`
    /// (with its key `key_pem`).
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Server {
        Self::start_with(false, Some((cert_pem, key_pem)))
    }

    /// A server that listens on `addr` too (an address of this host's,
    /// such as a bridge to network namespaces) and lets clients from the
    /// network `allow` (`10.0.0.0/24`) connect there.
    pub fn start_reachable(addr: &str, allow: &str) -> Server {
        let mut server = Self::prepare(false, None);
        std::fs::write(
            server.dir.join("pg_hba.conf"),
            format!("local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all {allow} trust\n"),
        )
        .unwrap();
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&server.dir)
            .output();
        server.reachable = Some((addr.to_string(), allow.to_string()));
        server.up();
        server
    }

    /// The URL of this server at its other address (see
    /// [`Server::start_reachable`]).
    pub fn url_at(&self, addr: &str) -> String {
        format!("postgres://postgres@{addr}:{}/postgres", self.port)
    }

    fn start_with(durable: bool, tls: Option<(&str, &str)>) -> Server {
        let server = Self::prepare(durable, tls);
        server.up();
        server
    }

    /// A data directory made and configured, the server not started.
    fn prepare(durable: bool, tls: Option<(&str, &str)>) -> Server {
        let bin = bin_dir();
        let dir = std::env::temp_dir().join(format!(
            "troubadour-pg-{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .output();
        let data = dir.join("data");
        let out = pg(
            &bin,
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if let Some((cert, key)) = tls {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(dir.join("server.crt"), cert).unwrap();
            std::fs::write(dir.join("server.key"), key).unwrap();
            std::fs::set_permissions(
                dir.join("server.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
            // TLS or nothing, from the loopback only.
            std::fs::write(
                dir.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\n\
                 hostnossl all all 127.0.0.1/32 reject\n",
            )
            .unwrap();
            let _ = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .output();
        }
        Server {
            dir,
            bin,
            port,
            durable,
            tls: tls.is_some(),
            reachable: None,
        }
    }

    pub fn up(&self) {
        let listen = match &self.reachable {
            Some((addr, _)) => format!("127.0.0.1,{addr}"),
            None => "127.0.0.1".to_string(),
        };
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses={listen} -c fsync={}",
            self.port,
            self.dir.display(),
            if self.durable { "on" } else { "off" }
        );
        if self.reachable.is_some() {
            opts += &format!(" -c hba_file={}/pg_hba.conf", self.dir.display());
        }
        if self.tls {
            let d = self.dir.display();
            opts += &format!(
                " -c ssl=on -c ssl_cert_file={d}/server.crt -c ssl_key_file={d}/server.key \
                 -c hba_file={d}/pg_hba.conf"
            );
        }
        let data = self.dir.join("data");
        let log = self.dir.join("log");
        let out = pg(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &opts,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "start",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start failed: {} {}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    pub fn down(&self) {
        let data = self.dir.join("data");
        pg(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.down();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
