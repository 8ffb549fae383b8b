//! Redis plumbing shared by the Redis layouts: a command connection that
//! reconnects ([`Link`]), a retry helper that waits through a short outage
//! ([`Link::patiently`]), and one pub/sub connection for many waiters
//! ([`Waiters`]).
//!
//! Why shared: how a layout survives a Redis restart is not a property of
//! its key layout. Every value that differs between layouts (timeouts, the
//! backoff, how long a write waits, the log's label) is a parameter of
//! [`LinkSetup`], so a layout adopts this without changing its behaviour.
//!
//! - A [`Link`] holds one multiplexed connection. A connection error drops
//!   it once (per *epoch*: each new connection has the next number, so two
//!   calls failing on one dead connection drop it once), and the next call
//!   dials again — not before the backoff allows, so a Redis that is away
//!   is not hammered. Each outage and its end are logged, the URL redacted.
//! - [`Link::patiently`] runs an operation and, on a connection error or a
//!   Redis still loading its data, waits for the link to come back for up
//!   to `patience` before it refuses; any other error is answered at once.
//! - [`Waiters`] (`waiters.rs`) keep one pub/sub connection. Each waited-for channel is
//!   subscribed while somebody waits on it and unsubscribed when the last
//!   waiter leaves; when the connection goes away every waiter is woken to
//!   look again and subscribe on a new one. Pattern subscriptions
//!   ([`Waiters::psubscribe`]) have no waiter to do that, so they are
//!   standing: made again on every new connection, which the waiters
//!   reconnect by themselves while any pattern stands.

mod dial;
mod here;
mod waiters;

pub use dial::{Conn, Dialer, SENTINEL_PORT, moved};
pub(crate) use here::mark as here;
pub use here::{CROWD, MAX_LOCAL, Release};
pub use waiters::{Decode, Handler, Waiters, Waiting};

use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::{AsyncConnectionConfig, Client, RedisError};
use tokio::time::Instant;

use super::error;
use super::redis::{RedisUrl, check_ca, refuse_cluster};
use crate::flow::{Backoff, Jitter, MILLI};
use crate::task::policy::seeded;
use crate::task::state::{BrokerError, BrokerErrorKind, Refused};

/// What a [`Link`] is made of. Every value is the layout's choice.
#[derive(Clone)]
pub struct LinkSetup {
    /// Where connections go: one Redis, or the primary its sentinels name.
    pub dialer: Arc<Dialer>,
    /// Shown (redacted) in every refusal and log line.
    pub url: RedisUrl,
    /// How long dialling may take.
    pub connect_timeout: Duration,
    /// How long a reply may take on the command connection.
    pub response_timeout: Duration,
    /// The wait between failed dials, by attempt.
    pub backoff: Backoff,
    /// Seeds the backoff's jitter (a consumer name: processes restarted
    /// together do not dial in step).
    pub seed: String,
    /// How long [`Link::patiently`] waits for Redis to come back.
    pub patience: Duration,
    /// Put before every log line (`"headway redis"`).
    pub label: String,
}

impl LinkSetup {
    /// A link to `url` (`tls_ca`: the CA certificates for `rediss://`)
    /// with the common timing — 2 s to connect, 10 s for a reply (a stuck
    /// server, or a pipeline of thousands of scripts), a failed dial
    /// waiting 50 ms doubling to 2 s (ioredis's default cap) with full
    /// jitter (AWS, "Exponential Backoff and Jitter") — which a layout
    /// changes where its peer's differs. `seed` seeds the jitter, `label`
    /// starts every log line. Refused: a `tls_ca` that cannot be read.
    pub fn dialling(
        url: RedisUrl,
        tls_ca: Option<&[u8]>,
        seed: String,
        patience: Duration,
        label: String,
    ) -> Result<LinkSetup, Refused> {
        Ok(LinkSetup {
            dialer: Arc::new(Dialer::new(&url, tls_ca)?),
            url,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(10),
            backoff: Backoff::new(50 * MILLI, 2.0, 2_000 * MILLI, i32::MAX, Jitter::Full)
                .expect("a valid backoff"),
            seed,
            patience,
            label,
        })
    }
}

/// Why a call did not get an answer.
pub enum Fail {
    /// The link is down and waiting out its backoff until the instant.
    Down(Refused, Instant),
    /// Redis (or the socket) answered an error on connection `epoch`.
    Redis(u64, RedisError),
}

/// Whether `e` says the connection is gone (rather than Redis refusing
/// the command).
pub fn conn_error(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}

struct LinkState {
    conn: Option<Conn>,
    epoch: u64,
    failures: i32,
    retry_at: Option<Instant>,
}

/// One multiplexed command connection that reconnects with a backoff.
pub struct Link {
    setup: LinkSetup,
    state: Mutex<LinkState>,
    /// One dial at a time: callers arriving meanwhile take its connection.
    dial: tokio::sync::Mutex<()>,
    /// How many threads hold a link of their own to the same place
    /// (`here.rs`); alive as long as this link is.
    locals: Arc<AtomicUsize>,
    /// How many threads are in a round trip on a link of their own to the
    /// same place right now (`here.rs`: a crowd takes the shared link).
    here_now: AtomicUsize,
    /// A thread's own link: it neither logs nor counts reconnections (the
    /// shared link it stands beside does).
    quiet: bool,
}

impl Link {
    pub fn new(setup: LinkSetup) -> Link {
        Link {
            setup,
            state: Mutex::new(LinkState {
                conn: None,
                epoch: 0,
                failures: 0,
                retry_at: None,
            }),
            dial: tokio::sync::Mutex::new(()),
            locals: Arc::new(AtomicUsize::new(0)),
            here_now: AtomicUsize::new(0),
            quiet: false,
        }
    }

    fn quiet(setup: LinkSetup) -> Link {
        Link {
            quiet: true,
            ..Link::new(setup)
        }
    }

    fn lock(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn url(&self) -> &RedisUrl {
        &self.setup.url
    }

    /// Where its connections go.
    pub fn dialer(&self) -> &Arc<Dialer> {
        &self.setup.dialer
    }

    pub fn response_timeout(&self) -> Duration {
        self.setup.response_timeout
    }

    /// How many threads hold a connection of their own to where this link
    /// goes (see `runtime::poll_first`), at most [`MAX_LOCAL`].
    pub fn locals(&self) -> usize {
        self.locals.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The number of the current (or last) connection; 0 before the first.
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Writes `what` to the log under the link's label.
    pub fn log(&self, what: &str) {
        if self.quiet {
            return;
        }
        crate::log::warn(
            "headway.redis",
            format_args!("{}: {what}", self.setup.label),
        );
    }

    /// `e` as a refusal naming the URL, redacted, of `e`'s kind.
    pub fn refused(&self, e: &RedisError) -> Refused {
        let url = &self.setup.url;
        error::refused(e, format!("{url}: {}", url.scrub(&e.to_string())))
    }

    /// A connection of its own (not the shared one), e.g. for a blocking
    /// command; `response_timeout: None` waits as long as the command does.
    pub async fn dedicated(&self, response_timeout: Option<Duration>) -> Result<Conn, RedisError> {
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.setup.connect_timeout))
            .set_response_timeout(response_timeout);
        self.setup.dialer.connect(&cfg).await
    }

    /// The live connection and its epoch, dialling when there is none and
    /// the backoff allows.
    pub async fn get(&self) -> Result<(u64, Conn), Fail> {
        if let Some(r) = self.ready() {
            return r;
        }
        let _dial = self.dial.lock().await;
        if let Some(r) = self.ready() {
            return r;
        }
        let made = self.dedicated(Some(self.setup.response_timeout)).await;
        let mut s = self.lock();
        match made {
            Ok(c) => {
                s.epoch += 1;
                if s.failures > 0 && !self.quiet {
                    crate::task::metrics::reconnected();
                    // With Sentinel, which node is the primary now.
                    let on = self
                        .setup
                        .dialer
                        .primary()
                        .map(|(h, p)| format!(" on the primary at {h}:{p}"))
                        .unwrap_or_default();
                    self.log(&format!(
                        "{}: reconnected after {} attempt(s){on}; resuming",
                        self.setup.url, s.failures
                    ));
                }
                s.failures = 0;
                s.retry_at = None;
                s.conn = Some(c.clone());
                Ok((s.epoch, c))
            }
            Err(e) => {
                s.failures = s.failures.saturating_add(1);
                let wait = self.setup.backoff.delay(
                    s.failures,
                    seeded(&self.setup.seed, s.failures as u32),
                    0,
                );
                let at = Instant::now() + Duration::from_nanos(wait as u64);
                s.retry_at = Some(at);
                let why = self.refused(&e);
                self.log(&format!(
                    "{why}; cannot connect, next attempt in {} ms",
                    wait / MILLI
                ));
                Err(Fail::Down(why, at))
            }
        }
    }

    fn ready(&self) -> Option<Result<(u64, Conn), Fail>> {
        let s = self.lock();
        if let Some(c) = &s.conn {
            return Some(Ok((s.epoch, c.clone())));
        }
        match s.retry_at {
            Some(at) if Instant::now() < at => Some(Err(Fail::Down(
                Refused::broker(
                    BrokerErrorKind::Connection,
                    format!(
                        "{}: unreachable; reconnecting in {} ms",
                        self.setup.url,
                        at.saturating_duration_since(Instant::now()).as_millis()
                    ),
                ),
                at,
            ))),
            _ => None,
        }
    }

    /// The live connection and its epoch, or why there is none: one
    /// attempt, for a layout that handles the error itself ([`Link::fail`]).
    pub async fn conn(&self) -> Result<(u64, Conn), Refused> {
        self.get().await.map_err(|f| match f {
            Fail::Down(why, _) => why,
            Fail::Redis(epoch, e) => self.fail(epoch, &e),
        })
    }

    /// Dials the first connection, so that a layout's connect is refused at
    /// once by a Redis that cannot be reached (the refusal put after
    /// `unreachable`, each layout's own words) or that is a Cluster node
    /// named as one Redis (`redis://`: a plain client meets MOVED).
    pub async fn first(&self, unreachable: &str) -> Result<Conn, Refused> {
        let (_, mut c) = self.conn().await.map_err(|why| match why {
            Refused::Broker(e) => Refused::Broker(BrokerError {
                kind: e.kind,
                text: format!("{unreachable}{}", e.text),
            }),
            other => other,
        })?;
        if let Conn::One(one) = &mut c {
            refuse_cluster(one, &self.setup.url).await?;
        }
        Ok(c)
    }

    /// Waiters on this link's Redis, reading what a message carries with
    /// `decode`. Must be called inside a tokio runtime.
    pub fn waiters<T: Clone + Send + 'static>(&self, decode: Decode<T>) -> Arc<Waiters<T>> {
        Waiters::with_dialer(self.setup.dialer.clone(), self.setup.url.clone(), decode)
    }

    /// `e`, answered on connection `epoch`, as a refusal; the connection is
    /// dropped when `e` says it is gone or the node is no longer the
    /// primary ([`moved`]), so the next call dials again.
    pub fn fail(&self, epoch: u64, e: &RedisError) -> Refused {
        if conn_error(e) || moved(e) {
            self.broken(epoch, e);
        }
        self.refused(e)
    }

    /// Drops connection `epoch` after a connection error, once; with
    /// Sentinel the next dial asks the sentinels for the primary again.
    pub fn broken(&self, epoch: u64, e: &RedisError) {
        let mut s = self.lock();
        if s.epoch == epoch && s.conn.is_some() {
            s.conn = None;
            self.setup.dialer.forget();
            s.failures = s.failures.max(1);
            self.log(&format!(
                "{}; connection lost, reconnecting",
                self.refused(e)
            ));
        }
    }

    /// Runs `pipe` through a short outage as [`Link::patiently`] does,
    /// its replies ignored: the shape of most writes a layout makes.
    pub async fn pipe(&self, pipe: &redis::Pipeline) -> Result<(), Refused> {
        self.patiently(
            true,
            |mut c| async move { pipe.query_async::<()>(&mut c).await },
        )
        .await
    }

    /// Runs `op` on the live connection. A connection error, a Redis still
    /// `LOADING` and a node no longer the primary ([`moved`]) drop the
    /// connection and are retried — with
    /// `patient`, for up to the setup's patience, waiting out the backoff
    /// (and making one last attempt at the deadline, whatever the backoff
    /// says: Redis may be back). Any other error is answered at once. Every
    /// error is shown with the URL redacted.
    pub async fn patiently<T, F, Fut>(&self, patient: bool, mut op: F) -> Result<T, Refused>
    where
        F: FnMut(Conn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        if let here::Here::Done(v) = here::attempt(self, &mut op) {
            return v;
        }
        let start = Instant::now();
        loop {
            let fail = match self.get().await {
                Ok((epoch, c)) => match op(c).await {
                    Ok(v) => return Ok(v),
                    Err(e) => Fail::Redis(epoch, e),
                },
                Err(f) => f,
            };
            let (why, retry_at) = match fail {
                Fail::Down(why, at) => (why, at),
                Fail::Redis(epoch, e) => {
                    // A node that is no longer the primary (a failover) is
                    // left like a lost one.
                    let lost = conn_error(&e) || moved(&e);
                    if !lost {
                        return Err(self.refused(&e));
                    }
                    if lost {
                        self.broken(epoch, &e);
                    }
                    (self.refused(&e), Instant::now() + Duration::from_millis(50))
                }
            };
            let deadline = start + self.setup.patience;
            if !patient || Instant::now() >= deadline {
                return Err(why);
            }
            let at = retry_at
                .min(deadline)
                .max(Instant::now() + Duration::from_millis(5));
            tokio::time::sleep_until(at).await;
            if at >= deadline {
                self.lock().retry_at = None;
            }
        }
    }
}

/// The redis-rs client for `parsed`, built from the parsed URL — never from
/// its text, which redis-rs would parse a second time by other rules, and
/// whose percent-encoded password could reach an error — so one URL means
/// the same on every layout. A `rediss://` server is verified against
/// `tls_ca` (PEM roots) when given; `tls_ca` on a `redis://` URL is
/// refused.
pub fn client(parsed: &RedisUrl, tls_ca: Option<&[u8]>) -> Result<Client, Refused> {
    node_client(parsed, &parsed.host, parsed.port, true, tls_ca)
}

/// The client of one node of `parsed` (a sentinel, a Cluster node, the
/// primary a sentinel named) at `host:port`, over TLS when `parsed` is;
/// with `data`, with `parsed`'s credentials and database (a sentinel gets
/// neither: they are the data nodes').
pub(crate) fn node_client(
    parsed: &RedisUrl,
    host: &str,
    port: u16,
    data: bool,
    tls_ca: Option<&[u8]>,
) -> Result<Client, Refused> {
    let addr = if parsed.tls {
        let _ = rustls::crypto::ring::default_provider().install_default();
        redis::ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        redis::ConnectionAddr::Tcp(host.to_string(), port)
    };
    let mut settings = redis::RedisConnectionInfo::default();
    if data {
        settings = settings.set_db(parsed.db);
        if let Some(u) = &parsed.username {
            settings = settings.set_username(u);
        }
        if let Some(p) = &parsed.password {
            settings = settings.set_password(p);
        }
    }
    let bad = |e: RedisError| {
        Refused::Invalid(format!("invalid `url`: {}", parsed.scrub(&e.to_string())))
    };
    let info = redis::IntoConnectionInfo::into_connection_info(addr)
        .map_err(bad)?
        .set_redis_settings(settings);
    match (tls_ca, parsed.tls) {
        (Some(pem), true) => Client::build_with_tls(
            check_ca(pem).map(|_| info)?,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            },
        )
        .map_err(bad),
        (Some(_), false) => Err(Refused::Invalid(
            "invalid `tls_ca`: given for a redis:// URL; use rediss://".into(),
        )),
        (None, _) => Client::open(info).map_err(bad),
    }
}
