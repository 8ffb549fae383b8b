//! What a `broker=` (or `backend=`) argument means, and the connection it
//! makes.
//!
//! Why here: `App(broker="redis://…")` must mean the same in Python and in
//! Node — which schemes are brokers, which are refused and how, what a
//! `RedisBroker` object's options default to, that it connects once and
//! serves one clock, how a URL is shown in an error. Each binding used to
//! decide this itself; now a binding only turns its values into a
//! [`Target`] and maps the errors.
//!
//! A [`Target`] is what the argument names: the in-process broker, headway's
//! own Redis layout, or Celery's ([`Layout`]). Celery's layout is never
//! chosen from a bare URL — one `redis://` URL could mean either — so it is
//! asked for by name ([`Target::celery`]). Schemes of brokers headway may
//! speak later (AMQP) are recognised and refused by name
//! ([`TargetError::NotYet`]) rather than reported as nonsense.
//!
//! A target connects on first use with the clock of the app that uses it
//! (the Redis scripts read the app's time when it is virtual), so it can be
//! made before the app. Once connected it serves that clock only: an app on
//! another clock is refused. Every URL shown in an error or a `Debug` goes
//! through [`redact`].

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::amqp::{AmqpBroker, AmqpOptions, AmqpUrl, RpcStore};
use super::celery::{CeleryBroker, CeleryOptions};
use super::memory::MemoryBroker;
use super::redis::{RedisBroker, RedisOptions, RedisUrl};
use crate::task::app::{App, Seams};
use crate::task::clock::{self, Clock};
use crate::task::spec::Broker;
use crate::task::state::Refused;

/// Schemes of brokers headway does not speak yet, refused by name.
const NOT_YET: &[&str] = &[];

/// What every refusal of a URL lists as accepted.
const ACCEPTED: &str = "memory://, redis://, rediss:// or amqp://";

/// The text `url` with any password hidden, for errors and `Debug`:
/// `amqp://u:secret@h/` is shown `amqp://u:***@h/`. Userinfo with no `:` is
/// hidden whole (`redis://secret@h` is a password, as redis-cli reads it).
pub fn redact(url: &str) -> String {
    let Some(at) = url.rfind('@') else {
        return url.to_string();
    };
    let start = match url.find("://") {
        Some(s) if s < at => s + 3,
        _ => 0,
    };
    match url[start..at].split_once(':') {
        Some((user, _)) => format!("{}{user}:***{}", &url[..start], &url[at..]),
        None => format!("{}***{}", &url[..start], &url[at..]),
    }
}

/// Why a URL or an option was not accepted. Every variant becomes
/// [`Refused::Invalid`] with its `Display` text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TargetError {
    /// A broker headway does not speak yet (AMQP).
    NotYet {
        /// The argument, as the caller named it (`broker`, `url`).
        arg: String,
        /// The scheme, lower-case, without `://`.
        scheme: String,
        /// The URL, redacted.
        url: String,
    },
    /// Not a broker URL at all.
    NotBroker {
        /// The argument, as the caller named it.
        arg: String,
        /// The text, redacted.
        url: String,
    },
    /// A `redis://` URL that does not parse (the message names `url`).
    Url(String),
    /// An option out of range, named as the core spells it
    /// (`lease`, `visibility_timeout`).
    Invalid {
        arg: &'static str,
        why: &'static str,
    },
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetError::NotYet { arg, scheme, url } => write!(
                f,
                "invalid `{arg}`: {url:?} is {scheme}://, which headway does not speak yet \
                 (use {ACCEPTED})"
            ),
            TargetError::NotBroker { arg, url } => {
                write!(f, "invalid `{arg}`: {url:?} is not {ACCEPTED}")
            }
            TargetError::Url(m) => f.write_str(m),
            TargetError::Invalid { arg, why } => write!(f, "invalid `{arg}`: {why}"),
        }
    }
}

impl std::error::Error for TargetError {}

impl From<TargetError> for Refused {
    fn from(e: TargetError) -> Refused {
        Refused::Invalid(e.to_string())
    }
}

/// Which broker a target is.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Layout {
    /// The in-process broker: its own store, counter and inspector.
    Memory,
    /// headway's own Redis layout.
    Headway(RedisOptions),
    /// Celery's Redis layout and message format.
    Celery(CeleryOptions),
    /// RabbitMQ on Celery's AMQP topology and message format.
    Amqp(AmqpOptions),
}

impl Layout {
    /// `"memory"`, `"headway"` or `"celery"`.
    pub fn name(&self) -> &'static str {
        match self {
            Layout::Memory => "memory",
            Layout::Headway(_) => "headway",
            Layout::Celery(_) => "celery",
            Layout::Amqp(_) => "amqp",
        }
    }
}

/// A connected broker: the concrete one behind an app's seams.
#[derive(Clone)]
#[non_exhaustive]
pub enum Connected {
    /// The in-process broker.
    Memory(Arc<MemoryBroker>),
    /// headway's own Redis layout.
    Headway(Arc<RedisBroker>),
    /// Celery's Redis layout.
    Celery(Arc<CeleryBroker>),
    /// RabbitMQ (results kept elsewhere: see [`backend_store`]).
    Amqp(Arc<AmqpBroker>),
    /// `rpc://`: results as messages to the caller, on its RabbitMQ.
    Rpc(Arc<RpcStore>),
}

impl fmt::Debug for Connected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Connected::Memory(_) => "memory",
            Connected::Headway(_) => "headway",
            Connected::Celery(_) => "celery",
            Connected::Amqp(_) => "amqp",
            Connected::Rpc(_) => "rpc",
        };
        write!(f, "Connected({name})")
    }
}

/// Where an app keeps results and chord counts.
#[derive(Debug, Clone, Default)]
pub enum Store {
    /// The broker's own store.
    #[default]
    Broker,
    /// Nowhere: `get()` is refused as missing.
    Nowhere,
    /// Another broker's store (and its chord counter).
    In(Connected),
}

impl Connected {
    /// Its seams: it is the broker, the store, the counter and the inspector.
    pub fn seams(&self) -> Seams {
        match self {
            Connected::Memory(b) => Seams {
                broker: b.clone(),
                backend: Some(b.clone()),
                counter: Some(b.clone()),
                inspector: Some(b.clone()),
            },
            Connected::Headway(b) => b.seams(),
            Connected::Celery(b) => b.seams(),
            Connected::Amqp(b) => b.seams(),
            Connected::Rpc(r) => r.seams(),
        }
    }

    /// It as a broker.
    pub fn broker(&self) -> Arc<dyn Broker> {
        match self {
            Connected::Memory(b) => b.clone(),
            Connected::Headway(b) => b.clone(),
            Connected::Celery(b) => b.clone(),
            Connected::Amqp(b) => b.clone(),
            Connected::Rpc(r) => r.seams().broker,
        }
    }

    /// The seams of an app on it that keeps results in `store`.
    pub fn seams_with(&self, store: &Store) -> Seams {
        let mut seams = self.seams();
        match store {
            Store::Broker => {}
            Store::Nowhere => seams.backend = None,
            Store::In(other) => {
                let theirs = other.seams();
                seams.backend = theirs.backend;
                seams.counter = theirs.counter;
            }
        }
        seams
    }

    /// An app on it, keeping results in `store`, reading `clock`. On
    /// Celery's layout the broker routes chain links by the app's queues: a
    /// Celery worker publishes the next link itself and knows only what the
    /// signature names.
    pub fn app(&self, store: &Store, clock: Arc<dyn Clock>) -> App {
        let app = App::new(self.seams_with(store), clock);
        match self {
            Connected::Celery(c) => c.route_for(&app),
            Connected::Amqp(a) => {
                a.route_for(&app);
                // Results in Celery's Redis store: a chord's callback goes
                // out through RabbitMQ, where the workers are.
                if let Store::In(Connected::Celery(c)) = store {
                    a.use_store(c);
                }
            }
            _ => {}
        }
        app
    }

    /// Lets go of this consumer's claims so another takes them now rather
    /// than after the lease; answers how many went back (0 where the layout
    /// does not count them).
    pub async fn close(&self) -> Result<usize, Refused> {
        match self {
            Connected::Memory(_) => Ok(0),
            Connected::Headway(b) => {
                b.close().await;
                Ok(0)
            }
            Connected::Celery(b) => b.close().await,
            Connected::Amqp(b) => b.close().await,
            Connected::Rpc(_) => Ok(0),
        }
    }
}

/// The connection a target made, and the clock it serves.
type Slot = Arc<Mutex<Option<(Connected, Arc<dyn Clock>)>>>;

/// What a `broker=` argument names, connected on first use. Cheap to clone;
/// clones share the connection.
#[derive(Clone)]
pub struct Target {
    /// The URL as given (with its password), to connect with.
    dial: String,
    /// The URL as shown: parsed and redacted.
    shown: String,
    layout: Layout,
    connected: Slot,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("layout", &self.layout.name())
            .field("url", &redact(&self.dial))
            .finish()
    }
}

/// The scheme of `text`, lower-case, when it is one headway does not speak
/// yet.
fn not_yet(arg: &str, text: &str) -> Result<(), TargetError> {
    let Some((scheme, _)) = text.split_once("://") else {
        return Ok(());
    };
    let scheme = scheme.to_ascii_lowercase();
    if NOT_YET.contains(&scheme.as_str()) {
        return Err(TargetError::NotYet {
            arg: arg.to_string(),
            scheme,
            url: redact(text),
        });
    }
    Ok(())
}

/// A positive span in ms, or the error naming `arg`.
fn positive(arg: &'static str, ms: i64) -> Result<Duration, TargetError> {
    if ms <= 0 {
        return Err(TargetError::Invalid {
            arg,
            why: "must be positive",
        });
    }
    Ok(Duration::from_millis(ms as u64))
}

impl Target {
    fn new(dial: &str, shown: String, layout: Layout) -> Target {
        Target {
            dial: dial.to_string(),
            shown,
            layout,
            connected: Arc::new(Mutex::new(None)),
        }
    }

    /// What an app is built on when no broker is named: a fresh
    /// in-process broker (`App()` in either language).
    pub const DEFAULT_URL: &'static str = "memory://";

    /// What a `broker=` argument means: [`Target::url`] of `text`, or of
    /// [`Target::DEFAULT_URL`] when none was given.
    pub fn url_or_default(arg: &str, text: Option<&str>) -> Result<Target, TargetError> {
        Target::url(arg, text.unwrap_or(Target::DEFAULT_URL))
    }

    /// A fresh in-process broker.
    pub fn memory() -> Target {
        Target::new("memory://", "memory://".into(), Layout::Memory)
    }

    /// What a bare URL means, `arg` naming the argument for the refusal:
    /// `memory://` (or `memory`) a fresh in-process broker; `redis://`,
    /// `rediss://` and their `+sentinel` and `+cluster` forms headway's own
    /// layout with its default options.
    pub fn url(arg: &str, text: &str) -> Result<Target, TargetError> {
        let lower = text.to_ascii_lowercase();
        if lower == "memory://" || lower == "memory" {
            return Ok(Target::memory());
        }
        not_yet(arg, text)?;
        if [
            "redis://",
            "rediss://",
            "redis+sentinel://",
            "rediss+sentinel://",
            "redis+cluster://",
            "rediss+cluster://",
        ]
        .iter()
        .any(|s| lower.starts_with(s))
        {
            return Target::headway(text, None, None, None);
        }
        if lower.starts_with("sentinel://") {
            return Err(TargetError::Url(format!(
                "invalid `{arg}`: sentinel:// is Celery's Sentinel URL: use \
                 RedisBroker.celery(url, master_name=...), or \
                 redis+sentinel://h1:26379,h2:26379/<master>/<db> for headway's layout"
            )));
        }
        if ["amqp://", "pyamqp://", "amqps://"]
            .iter()
            .any(|s| lower.starts_with(s))
        {
            return Target::amqp(text, None);
        }
        Err(TargetError::NotBroker {
            arg: arg.to_string(),
            url: redact(text),
        })
    }

    /// headway's own layout on `url`: `consumer` names this process's
    /// claims (host, pid and a random suffix when `None`), `prefix` goes
    /// before every key (`headway:`), `lease_ms` is how long claims outlive
    /// a silent consumer (30 s, BullMQ's lock duration). A dead consumer's
    /// claims are back within two leases: every live broker recovers once
    /// per lease.
    pub fn headway(
        url: &str,
        consumer: Option<String>,
        prefix: Option<String>,
        lease_ms: Option<i64>,
    ) -> Result<Target, TargetError> {
        let shown = Target::redis_url(url)?;
        let d = RedisOptions::default();
        let lease = match lease_ms {
            None => d.lease,
            Some(ms) => positive("lease", ms)?,
        };
        let options = RedisOptions {
            consumer,
            prefix: prefix.unwrap_or_else(|| d.prefix.clone()),
            lease,
            recover_every: Some(lease),
            ..d
        };
        Ok(Target::new(url, shown, Layout::Headway(options)))
    }

    /// Celery's layout and message format on `url`, so headway and Celery
    /// workers share queues, results and chords. `visibility_timeout_ms`:
    /// how long a claim may stay unacked before any consumer's restore hands
    /// it back (kombu's 3600 s when `None`).
    pub fn celery(
        url: &str,
        consumer: Option<String>,
        visibility_timeout_ms: Option<i64>,
    ) -> Result<Target, TargetError> {
        Target::celery_on(url, None, consumer, visibility_timeout_ms)
    }

    /// [`Target::celery`] where `url` may also be Celery's Sentinel URL,
    /// `sentinel://h1:26379;sentinel://h2:26379`, the sentinels watching
    /// the master named `master_name` (Celery's `broker_transport_options`
    /// of that name; not used by a `redis://` URL, as in Celery).
    pub fn celery_on(
        url: &str,
        master_name: Option<&str>,
        consumer: Option<String>,
        visibility_timeout_ms: Option<i64>,
    ) -> Result<Target, TargetError> {
        if url.to_ascii_lowercase().starts_with("sentinel://")
            && master_name.is_none_or(str::is_empty)
        {
            return Err(TargetError::Invalid {
                arg: "master_name",
                why: "a sentinel:// URL needs the name of the master the sentinels watch",
            });
        }
        let canonical = RedisUrl::from_celery_sentinel(url, master_name)
            .map_err(|e| TargetError::Url(e.to_string()))?;
        let url = canonical.as_deref().unwrap_or(url);
        let shown = Target::redis_url(url)?;
        let mut options = CeleryOptions {
            consumer,
            ..CeleryOptions::default()
        };
        if let Some(ms) = visibility_timeout_ms {
            options.visibility_timeout = positive("visibility_timeout", ms)?;
        }
        Ok(Target::new(url, shown, Layout::Celery(options)))
    }

    /// RabbitMQ at `url` on Celery's AMQP topology and message format
    /// (`amqp://`, `pyamqp://`, `amqps://`; the vhost is the path, `/` when
    /// empty or `%2F`). `?max_priority=N` declares queues with
    /// `x-max-priority` N (Celery's `task_queue_max_priority`: both sides
    /// must agree). `consumer` names this process's node (`headway@<host>`).
    pub fn amqp(url: &str, consumer: Option<String>) -> Result<Target, TargetError> {
        let parsed = AmqpUrl::parse(url).map_err(TargetError::Url)?;
        let options = AmqpOptions {
            consumer,
            max_priority: parsed.max_priority,
            ..AmqpOptions::default()
        };
        Ok(Target::new(url, parsed.to_string(), Layout::Amqp(options)))
    }

    /// On Celery's layouts (Redis and RabbitMQ), whether a `task-sent`
    /// event goes out for each message published (Celery's
    /// `task_send_sent_event`); other layouts send no Celery events and
    /// are unchanged.
    pub fn task_send_sent_event(mut self, on: bool) -> Target {
        match &mut self.layout {
            Layout::Celery(o) => o.task_send_sent_event = on,
            Layout::Amqp(o) => o.task_send_sent_event = on,
            _ => {}
        }
        self
    }

    /// On Celery's layout, how long results and chord keys live (Celery's
    /// `result_expires`): `None` or 0 keeps them for ever, as Celery reads
    /// them; a negative span is refused naming `result_expires`. Other
    /// layouts are unchanged.
    pub fn result_expires(mut self, ms: Option<i64>) -> Result<Target, TargetError> {
        if let Layout::Celery(o) = &mut self.layout {
            o.result_expires = match ms {
                None | Some(0) => None,
                Some(ms) => Some(positive("result_expires", ms)?),
            };
        }
        Ok(self)
    }

    /// A Redis URL as shown, or why it is not one.
    fn redis_url(url: &str) -> Result<String, TargetError> {
        not_yet("url", url)?;
        RedisUrl::parse(url)
            .map(|u| u.to_string())
            .map_err(|e| TargetError::Url(e.to_string()))
    }

    /// Which broker it is, with its options.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The URL as shown (parsed, password redacted).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The connection made, if one was.
    pub fn connection(&self) -> Option<Connected> {
        self.slot().as_ref().map(|(c, _)| c.clone())
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(Connected, Arc<dyn Clock>)>> {
        self.connected.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The one it made on `clock`, or refused on another.
    fn made_on(&self, clock: &Arc<dyn Clock>) -> Option<Result<Connected, Refused>> {
        self.slot().as_ref().map(|(c, at)| {
            if clock::same(at, clock) {
                Ok(c.clone())
            } else {
                Err(Refused::Invalid(
                    "this RedisBroker is already connected on another clock; build one per App"
                        .into(),
                ))
            }
        })
    }

    /// The broker for an app on `clock`, connecting now the first time.
    /// Refused: on another clock than the first connect's, or a Redis that
    /// cannot be reached (the URL redacted).
    pub async fn connect(&self, clock: &Arc<dyn Clock>) -> Result<Connected, Refused> {
        if let Some(made) = self.made_on(clock) {
            return made;
        }
        let clk = clock.clone();
        let made = match &self.layout {
            Layout::Memory => Connected::Memory(MemoryBroker::new(clk)),
            Layout::Headway(o) => {
                Connected::Headway(RedisBroker::connect(&self.dial, o.clone(), clk).await?)
            }
            Layout::Celery(o) => {
                Connected::Celery(CeleryBroker::connect(&self.dial, o.clone(), clk).await?)
            }
            Layout::Amqp(o) => {
                Connected::Amqp(AmqpBroker::connect(&self.dial, o.clone(), clk).await?)
            }
        };
        // Two first uses at once: the first stored wins, the other's
        // connection is dropped.
        if let Some(first) = self.made_on(clock) {
            return first;
        }
        *self.slot() = Some((made.clone(), clock.clone()));
        Ok(made)
    }

    /// The broker on the clock it serves (the system clock when it has not
    /// connected yet): for what needs a connection but no app.
    pub async fn connect_any(&self) -> Result<Connected, Refused> {
        let clock = self
            .slot()
            .as_ref()
            .map(|(_, c)| c.clone())
            .unwrap_or_else(clock::system);
        self.connect(&clock).await
    }

    /// Hands back what consumers whose lease (or visibility timeout) ran
    /// out were holding; answers how many went back.
    pub async fn recover(&self) -> Result<usize, Refused> {
        self.connect_any().await?.broker().recover().await
    }

    /// Lets go of this consumer's claims (see [`Connected::close`]); nothing
    /// to do when it never connected.
    pub async fn close(&self) -> Result<usize, Refused> {
        match self.connection() {
            Some(c) => c.close().await,
            None => Ok(0),
        }
    }
}

/// Where an app on `broker` keeps results when its `backend=` (named `arg`)
/// is the URL `text`, connected on `clock`.
///
/// Beside RabbitMQ the store is Celery's, so Celery's workers and clients
/// read the same results: `redis://` / `rediss://` is Celery's Redis result
/// backend (its keys and format, the Celery layout's store), and `rpc://`
/// Celery's RPC backend (results sent back to the caller over RabbitMQ).
/// Beside any other broker a URL means what [`Target::url`] says, and
/// `rpc://` is refused: it needs an AMQP broker to travel on.
pub async fn backend_store(
    arg: &str,
    text: &str,
    broker: &Connected,
    clock: &Arc<dyn Clock>,
) -> Result<Store, Refused> {
    let lower = text.to_ascii_lowercase();
    let rpc = lower == "rpc://" || lower.starts_with("rpc://");
    match broker {
        Connected::Amqp(a) if rpc => Ok(Store::In(Connected::Rpc(a.use_rpc().await?))),
        Connected::Amqp(_) if lower.starts_with("redis://") || lower.starts_with("rediss://") => {
            let t = Target::celery(text, None, None)?;
            Ok(Store::In(t.connect(clock).await?))
        }
        _ if rpc => Err(Refused::Invalid(format!(
            "invalid `{arg}`: rpc:// sends results over RabbitMQ; it needs an amqp:// broker"
        ))),
        _ => Ok(Store::In(Target::url(arg, text)?.connect(clock).await?)),
    }
}

/// An app on the broker `url` names with its own store, reading `clock`
/// (the system clock when `None`).
pub async fn open(url: &str, clock: Option<Arc<dyn Clock>>) -> Result<App, Refused> {
    let clock = clock.unwrap_or_else(clock::system);
    let c = Target::url("broker", url)?.connect(&clock).await?;
    Ok(c.app(&Store::Broker, clock))
}
