//! A Redis Cluster of the test's own: three primaries and three replicas
//! (`redis-server --cluster-enabled yes` ×6 on free loopback ports whose
//! bus ports, +10000, are free too), joined by `redis-cli --cluster create
//! … --cluster-replicas 1 --cluster-yes`, `cluster-node-timeout` 1000 so a
//! killed primary's replica takes over within seconds.
//!
//! Skipped (or failed with `HEADWAY_REQUIRE_REDIS=1`) as the servers are.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::sentinel::until;

pub struct Cluster {
    pub ports: Vec<u16>,
    children: Vec<Option<Child>>,
    dir: std::path::PathBuf,
}

/// A port whose cluster bus port (+10000) is free as well.
fn free_pair() -> u16 {
    loop {
        let p = super::free_port();
        if p < 55_000 && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Cluster {
    /// Six nodes, the cluster created and every node saying `cluster_state:ok`.
    pub fn start() -> Option<Cluster> {
        // Whether redis-server is here (and skip or fail as the others do).
        let probe = super::RedisServer::start()?;
        let dir = probe.dir.with_extension("cluster");
        drop(probe);
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = Cluster {
            ports: Vec::new(),
            children: Vec::new(),
            dir,
        };
        for _ in 0..6 {
            let port = free_pair();
            c.ports.push(port);
            c.children.push(None);
            c.spawn(c.ports.len() - 1);
        }
        let addrs: Vec<String> = c.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for &p in &c.ports.clone() {
            until(Duration::from_secs(30), "cluster_state:ok", || {
                cli(p, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
            });
        }
        // Every replica in sync: one that never synced cannot take over.
        until(Duration::from_secs(30), "three replicas in sync", || {
            c.ports
                .iter()
                .filter(|p| {
                    let r = cli(**p, &["INFO", "replication"]);
                    r.contains("role:slave") && r.contains("master_link_status:up")
                })
                .count()
                == 3
        });
        Some(c)
    }

    fn spawn(&mut self, i: usize) {
        let port = self.ports[i];
        let conf = self.dir.join(format!("nodes-{port}.conf"));
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
            // A replica may take over however long its primary was away.
            .args(["--cluster-replica-validity-factor", "0"])
            .arg("--cluster-config-file")
            .arg(&conf)
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --cluster-enabled yes");
        self.children[i] = Some(child);
        until(Duration::from_secs(10), "a cluster node answering", || {
            cli(port, &["PING"]) == "PONG"
        });
    }

    /// `redis+cluster://` naming every node as a seed, with `query`.
    pub fn url(&self, query: &str) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}/{query}", hosts.join(","))
    }

    /// The port of the primary serving `key`'s slot now, as a live node
    /// sees it (`None` while none does: mid-failover).
    pub fn primary_of(&self, key: &str) -> Option<u16> {
        for &p in &self.ports {
            if !self.alive(p) {
                continue;
            }
            let slot = cli(p, &["CLUSTER", "KEYSLOT", key]);
            let nodes = cli(p, &["CLUSTER", "NODES"]);
            let slot: u32 = slot.parse().unwrap();
            for line in nodes.lines() {
                let f: Vec<&str> = line.split(' ').collect();
                if !f[2].contains("master") || f[2].contains("fail") {
                    continue;
                }
                for r in &f[8..] {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>())
                        && (a..=b).contains(&slot)
                    {
                        let addr = f[1].split('@').next().unwrap();
                        return addr.rsplit(':').next().unwrap().parse().ok();
                    }
                }
            }
        }
        None
    }

    fn alive(&self, port: u16) -> bool {
        let i = self.ports.iter().position(|p| *p == port).unwrap();
        self.children[i].is_some()
    }

    /// Waits until the replica of the primary on `port` has everything the
    /// primary wrote (its acknowledged offset is the primary's).
    pub fn replicated(&self, port: u16) {
        until(Duration::from_secs(10), "the replica caught up", || {
            let r = cli(port, &["INFO", "replication"]);
            let field = |name: &str| {
                r.lines()
                    .find_map(|l| l.trim().strip_prefix(name).map(str::to_string))
            };
            let Some(at) = field("master_repl_offset:") else {
                return false;
            };
            field("slave0:").is_some_and(|s| s.contains(&format!("offset={at},")))
        });
    }

    /// Kills the node on `port` (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        let i = self.ports.iter().position(|p| *p == port).unwrap();
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
