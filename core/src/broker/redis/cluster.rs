//! Refusing a Redis Cluster node named as one Redis (`redis://`) at
//! connect, for both Redis layouts.
//!
//! Why: a `redis://` URL gets a plain (non-cluster) client, and the
//! layouts' standalone scripts touch keys outside the slot they declare —
//! headway's claim reads revoked marks and its store writes a round's
//! result keys from many slots; Celery's layout keeps `unacked` beside
//! every queue. On a Cluster node the first claim popped a message and then
//! failed (MOVED or CROSSSLOT) mid-script. So connecting to one is refused
//! at once, naming the URL (redacted) — never a failure later with work
//! half moved. headway's layout runs on a Cluster named as one,
//! `redis+cluster://` (`docs/high-availability.md`).

use ::redis::aio::MultiplexedConnection;

use super::RedisUrl;
use crate::task::state::Refused;

/// Answers an error when the server behind `c` runs with
/// `cluster-enabled yes` (its `INFO cluster` says `cluster_enabled:1`).
/// A user whose ACL does not allow INFO cannot be asked: let through (the
/// documented ACL allows it).
pub async fn refuse_cluster(c: &mut MultiplexedConnection, url: &RedisUrl) -> Result<(), Refused> {
    let info: String = match ::redis::cmd("INFO").arg("cluster").query_async(c).await {
        Ok(s) => s,
        Err(e) if e.code() == Some("NOPERM") => return Ok(()),
        Err(e) => {
            return Err(crate::broker::error::refused(
                &e,
                format!("{url}: {}", url.scrub(&e.to_string())),
            ));
        }
    };
    if cluster_enabled(&info) {
        return Err(Refused::Invalid(format!(
            "invalid `url`: {url} is a Redis Cluster node (cluster_enabled:1) named as \
             one Redis: name the Cluster with redis+cluster://h1:p1,h2:p2/ \
             (headway's layout; Celery's layout does not run on a Cluster)"
        )));
    }
    Ok(())
}

fn cluster_enabled(info: &str) -> bool {
    info.lines().any(|l| l.trim_end() == "cluster_enabled:1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_info_field() {
        assert!(cluster_enabled("# Cluster\r\ncluster_enabled:1\r\n"));
        assert!(!cluster_enabled("# Cluster\r\ncluster_enabled:0\r\n"));
        assert!(!cluster_enabled(""));
    }
}
