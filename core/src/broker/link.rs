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
//! - [`Waiters`] keep one pub/sub connection. Each waited-for channel is
//!   subscribed while somebody waits on it and unsubscribed when the last
//!   waiter leaves; when the connection goes away every waiter is woken to
//!   look again and subscribe on a new one. Pattern subscriptions
//!   ([`Waiters::psubscribe`]) have no waiter to do that, so they are
//!   standing: made again on every new connection, which the waiters
//!   reconnect by themselves while any pattern stands.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubSink};
use redis::{AsyncConnectionConfig, Client, RedisError};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::error;
use super::redis::{RedisUrl, check_ca, refuse_cluster};
use crate::flow::{Backoff, MILLI};
use crate::task::policy::seeded;
use crate::task::state::{BrokerError, BrokerErrorKind, Refused};

/// What a [`Link`] is made of. Every value is the layout's choice.
pub struct LinkSetup {
    pub client: Client,
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
    conn: Option<MultiplexedConnection>,
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
        }
    }

    fn lock(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn url(&self) -> &RedisUrl {
        &self.setup.url
    }

    pub fn client(&self) -> &Client {
        &self.setup.client
    }

    pub fn response_timeout(&self) -> Duration {
        self.setup.response_timeout
    }

    /// The number of the current (or last) connection; 0 before the first.
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Writes `what` to the log under the link's label.
    pub fn log(&self, what: &str) {
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
    pub async fn dedicated(
        &self,
        response_timeout: Option<Duration>,
    ) -> Result<MultiplexedConnection, RedisError> {
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.setup.connect_timeout))
            .set_response_timeout(response_timeout);
        self.setup
            .client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
    }

    /// The live connection and its epoch, dialling when there is none and
    /// the backoff allows.
    pub async fn get(&self) -> Result<(u64, MultiplexedConnection), Fail> {
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
                if s.failures > 0 {
                    crate::task::metrics::reconnected();
                    self.log(&format!(
                        "{}: reconnected after {} attempt(s); resuming",
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

    fn ready(&self) -> Option<Result<(u64, MultiplexedConnection), Fail>> {
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
    pub async fn conn(&self) -> Result<(u64, MultiplexedConnection), Refused> {
        self.get().await.map_err(|f| match f {
            Fail::Down(why, _) => why,
            Fail::Redis(epoch, e) => self.fail(epoch, &e),
        })
    }

    /// Dials the first connection, so that a layout's connect is refused at
    /// once by a Redis that cannot be reached (the refusal put after
    /// `unreachable`, each layout's own words) or that is a Cluster node
    /// (the layouts' keys are in no hash slot of their own).
    pub async fn first(&self, unreachable: &str) -> Result<MultiplexedConnection, Refused> {
        let (_, mut c) = self.conn().await.map_err(|why| match why {
            Refused::Broker(e) => Refused::Broker(BrokerError {
                kind: e.kind,
                text: format!("{unreachable}{}", e.text),
            }),
            other => other,
        })?;
        refuse_cluster(&mut c, &self.setup.url).await?;
        Ok(c)
    }

    /// Waiters on this link's Redis, reading what a message carries with
    /// `decode`. Must be called inside a tokio runtime.
    pub fn waiters<T: Clone + Send + 'static>(&self, decode: Decode<T>) -> Arc<Waiters<T>> {
        Waiters::new(self.setup.client.clone(), self.setup.url.clone(), decode)
    }

    /// `e`, answered on connection `epoch`, as a refusal; the connection is
    /// dropped when `e` says it is gone, so the next call dials again.
    pub fn fail(&self, epoch: u64, e: &RedisError) -> Refused {
        if conn_error(e) {
            self.broken(epoch, e);
        }
        self.refused(e)
    }

    /// Drops connection `epoch` after a connection error, once.
    pub fn broken(&self, epoch: u64, e: &RedisError) {
        let mut s = self.lock();
        if s.epoch == epoch && s.conn.is_some() {
            s.conn = None;
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

    /// Runs `op` on the live connection. A connection error drops the
    /// connection; it and a Redis still `LOADING` are retried — with
    /// `patient`, for up to the setup's patience, waiting out the backoff
    /// (and making one last attempt at the deadline, whatever the backoff
    /// says: Redis may be back). Any other error is answered at once. Every
    /// error is shown with the URL redacted.
    pub async fn patiently<T, F, Fut>(&self, patient: bool, mut op: F) -> Result<T, Refused>
    where
        F: FnMut(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
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
                    let lost = conn_error(&e);
                    if !lost && e.code() != Some("LOADING") {
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
    let addr = if parsed.tls {
        let _ = rustls::crypto::ring::default_provider().install_default();
        redis::ConnectionAddr::TcpTls {
            host: parsed.host.clone(),
            port: parsed.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        redis::ConnectionAddr::Tcp(parsed.host.clone(), parsed.port)
    };
    let mut settings = redis::RedisConnectionInfo::default().set_db(parsed.db);
    if let Some(u) = &parsed.username {
        settings = settings.set_username(u);
    }
    if let Some(p) = &parsed.password {
        settings = settings.set_password(p);
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

// ---------------------------------------------------------------- waiters

/// Called with a channel and its message, for a pattern subscription.
pub type Handler = Arc<dyn Fn(&str, &[u8]) + Send + Sync>;

/// Reads what a waited-for channel's message carries (`None`: a wake-up
/// only, the waiter looks for itself).
pub type Decode<T> = Box<dyn Fn(&[u8]) -> Option<T> + Send + Sync>;

struct Sub<T> {
    count: usize,
    notify: Arc<Notify>,
    /// What a message carried (see [`Decode`]).
    got: Option<T>,
    /// The pub/sub connection it is subscribed on (0: none).
    on: u64,
}

/// Waiters on pub/sub channels, over one pub/sub connection.
pub struct Waiters<T> {
    me: Weak<Waiters<T>>,
    client: Client,
    url: RedisUrl,
    decode: Decode<T>,
    subs: Mutex<HashMap<String, Sub<T>>>,
    /// Standing pattern subscriptions, made again on every connection.
    patterns: Mutex<Vec<(String, Handler)>>,
    /// The live pub/sub connection's writing half and its number.
    sink: tokio::sync::Mutex<Option<(u64, PubSubSink)>>,
    epoch: AtomicU64,
    rt: tokio::runtime::Handle,
}

/// One waiter's place on a channel: leaves it when dropped, however the
/// wait ends (the last one out unsubscribes).
pub struct Waiting<'a, T: Clone + Send + 'static> {
    waiters: &'a Waiters<T>,
    ch: String,
    notify: Arc<Notify>,
}

impl<T: Clone + Send + 'static> Waiting<'_, T> {
    /// Notified on every message on the channel and when the connection
    /// goes away.
    pub fn notify(&self) -> &Arc<Notify> {
        &self.notify
    }
}

impl<T: Clone + Send + 'static> Drop for Waiting<'_, T> {
    fn drop(&mut self) {
        let last = {
            let mut g = self.waiters.lock();
            match g.get_mut(&self.ch) {
                Some(s) if s.count <= 1 => {
                    g.remove(&self.ch);
                    true
                }
                Some(s) => {
                    s.count -= 1;
                    false
                }
                None => false,
            }
        };
        if last && let Some(w) = self.waiters.me.upgrade() {
            let ch = std::mem::take(&mut self.ch);
            self.waiters.rt.spawn(async move {
                let mut sink = w.sink.lock().await;
                // Still nobody waiting: unsubscribe (under the sink lock, so
                // it cannot overtake a new waiter's subscribe).
                if !w.lock().contains_key(&ch)
                    && let Some((_, s)) = sink.as_mut()
                {
                    let _ = s.unsubscribe(&ch).await;
                }
            });
        }
    }
}

impl<T: Clone + Send + 'static> Waiters<T> {
    /// Waiters on `client`'s Redis. Must be called inside a tokio runtime,
    /// which runs the connection's reader.
    pub fn new(client: Client, url: RedisUrl, decode: Decode<T>) -> Arc<Waiters<T>> {
        Arc::new_cyclic(|me| Waiters {
            me: me.clone(),
            client,
            url,
            decode,
            subs: Mutex::new(HashMap::new()),
            patterns: Mutex::new(Vec::new()),
            sink: tokio::sync::Mutex::new(None),
            epoch: AtomicU64::new(0),
            rt: tokio::runtime::Handle::current(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Sub<T>>> {
        self.subs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn refused(&self, e: &RedisError) -> Refused {
        error::refused(
            e,
            format!("{}: {}", self.url, self.url.scrub(&e.to_string())),
        )
    }

    /// Joins `ch`'s waiters (subscribe with [`Waiters::subscribe`]).
    pub fn join(&self, ch: &str) -> Waiting<'_, T> {
        let mut g = self.lock();
        let e = g.entry(ch.to_string()).or_insert_with(|| Sub {
            count: 0,
            notify: Arc::new(Notify::new()),
            got: None,
            on: 0,
        });
        e.count += 1;
        Waiting {
            waiters: self,
            ch: ch.to_string(),
            notify: e.notify.clone(),
        }
    }

    /// The number of the current (or last) pub/sub connection: it changes
    /// when a new one is made, so a caller can tell what it may have missed.
    pub fn connection(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// What a message on `ch` carried, if one did.
    pub fn got(&self, ch: &str) -> Option<T> {
        self.lock().get(ch).and_then(|s| s.got.clone())
    }

    /// The connection `ch` is subscribed on (0: none). A value that did
    /// not change across a look means the look came after the subscribe.
    pub fn on(&self, ch: &str) -> u64 {
        self.lock().get(ch).map_or(0, |s| s.on)
    }

    fn wake_all(&self) {
        for s in self.lock().values() {
            s.notify.notify_waiters();
        }
    }

    /// The live connection, made (with its reader, and the standing
    /// patterns subscribed) when there is none.
    async fn ensure<'g>(
        &self,
        sink: &'g mut Option<(u64, PubSubSink)>,
    ) -> Result<&'g mut (u64, PubSubSink), Refused> {
        if sink.is_none() {
            let ps = self
                .client
                .get_async_pubsub()
                .await
                .map_err(|e| self.refused(&e))?;
            let (mut s, stream) = ps.split();
            let patterns: Vec<String> = self.patterns().iter().map(|(p, _)| p.clone()).collect();
            for p in &patterns {
                match s.psubscribe(p).await {
                    Ok(()) => {}
                    Err(e) if conn_error(&e) => return Err(self.refused(&e)),
                    // Refused by Redis (an ACL without it): the other
                    // patterns and every waiter still work; said once per
                    // connection.
                    Err(e) => crate::log::warn(
                        "headway.redis",
                        format_args!(
                            "headway: {}; the pattern {p:?} is not heard",
                            self.refused(&e)
                        ),
                    ),
                }
            }
            let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
            *sink = Some((epoch, s));
            self.rt.spawn(read(self.me.clone(), stream, epoch));
        }
        Ok(sink.as_mut().expect("just made"))
    }

    fn patterns(&self) -> MutexGuard<'_, Vec<(String, Handler)>> {
        self.patterns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes `ch` on the live connection unless it already is.
    pub async fn subscribe(&self, ch: &str) -> Result<(), Refused> {
        let mut sink = self.sink.lock().await;
        let (epoch, s) = self.ensure(&mut sink).await?;
        if self.on(ch) != *epoch {
            s.subscribe(ch).await.map_err(|e| self.refused(&e))?;
            if let Some(e) = self.lock().get_mut(ch) {
                e.on = *epoch;
            }
        }
        Ok(())
    }

    /// Subscribes `pattern` for good: `handler` gets every message on a
    /// matching channel, on this connection and every one after it (a lost
    /// connection is made again in the background while a pattern stands).
    /// Refused when Redis cannot be reached now; the pattern still stands
    /// and is subscribed as soon as Redis is back.
    pub async fn psubscribe(&self, pattern: &str, handler: Handler) -> Result<(), Refused> {
        let mut sink = self.sink.lock().await;
        let fresh = sink.is_none();
        self.patterns().push((pattern.to_string(), handler));
        // A new connection subscribes every standing pattern itself.
        let (_, s) = match self.ensure(&mut sink).await {
            Ok(s) => s,
            Err(e) => {
                self.rt.spawn(reconnect(self.me.clone()));
                return Err(e);
            }
        };
        if !fresh {
            s.psubscribe(pattern).await.map_err(|e| self.refused(&e))?;
        }
        Ok(())
    }
}

/// After a lost connection: makes a new one while patterns stand and the
/// waiters are kept, waiting 50 ms doubling to 1 s between attempts.
///
/// Boxed: it and the reader spawn each other, so its type is spelled out.
fn reconnect<T: Clone + Send + 'static>(
    weak: Weak<Waiters<T>>,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let mut wait = Duration::from_millis(50);
        loop {
            let Some(w) = weak.upgrade() else { return };
            if w.patterns().is_empty() {
                return;
            }
            let mut sink = w.sink.lock().await;
            if sink.is_some() || w.ensure(&mut sink).await.is_ok() {
                return;
            }
            drop(sink);
            drop(w);
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    })
}

/// Reads connection `epoch`'s messages until it goes away, then wakes
/// every waiter to subscribe on a new one (and makes one for the patterns).
async fn read<T: Clone + Send + 'static>(
    weak: Weak<Waiters<T>>,
    mut stream: redis::aio::PubSubStream,
    epoch: u64,
) {
    while let Some(msg) = stream.next().await {
        let Some(w) = weak.upgrade() else { return };
        let ch = msg.get_channel_name();
        if msg.from_pattern() {
            let pattern: String = msg.get_pattern().unwrap_or_default();
            let handlers: Vec<Handler> = w
                .patterns()
                .iter()
                .filter(|(p, _)| *p == pattern)
                .map(|(_, h)| h.clone())
                .collect();
            for h in handlers {
                h(ch, msg.get_payload_bytes());
            }
            continue;
        }
        let got = (w.decode)(msg.get_payload_bytes());
        if let Some(s) = w.lock().get_mut(ch) {
            if got.is_some() {
                s.got = got;
            }
            s.notify.notify_waiters();
        }
    }
    if let Some(w) = weak.upgrade() {
        let mut sink = w.sink.lock().await;
        if sink.as_ref().is_some_and(|(g, _)| *g == epoch) {
            *sink = None;
        }
        drop(sink);
        w.wake_all();
        if !w.patterns().is_empty() {
            w.rt.spawn(reconnect(weak));
        }
    }
}
