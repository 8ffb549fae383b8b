//! The Celery layout's link to Redis: one command connection shared by
//! every call, dropped when an error says it is dead and opened again by
//! the next call, with an outage logged once when it starts and once when
//! it ends; a call that must land (a publish, a settle) waits through an
//! outage for up to the broker's patience. BRPOP has a connection of its
//! own, so a blocked claim never holds up a settle. Everything the layout
//! asks of Redis goes through [`Link`], so the link can be replaced
//! without touching what is asked.
//!
//! The client is built from the parsed [`RedisUrl`] as headway's own
//! layout builds its own — never from the URL text — so one URL means the
//! same on both layouts: percent-decoded user and password, an ACL
//! username kept, the db number, `rediss://` verified, `tls_ca` as a
//! private root. A client opened from the text would parse it a second
//! time by other rules, and the text (a percent-encoded password in it)
//! could reach an error message.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use super::super::redis::RedisUrl;
use crate::task::state::Refused;

/// Connecting gives up after 5 s; a reply after 30 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// A patient call's first wait between attempts, doubled up to the most.
const FIRST_WAIT: Duration = Duration::from_millis(50);
const MOST_WAIT: Duration = Duration::from_secs(1);

/// The command connection's settings.
fn config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
}

/// Whether `e` says the connection is gone (rather than the command wrong).
pub(super) fn is_conn_error(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}

/// One broker's connections to its Redis.
pub(super) struct Link {
    pub(super) client: redis::Client,
    pub(super) url: RedisUrl,
    /// Failed attempts to reach Redis since the last answer (0: connected):
    /// an outage is logged when it starts and when it ends.
    failures: AtomicU32,
    cmd: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    /// BRPOP's own connection (no response timeout: it blocks).
    blocking: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    /// How long a patient call waits for Redis to come back.
    patience: Duration,
    /// The broker's node name, for its log lines.
    node: String,
}

impl Link {
    /// Connects to `url` (refusing a Redis Cluster: the layout's keys are
    /// Celery's, in no hash slot of their own), verifying a `rediss://`
    /// server against `tls_ca` when given.
    pub(super) async fn open(
        url: RedisUrl,
        tls_ca: Option<&[u8]>,
        patience: Duration,
        node: String,
    ) -> Result<Link, Refused> {
        let client = client(&url, tls_ca)?;
        let cmd = client
            .get_multiplexed_async_connection_with_config(&config())
            .await
            .map_err(|e| {
                crate::broker::error::refused(
                    &e,
                    format!("cannot reach {url}: {}", scrub(&url, &e.to_string())),
                )
            })?;
        super::super::redis::refuse_cluster(&mut cmd.clone(), &url).await?;
        Ok(Link {
            client,
            url,
            failures: AtomicU32::new(0),
            cmd: tokio::sync::Mutex::new(Some(cmd)),
            blocking: tokio::sync::Mutex::new(None),
            patience,
            node,
        })
    }

    fn log(&self, what: &str) {
        eprintln!("headway celery broker {}: {what}", self.node);
    }

    pub(super) async fn conn(&self) -> Result<MultiplexedConnection, Refused> {
        let mut g = self.cmd.lock().await;
        if let Some(c) = g.as_ref() {
            return Ok(c.clone());
        }
        match self
            .client
            .get_multiplexed_async_connection_with_config(&config())
            .await
        {
            Ok(c) => {
                let n = self.failures.swap(0, Ordering::SeqCst);
                if n > 0 {
                    self.log(&format!(
                        "reconnected to {} after {n} attempt(s); resuming",
                        self.url
                    ));
                }
                *g = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                if self.failures.fetch_add(1, Ordering::SeqCst) == 0 {
                    self.log(&format!(
                        "cannot reach {}: {}; retrying",
                        self.url,
                        scrub(&self.url, &e.to_string())
                    ));
                }
                Err(self.refused(&e))
            }
        }
    }

    pub(super) fn refused(&self, e: &redis::RedisError) -> Refused {
        crate::broker::error::refused(
            e,
            format!("{}: {}", self.url, scrub(&self.url, &e.to_string())),
        )
    }

    /// Turns a Redis error into a refusal, dropping the connection when the
    /// error says it is dead so the next call reconnects.
    pub(super) async fn fail(&self, e: redis::RedisError) -> Refused {
        if is_conn_error(&e) && self.cmd.lock().await.take().is_some() {
            self.failures.fetch_max(1, Ordering::SeqCst);
            self.log(&format!(
                "connection to {} lost ({}); reconnecting",
                self.url,
                scrub(&self.url, &e.to_string())
            ));
        }
        self.refused(&e)
    }

    /// Runs `op` on the command connection, waiting through an outage: on a
    /// connection error (or a Redis still loading its data after a restart)
    /// it reconnects and tries again, backing off from 50 ms to 1 s, for up
    /// to `patience`. Any other error is answered at once.
    pub(super) async fn patiently<T, F, Fut>(&self, mut op: F) -> Result<T, Refused>
    where
        F: FnMut(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T, redis::RedisError>>,
    {
        let deadline = tokio::time::Instant::now() + self.patience;
        let mut wait = FIRST_WAIT;
        loop {
            let why = match self.conn().await {
                Ok(c) => match op(c).await {
                    Ok(v) => return Ok(v),
                    Err(e) => {
                        let transient = is_conn_error(&e) || e.code() == Some("LOADING");
                        let why = self.fail(e).await;
                        if !transient {
                            return Err(why);
                        }
                        why
                    }
                },
                Err(why) => why,
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(why);
            }
            tokio::time::sleep(wait.min(deadline - now)).await;
            wait = (wait * 2).min(MOST_WAIT);
        }
    }

    /// Runs one blocking command (BRPOP) on the blocking connection,
    /// opening it first when needed and dropping it on any error, so one
    /// blocked call runs at a time and a stale connection is never reused.
    pub(super) async fn blocking<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, Refused> {
        let mut g = self.blocking.lock().await;
        if g.is_none() {
            let cfg = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(None);
            *g = Some(
                self.client
                    .get_multiplexed_async_connection_with_config(&cfg)
                    .await
                    .map_err(|e| self.refused(&e))?,
            );
        }
        let c = g.as_mut().expect("just connected");
        match cmd.query_async(c).await {
            Ok(v) => Ok(v),
            Err(e) => {
                *g = None;
                Err(self.refused(&e))
            }
        }
    }
}

/// A client for `url`, verifying a `rediss://` server against `tls_ca`
/// (PEM roots) when given. Refused, naming what is wrong and never the
/// password: `tls_ca` on a `redis://` URL, or a setting redis-rs refuses.
pub(super) fn client(url: &RedisUrl, tls_ca: Option<&[u8]>) -> Result<redis::Client, Refused> {
    let addr = if url.tls {
        let _ = rustls::crypto::ring::default_provider().install_default();
        redis::ConnectionAddr::TcpTls {
            host: url.host.clone(),
            port: url.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        redis::ConnectionAddr::Tcp(url.host.clone(), url.port)
    };
    let mut settings = redis::RedisConnectionInfo::default().set_db(url.db);
    if let Some(u) = &url.username {
        settings = settings.set_username(u);
    }
    if let Some(p) = &url.password {
        settings = settings.set_password(p);
    }
    let bad = |e: redis::RedisError| {
        Refused::Invalid(format!(
            "invalid `url` {url}: {}",
            scrub(url, &e.to_string())
        ))
    };
    let info = redis::IntoConnectionInfo::into_connection_info(addr)
        .map_err(bad)?
        .set_redis_settings(settings);
    match (tls_ca, url.tls) {
        (Some(pem), true) => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            },
        )
        .map_err(bad),
        (Some(_), false) => Err(Refused::Invalid(
            "invalid `tls_ca`: given for a redis:// URL; use rediss://".into(),
        )),
        (None, _) => redis::Client::open(info).map_err(bad),
    }
}

/// `text` with the password taken out, in every form it could be written
/// in (as it is, and percent-encoded), however short: a one-character
/// password is replaced only where it sits in a URL's userinfo (`:p@`), so
/// an error's other text stays readable.
pub(super) fn scrub(url: &RedisUrl, text: &str) -> String {
    let Some(p) = url.password.as_deref().filter(|p| !p.is_empty()) else {
        return text.to_string();
    };
    let encoded: String = p
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let mut out = text.to_string();
    for form in [p.to_string(), encoded.clone(), encoded.to_lowercase()] {
        if form.len() >= 3 {
            out = out.replace(&form, "***");
        } else {
            out = out.replace(&format!(":{form}@"), ":***@");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubs_every_form_of_the_password() {
        let u = RedisUrl::parse("redis://app:p%40ss@h:1/0").unwrap();
        let s = scrub(&u, "redis://app:p%40ss@h and p@ss and p%40ss");
        assert!(!s.contains("p%40ss") && !s.contains("p@ss"), "{s}");
        let u = RedisUrl::parse("redis://app:Q@h:1/0").unwrap();
        assert_eq!(
            scrub(&u, "redis://app:Q@h: Query"),
            "redis://app:***@h: Query"
        );
        assert!(client(&u, Some(b"pem")).is_err(), "tls_ca needs rediss://");
    }
}
