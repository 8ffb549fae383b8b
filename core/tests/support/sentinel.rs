//! A primary, a replica and three sentinels of the test's own, on free
//! loopback ports: `redis-server --sentinel` with a generated config,
//! `down-after-milliseconds` 1000 and a short failover timeout, so a
//! `kill -9` of the primary is failed over within a few seconds.
//!
//! Skipped (or failed with `HEADWAY_REQUIRE_REDIS=1`) as the servers are.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{RedisServer, free_port};

pub const MASTER: &str = "mymaster";

pub struct Sentinels {
    /// The first primary and its replica.
    pub nodes: Vec<RedisServer>,
    pub ports: Vec<u16>,
    children: Vec<Child>,
    dir: std::path::PathBuf,
}

/// Waits for `ok` up to `limit`, panicking with `what` after.
pub fn until(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Sentinels {
    /// The five servers, the replica in sync and every sentinel knowing the
    /// replica and the two other sentinels (so a failover can be agreed).
    pub fn start() -> Option<Sentinels> {
        let primary = RedisServer::start()?;
        let replica = RedisServer::start()?;
        let pp = primary.port.to_string();
        assert_eq!(replica.cli(&["REPLICAOF", "127.0.0.1", &pp]), "OK");
        until(Duration::from_secs(20), "the replica in sync", || {
            replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        let dir = replica.dir.join("sentinels");
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Sentinels {
            nodes: vec![primary, replica],
            ports: Vec::new(),
            children: Vec::new(),
            dir,
        };
        for i in 0..3 {
            let port = free_port();
            let conf = s.dir.join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {}\n\
                     sentinel monitor {MASTER} 127.0.0.1 {pp} 2\n\
                     sentinel down-after-milliseconds {MASTER} 1000\n\
                     sentinel failover-timeout {MASTER} 3000\n\
                     sentinel parallel-syncs {MASTER} 1\n",
                    s.dir.display()
                ),
            )
            .unwrap();
            let child = Command::new("redis-server")
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server --sentinel");
            s.children.push(child);
            s.ports.push(port);
        }
        for &port in &s.ports.clone() {
            until(Duration::from_secs(30), "a sentinel knowing all", || {
                let m = s.ask(port, &["SENTINEL", "MASTER", MASTER]);
                field(&m, "num-slaves") == Some("1")
                    && field(&m, "num-other-sentinels") == Some("2")
            });
        }
        Some(s)
    }

    /// `redis-cli` against the sentinel on `port`.
    pub fn ask(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The primary's port as the first sentinel names it.
    pub fn primary_port(&self) -> Option<u16> {
        let out = self.ask(
            self.ports[0],
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER],
        );
        out.lines().nth(1)?.trim().parse().ok()
    }

    /// `redis+sentinel://` naming the three sentinels, with `query`.
    pub fn url(&self, query: &str) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER}/0{query}", hosts.join(","))
    }

    /// The server (first primary or replica) on `port`.
    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("one of the nodes")
    }
}

/// A field of `redis-cli`'s flat answer to `SENTINEL MASTER` (name, value
/// on alternate lines).
fn field<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    let lines: Vec<&str> = answer.lines().map(str::trim).collect();
    lines
        .chunks(2)
        .find(|kv| kv[0] == name)
        .and_then(|kv| kv.get(1).copied())
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
