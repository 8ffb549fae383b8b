//! Where a link's connections go: one Redis, or whichever node the
//! sentinels name the primary of a master name.
//!
//! Why here, once: both Redis layouts and the shared limits dial through a
//! [`super::Link`]; a failover is a property of how Redis is deployed, not
//! of a key layout, so following the primary is done in one place.
//!
//! With Sentinel, a dial asks the sentinels in turn (`SENTINEL
//! get-master-addr-by-name`), the first that answers moved to the front
//! (the order Redis's "Sentinel client guidelines" ask for), connects to
//! the address named, and checks with `ROLE` that the node is a primary:
//! right after a failover a sentinel may still name the old one, and a
//! demoted primary accepts connections but refuses writes. A node that is
//! not the primary is a failed dial (the link's backoff applies), and the
//! next dial asks the sentinels again. The primary named is kept until the
//! link loses its connection or meets a sign of a failover ([`moved`]).

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value,
};

use crate::broker::redis::{RedisUrl, Topology};
use crate::task::state::Refused;

/// Sentinel's default port (redis.io, "High availability with Redis
/// Sentinel").
pub const SENTINEL_PORT: u16 = 26379;

/// Whether `e` says the node is no longer (or not yet) the primary: a
/// demoted primary refuses writes (`READONLY`), a replica cut from its
/// primary refuses reads (`MASTERDOWN`), a node still loading its data
/// (`LOADING`) and a Cluster redirection (`MOVED`). The link drops its
/// connection and, with Sentinel, asks the sentinels again.
pub fn moved(e: &RedisError) -> bool {
    const CODES: &[&str] = &["READONLY", "MASTERDOWN", "LOADING", "MOVED"];
    if e.code().is_some_and(|c| CODES.contains(&c)) {
        return true;
    }
    // A pipeline's error is its failed commands'.
    e.clone()
        .into_server_errors()
        .is_some_and(|errs| errs.iter().any(|(_, s)| CODES.contains(&s.code())))
}

/// A command connection: to one node, or to a Redis Cluster, where
/// redis-rs's cluster client sends each command to its slot's primary and
/// follows MOVED and ASK itself.
///
/// On a Cluster a pipeline is sent one command at a time, in order, each
/// to its own slot's node: redis-rs sends a pipeline whole to one node, and
/// the layouts' pipelines mix queues (slots). A pipeline is not atomic on
/// one node either, so only its round trips change; a command refused is
/// answered in its place, as on one node.
#[derive(Clone)]
pub enum Conn {
    One(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::One(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::One(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => Box::pin(async move {
                if pipeline.is_transaction() {
                    // MULTI/EXEC must stay whole (one slot, the caller's
                    // business).
                    return c.req_packed_commands(pipeline, offset, count).await;
                }
                let mut out = Vec::with_capacity(pipeline.len());
                for cmd in pipeline.cmd_iter() {
                    match c.req_packed_command(cmd).await {
                        Ok(v) => out.push(v),
                        Err(e) if e.is_io_error() || e.is_timeout() => return Err(e),
                        Err(e) => match e.clone().into_server_errors() {
                            Some(errs) if errs.len() == 1 => {
                                out.push(Value::ServerError(errs[0].1.clone()))
                            }
                            _ => return Err(e),
                        },
                    }
                }
                Ok(out.into_iter().skip(offset).take(count).collect())
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::One(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

struct Sentinels {
    master: String,
    /// The sentinels, the last that answered first.
    nodes: Mutex<Vec<(String, u16)>>,
    tls_ca: Option<Vec<u8>>,
    /// The primary last named, and its client.
    current: Mutex<Option<((String, u16), Client)>>,
}

/// How a link reaches its Redis.
pub struct Dialer {
    url: RedisUrl,
    direct: Option<Client>,
    sentinel: Option<Sentinels>,
    /// A Cluster's client (its seed nodes).
    cluster: Option<ClusterClient>,
    /// How long asking one sentinel may take.
    ask_timeout: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn gone(what: &'static str, detail: String) -> RedisError {
    // An I/O kind: the link treats it as a connection that could not be
    // made (backoff, then another dial), which is what it is.
    RedisError::from((ErrorKind::Io, what, detail))
}

impl Dialer {
    /// Always `client`'s Redis.
    pub fn direct(client: Client, url: RedisUrl) -> Dialer {
        Dialer {
            url,
            direct: Some(client),
            sentinel: None,
            cluster: None,
            ask_timeout: Duration::from_secs(2),
        }
    }

    /// For `parsed`: its one node, or the primary its sentinels name. A
    /// `rediss://` node (and sentinel) is verified against `tls_ca` when
    /// given. Refused: a Cluster URL (a Cluster is not one node).
    pub fn new(parsed: &RedisUrl, tls_ca: Option<&[u8]>) -> Result<Dialer, Refused> {
        match &parsed.topology {
            Topology::Single => Ok(Dialer::direct(
                super::client(parsed, tls_ca)?,
                parsed.clone(),
            )),
            Topology::Sentinel { master, nodes } => {
                // Checked now, so a bad CA is refused before any dial.
                if tls_ca.is_some() {
                    super::node_client(parsed, &nodes[0].0, nodes[0].1, false, tls_ca)?;
                }
                Ok(Dialer {
                    url: parsed.clone(),
                    direct: None,
                    sentinel: Some(Sentinels {
                        master: master.clone(),
                        nodes: Mutex::new(nodes.clone()),
                        tls_ca: tls_ca.map(<[u8]>::to_vec),
                        current: Mutex::new(None),
                    }),
                    cluster: None,
                    ask_timeout: Duration::from_secs(2),
                })
            }
            Topology::Cluster { nodes } => Ok(Dialer {
                url: parsed.clone(),
                direct: None,
                sentinel: None,
                cluster: Some(cluster_client(parsed, nodes, tls_ca)?),
                ask_timeout: Duration::from_secs(2),
            }),
        }
    }

    /// Whether it reaches a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The primary last named by the sentinels (`None` without Sentinel,
    /// or before the first dial).
    pub fn primary(&self) -> Option<(String, u16)> {
        let s = self.sentinel.as_ref()?;
        lock(&s.current).as_ref().map(|(a, _)| a.clone())
    }

    /// Forgets the primary named, so the next dial asks the sentinels.
    pub fn forget(&self) {
        if let Some(s) = &self.sentinel {
            *lock(&s.current) = None;
        }
    }

    /// The client of the node to dial now (a Cluster has none: it is
    /// refused as a client error).
    pub async fn client(&self) -> Result<Client, RedisError> {
        if self.cluster.is_some() {
            return Err(RedisError::from((
                ErrorKind::Client,
                "a Redis Cluster is not one node",
            )));
        }
        let Some(s) = &self.sentinel else {
            return Ok(self.direct.clone().expect("a direct dialer has its client"));
        };
        if let Some((_, c)) = lock(&s.current).as_ref() {
            return Ok(c.clone());
        }
        let (host, port) = self.ask(s).await?;
        let c = super::node_client(&self.url, &host, port, true, s.tls_ca.as_deref())
            .map_err(|e| gone("cannot use the primary named", e.to_string()))?;
        *lock(&s.current) = Some(((host, port), c.clone()));
        Ok(c)
    }

    /// Asks the sentinels in turn for the primary's address.
    async fn ask(&self, s: &Sentinels) -> Result<(String, u16), RedisError> {
        let nodes = lock(&s.nodes).clone();
        let mut last = None;
        for (i, (h, p)) in nodes.iter().enumerate() {
            match self.ask_one(s, h, *p).await {
                Ok(Some(addr)) => {
                    if i > 0 {
                        let mut n = lock(&s.nodes);
                        if let Some(at) = n.iter().position(|x| x.0 == *h && x.1 == *p) {
                            let first = n.remove(at);
                            n.insert(0, first);
                        }
                    }
                    return Ok(addr);
                }
                Ok(None) => {
                    last = Some(RedisError::from((
                        ErrorKind::MasterNameNotFoundBySentinel,
                        "no such master",
                        format!(
                            "sentinel {h}:{p} knows no master named {:?} \
                             (the master name in the URL)",
                            s.master
                        ),
                    )))
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| gone("no sentinel", "no sentinel in the URL".into())))
    }

    async fn ask_one(
        &self,
        s: &Sentinels,
        host: &str,
        port: u16,
    ) -> Result<Option<(String, u16)>, RedisError> {
        let client = super::node_client(&self.url, host, port, false, s.tls_ca.as_deref())
            .map_err(|e| gone("cannot dial a sentinel", e.to_string()))?;
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.ask_timeout))
            .set_response_timeout(Some(self.ask_timeout));
        let mut c = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .map_err(|e| {
                gone(
                    "sentinel unreachable",
                    format!("sentinel {host}:{port}: {e}"),
                )
            })?;
        let got: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&s.master)
            .query_async(&mut c)
            .await
            .map_err(|e| {
                if e.is_io_error() || e.is_timeout() {
                    gone(
                        "sentinel unreachable",
                        format!("sentinel {host}:{port}: {e}"),
                    )
                } else {
                    e
                }
            })?;
        Ok(got)
    }

    /// A connection to the node to dial now; with Sentinel, checked to be
    /// the primary.
    pub async fn connect(&self, cfg: &AsyncConnectionConfig) -> Result<Conn, RedisError> {
        if let Some(cluster) = &self.cluster {
            return cluster.get_async_connection().await.map(Conn::Cluster);
        }
        let client = self.client().await?;
        let made = client
            .get_multiplexed_async_connection_with_config(cfg)
            .await;
        let mut c = match made {
            Ok(c) => c,
            Err(e) => {
                self.forget();
                return Err(e);
            }
        };
        if self.sentinel.is_some()
            && let Err(e) = self.check_primary(&mut c).await
        {
            self.forget();
            return Err(e);
        }
        Ok(Conn::One(c))
    }

    /// A pub/sub connection to the node to dial now; on a Cluster, to the
    /// first seed node that answers (a PUBLISH reaches every node).
    pub async fn pubsub(&self) -> Result<PubSub, RedisError> {
        if let Some(Topology::Cluster { nodes }) = self.cluster.as_ref().map(|_| &self.url.topology)
        {
            let mut last = None;
            for (h, p) in nodes {
                let c = super::node_client(&self.url, h, *p, true, None)
                    .map_err(|e| gone("cannot dial a node", e.to_string()))?;
                match c.get_async_pubsub().await {
                    Ok(ps) => return Ok(ps),
                    Err(e) => last = Some(e),
                }
            }
            return Err(last.unwrap_or_else(|| gone("no node", "no Cluster node".into())));
        }
        let client = self.client().await?;
        client
            .get_async_pubsub()
            .await
            .inspect_err(|_| self.forget())
    }

    /// Refuses a node whose `ROLE` is not `master`. A user whose ACL does
    /// not allow ROLE cannot be asked: let through.
    async fn check_primary(&self, c: &mut MultiplexedConnection) -> Result<(), RedisError> {
        let role: Value = match redis::cmd("ROLE").query_async(c).await {
            Ok(v) => v,
            Err(e) if e.code() == Some("NOPERM") => return Ok(()),
            Err(e) => return Err(e),
        };
        let name = match &role {
            Value::Array(v) => v
                .first()
                .and_then(|r| redis::from_redis_value_ref::<String>(r).ok()),
            _ => None,
        }
        .unwrap_or_default();
        if name == "master" {
            return Ok(());
        }
        let at = self
            .primary()
            .map(|(h, p)| format!("{h}:{p}"))
            .unwrap_or_default();
        Err(gone(
            "not the primary",
            format!("{at} answers ROLE {name:?}, not the primary; asking the sentinels again"),
        ))
    }
}

/// The cluster client for `parsed`'s seed `nodes`: its credentials, TLS
/// as `parsed` asks (verified, against `tls_ca` when given), and
/// timeouts of its own (the cluster client's slot refreshes and MOVED/ASK
/// retries are its own; a lost node shows as an I/O error to the link).
fn cluster_client(
    parsed: &RedisUrl,
    nodes: &[(String, u16)],
    tls_ca: Option<&[u8]>,
) -> Result<ClusterClient, Refused> {
    let infos: Vec<redis::ConnectionInfo> = nodes
        .iter()
        .map(|(h, p)| {
            super::node_client(parsed, h, *p, true, None).map(|c| c.get_connection_info().clone())
        })
        .collect::<Result<_, _>>()?;
    let mut b = ClusterClientBuilder::new(infos)
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(10))
        .retries(4)
        .min_retry_wait(50)
        .max_retry_wait(1000);
    if let Some(u) = &parsed.username {
        b = b.username(u);
    }
    if let Some(p) = &parsed.password {
        b = b.password(p);
    }
    if parsed.tls {
        b = b.tls(redis::TlsMode::Secure);
        if let Some(pem) = tls_ca {
            crate::broker::redis::check_ca(pem)?;
            b = b.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            });
        }
    }
    b.build()
        .map_err(|e| Refused::Invalid(format!("invalid `url`: {}", parsed.scrub(&e.to_string()))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error Redis answers with `reply`.
    fn reply(reply: &str) -> RedisError {
        redis::parse_redis_value(format!("-{reply}\r\n").as_bytes())
            .unwrap()
            .extract_error()
            .unwrap_err()
    }

    #[test]
    fn signs_of_a_failover() {
        for r in [
            "READONLY You can't write against a read only replica.",
            "MASTERDOWN Link with MASTER is down",
            "LOADING Redis is loading the dataset in memory",
            "MOVED 3999 127.0.0.1:6381",
        ] {
            assert!(moved(&reply(r)), "{r}");
        }
        for r in [
            "OOM command not allowed",
            "NOSCRIPT No matching script",
            "ERR x",
        ] {
            assert!(!moved(&reply(r)), "{r}");
        }
        let io: RedisError = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "x").into();
        assert!(!moved(&io));
    }
}
