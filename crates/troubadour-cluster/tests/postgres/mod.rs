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

    fn start_with(durable: bool, tls: Option<(&str, &str)>) -> Server {
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
        let server = Server {
            dir,
            bin,
            port,
            durable,
            tls: tls.is_some(),
        };
        server.up();
        server
    }

    pub fn up(&self) {
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync={}",
            self.port,
            self.dir.display(),
            if self.durable { "on" } else { "off" }
        );
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
