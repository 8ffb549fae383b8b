//! A RabbitMQ vhost of the test's own on the local RabbitMQ
//! (127.0.0.1:5672, guest/guest): made with `rabbitmqctl add_vhost` and
//! `set_permissions`, deleted on drop, so tests never see each other's
//! queues.
//!
//! Without a RabbitMQ here a test prints why it is skipped and returns —
//! unless `HEADWAY_REQUIRE_RABBITMQ=1`, when it fails instead, so CI
//! cannot pass by skipping.

use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub struct Vhost {
    pub name: String,
}

fn ctl(args: &[&str]) -> Result<String, String> {
    let out = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .map_err(|e| format!("rabbitmqctl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "rabbitmqctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn available() -> bool {
    let up = TcpStream::connect_timeout(&"127.0.0.1:5672".parse().unwrap(), Duration::from_secs(1))
        .is_ok()
        && ctl(&["-q", "status"]).is_ok();
    if !up {
        if std::env::var("HEADWAY_REQUIRE_RABBITMQ").as_deref() == Ok("1") {
            panic!("HEADWAY_REQUIRE_RABBITMQ=1 but no RabbitMQ answers on 127.0.0.1:5672");
        }
        eprintln!(
            "skipped: no RabbitMQ on 127.0.0.1:5672 (set HEADWAY_REQUIRE_RABBITMQ=1 to fail instead)"
        );
    }
    up
}

impl Vhost {
    /// A fresh vhost guest may use, or `None` (skip) without a RabbitMQ.
    pub fn new() -> Option<Vhost> {
        if !available() {
            return None;
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "headway-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        ctl(&["-q", "add_vhost", &name]).expect("add a vhost");
        ctl(&[
            "-q",
            "set_permissions",
            "-p",
            &name,
            "guest",
            ".*",
            ".*",
            ".*",
        ])
        .expect("let guest use it");
        Some(Vhost { name })
    }

    /// Its URL, `?max_priority=` appended when given.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:5672/{}", self.name)
    }

    /// `rabbitmqctl list_<what> -p <vhost> <columns>` as rows of columns.
    /// `list_channels` and `list_connections` ignore `-p` and list every
    /// vhost's: their rows are filtered to this vhost here (other tests and
    /// benchmarks may share the server).
    pub fn list(&self, what: &str, columns: &[&str]) -> Vec<Vec<String>> {
        let global = matches!(what, "channels" | "connections");
        let mut args = vec!["-q", "--no-table-headers"];
        let cmd = format!("list_{what}");
        args.push(&cmd);
        args.extend(["-p", &self.name]);
        if global {
            args.push("vhost");
        }
        args.extend(columns);
        ctl(&args)
            .expect("list")
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.split('\t').map(str::to_string).collect::<Vec<_>>())
            .filter_map(|mut row| {
                if !global {
                    return Some(row);
                }
                (row.first() == Some(&self.name)).then(|| row.split_off(1))
            })
            .collect()
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let _ = ctl(&["-q", "delete_vhost", &self.name]);
    }
}
