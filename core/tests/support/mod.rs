//! A redis-server of the test's own: a free loopback port (never 6379), a
//! temp dir, no persistence unless asked (`--save "" --appendonly no`),
//! killed on drop.
//!
//! Without `redis-server` on PATH a test prints why it is skipped and
//! returns — unless `HEADWAY_REQUIRE_REDIS=1`, when it fails instead, so CI
//! cannot pass by skipping.

#![allow(dead_code)]

pub mod cluster;
pub mod kit;
pub mod rabbit;
pub mod sentinel;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub struct RedisServer {
    pub port: u16,
    pub dir: PathBuf,
    appendonly: bool,
    child: Option<Child>,
}

/// Whether redis-server is here; if not, says so (or fails when required).
fn available() -> bool {
    let ok = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var("HEADWAY_REQUIRE_REDIS").as_deref() == Ok("1") {
            panic!("HEADWAY_REQUIRE_REDIS=1 but redis-server is not on PATH");
        }
        eprintln!(
            "skipped: redis-server is not on PATH (set HEADWAY_REQUIRE_REDIS=1 to fail instead)"
        );
    }
    ok
}

pub fn free_port() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let p = l.local_addr().unwrap().port();
        if p != 6379 {
            return p;
        }
    }
}

impl RedisServer {
    /// A fresh server, or `None` (skip) when redis-server is missing.
    pub fn start() -> Option<RedisServer> {
        RedisServer::start_with(false)
    }

    /// With `appendonly yes` and `appendfsync always`: every acknowledged
    /// write survives a kill -9.
    pub fn start_with(appendonly: bool) -> Option<RedisServer> {
        if !available() {
            return None;
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "headway-redis-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).expect("make the server's dir");
        let mut s = RedisServer {
            port: free_port(),
            dir,
            appendonly,
            child: None,
        };
        s.spawn();
        Some(s)
    }

    fn spawn(&mut self) {
        let mut c = Command::new("redis-server");
        c.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no")
            .arg("--protected-mode")
            .arg("yes")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.appendonly {
            c.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            c.args(["--appendonly", "no"]);
        }
        self.child = Some(c.spawn().expect("start redis-server"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.ping() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server on port {} did not answer PING", self.port);
    }

    /// Whether it answers PING now.
    pub fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills it (SIGKILL: no goodbye, only what is on disk survives).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and dir (appendonly restores data).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Runs one command through redis-cli and answers its output, trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .arg("-p")
            .arg(self.port.to_string())
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
