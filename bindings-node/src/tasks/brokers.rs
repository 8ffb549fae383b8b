//! `RedisBroker`: headway's own Redis layout, or Celery's; and the seams an
//! app is built on.
//!
//! A `NativeRedis` holds the URL and options and connects on first use with
//! the clock of the app it is given to (the Redis scripts read the app's time
//! when it is virtual), so it can be built before the `App`. One broker
//! object serves one clock: an app on another clock is refused. The connect
//! happens inside `new App(...)`, which is synchronous in JS: it blocks the
//! event loop for the connect (a loopback Redis answers in a millisecond;
//! an unreachable one is refused after the core's 5 s connect timeout), as
//! Python's `App(...)` blocks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::broker::{MemoryBroker, RedisBroker, RedisOptions, RedisUrl};
use headway_core::task::{Broker, Clock, Refused, Seams};
use napi::bindgen_prelude::{Either, Either3};
use napi_derive::napi;

use super::dead::Raw;
use super::hub::{Answer, drive};
use super::time::{NativeClock, SYSTEM, same_clock};
use super::{Refusal, ms, rt};

#[derive(Clone)]
enum Kind {
    Native(RedisOptions),
    Celery(CeleryOptions),
}

#[derive(Clone)]
enum Connected {
    Native(Arc<RedisBroker>),
    Celery(Arc<CeleryBroker>),
}

impl Connected {
    fn seams(&self) -> Seams {
        match self {
            Connected::Native(b) => b.seams(),
            Connected::Celery(b) => b.seams(),
        }
    }

    fn broker(&self) -> Arc<dyn Broker> {
        match self {
            Connected::Native(b) => b.clone(),
            Connected::Celery(b) => b.clone(),
        }
    }
}

/// A broker, result store and chord counter on Redis (see `tasks.js`).
#[napi]
pub struct NativeRedis {
    url: String,
    shown: String,
    kind: Kind,
    connected: Mutex<Option<(Connected, Arc<dyn Clock>)>>,
}

fn shown_url(url: &str) -> Result<String, Refusal> {
    RedisUrl::parse(url)
        .map(|u| u.to_string())
        .map_err(Refusal::from)
}

impl NativeRedis {
    fn make(url: String, kind: Kind) -> Either<NativeRedis, Refusal> {
        match shown_url(&url) {
            Ok(shown) => Either::A(NativeRedis {
                url,
                shown,
                kind,
                connected: Mutex::new(None),
            }),
            Err(e) => Either::B(e),
        }
    }

    fn headway_defaults(url: String) -> Either<NativeRedis, Refusal> {
        NativeRedis::headway(url, None, None, None)
    }

    /// The connected broker for `clock`, connecting now (blocking) if needed.
    fn connection(&self, clock: &Arc<dyn Clock>) -> Result<Connected, Refusal> {
        if let Some((c, at)) = &*self.connected.lock().unwrap_or_else(|e| e.into_inner()) {
            if !same_clock(at, clock) {
                return Err(Refusal::invalid(
                    "this RedisBroker is already connected on another clock; build one per App",
                ));
            }
            return Ok(c.clone());
        }
        let rt = rt().map_err(|e| Refusal::invalid(e.reason.clone()))?;
        let url = self.url.clone();
        let clk = clock.clone();
        let made = match self.kind.clone() {
            Kind::Native(o) => rt
                .block_on(RedisBroker::connect(&url, o, clk))
                .map(Connected::Native),
            Kind::Celery(o) => rt
                .block_on(CeleryBroker::connect(&url, o, clk))
                .map(Connected::Celery),
        }
        .map_err(Refusal::from)?;
        let mut g = self.connected.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((c, _)) = &*g {
            return Ok(c.clone());
        }
        *g = Some((made.clone(), clock.clone()));
        Ok(made)
    }

    fn any_connection(&self) -> Result<Connected, Refusal> {
        let clock = self
            .connected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(_, c)| c.clone())
            .unwrap_or_else(|| SYSTEM.clone());
        self.connection(&clock)
    }

    fn seams_for(&self, clock: &Arc<dyn Clock>) -> Result<NativeSeams, Refusal> {
        let c = self.connection(clock)?;
        Ok(NativeSeams {
            inner: Mutex::new(Some(c.seams())),
            celery: match &c {
                Connected::Celery(b) => Some(b.clone()),
                Connected::Native(_) => None,
            },
            raw: Some(match &c {
                Connected::Native(b) => Raw::Native(b.clone()),
                Connected::Celery(b) => Raw::Celery(b.clone()),
            }),
        })
    }
}

#[napi]
impl NativeRedis {
    /// headway's own layout: `consumer` (host, pid and a random suffix when
    /// omitted), `prefix` (`"headway:"`), `lease` ms (30 s, BullMQ's lock
    /// duration). A dead consumer's claims come back within two leases: every
    /// live broker runs `recover()` once per lease.
    #[napi(catch_unwind)]
    pub fn headway(
        url: String,
        consumer: Option<String>,
        prefix: Option<String>,
        lease: Option<f64>,
    ) -> Either<NativeRedis, Refusal> {
        let d = RedisOptions::default();
        let lease = match lease {
            None => d.lease,
            Some(l) if ms(l) > 0 => Duration::from_millis(ms(l) as u64),
            Some(_) => return Either::B(Refusal::invalid("invalid `lease`: must be positive")),
        };
        let options = RedisOptions {
            consumer,
            prefix: prefix.unwrap_or(d.prefix.clone()),
            lease,
            recover_every: Some(lease),
            ..d
        };
        NativeRedis::make(url, Kind::Native(options))
    }

    /// Celery's layout and message format: `visibilityTimeout` ms (kombu's
    /// 3600 s when omitted).
    #[napi(catch_unwind)]
    pub fn celery(
        url: String,
        consumer: Option<String>,
        visibility_timeout: Option<f64>,
    ) -> Either<NativeRedis, Refusal> {
        let mut options = CeleryOptions {
            consumer,
            ..CeleryOptions::default()
        };
        if let Some(v) = visibility_timeout {
            if ms(v) <= 0 {
                return Either::B(Refusal::invalid(
                    "invalid `visibilityTimeout`: must be positive",
                ));
            }
            options.visibility_timeout = Duration::from_millis(ms(v) as u64);
        }
        NativeRedis::make(url, Kind::Celery(options))
    }

    /// The URL, password redacted.
    #[napi(getter)]
    pub fn url(&self) -> String {
        self.shown.clone()
    }

    /// `"headway"` or `"celery"`.
    #[napi(getter)]
    pub fn layout(&self) -> String {
        match self.kind {
            Kind::Native(_) => "headway".into(),
            Kind::Celery(_) => "celery".into(),
        }
    }

    /// The seams of an app on `clock` (connecting now if needed).
    #[napi(catch_unwind)]
    pub fn seams(&self, clock: &NativeClock) -> Either<NativeSeams, Refusal> {
        match self.seams_for(&clock.clock) {
            Ok(s) => Either::A(s),
            Err(e) => Either::B(e),
        }
    }

    /// Hands back what consumers whose lease (or visibility timeout) ran out
    /// were holding; answers how many went back.
    #[napi(catch_unwind)]
    pub fn recover(&self) -> napi::Result<Answer> {
        let b = match self.any_connection() {
            Ok(c) => c.broker(),
            Err(e) => return Ok(Either3::C(e)),
        };
        drive(
            async move { b.recover().await },
            |n| n.to_string(),
            |n| n.to_string(),
        )
    }

    /// Lets go of this consumer's claims so another takes them now, not after
    /// the lease: call it after the worker stopped.
    #[napi(catch_unwind)]
    pub fn close(&self) -> napi::Result<Answer> {
        let c = self
            .connected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(c, _)| c.clone());
        drive(
            async move {
                match c {
                    None => Ok::<usize, Refused>(0),
                    Some(Connected::Native(b)) => {
                        b.close().await;
                        Ok(0)
                    }
                    Some(Connected::Celery(b)) => b.close().await,
                }
            },
            |n| n.to_string(),
            |n| n.to_string(),
        )
    }
}

/// The seams an app is built on, consumed by `new NativeApp(seams, clock)`.
#[napi]
pub struct NativeSeams {
    inner: Mutex<Option<Seams>>,
    pub(crate) celery: Option<Arc<CeleryBroker>>,
    /// The concrete broker, for raw pushes (tests and tools).
    pub(crate) raw: Option<Raw>,
}

impl NativeSeams {
    /// Takes the seams out (an app owns them).
    pub(crate) fn take(&self) -> Option<Seams> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[napi]
impl NativeSeams {
    /// A fresh in-memory broker that is also its store, counter and
    /// inspector.
    #[napi(factory)]
    pub fn memory(clock: &NativeClock) -> Self {
        let b = MemoryBroker::new(clock.clock.clone());
        NativeSeams {
            inner: Mutex::new(Some(Seams {
                broker: b.clone(),
                backend: Some(b.clone()),
                counter: Some(b.clone()),
                inspector: Some(b.clone()),
            })),
            celery: None,
            raw: Some(Raw::Memory(b)),
        }
    }

    /// The seams a URL names: `memory://`, or `redis://` / `rediss://`
    /// (headway's layout, default options). `name` is the argument's, for
    /// the refusal.
    #[napi(catch_unwind)]
    pub fn url(url: String, name: String, clock: &NativeClock) -> Either<NativeSeams, Refusal> {
        let lower = url.to_ascii_lowercase();
        if lower == "memory://" || lower == "memory" {
            return Either::A(NativeSeams::memory(clock));
        }
        if lower.starts_with("redis://") || lower.starts_with("rediss://") {
            return match NativeRedis::headway_defaults(url) {
                Either::A(r) => match r.seams_for(&clock.clock) {
                    Ok(s) => Either::A(s),
                    Err(e) => Either::B(e),
                },
                Either::B(e) => Either::B(e),
            };
        }
        Either::B(Refusal::invalid(format!(
            "invalid `{name}`: {:?} is not memory://, redis:// or rediss://",
            redact(&url)
        )))
    }

    /// Keeps results and chord counts in `other`'s store instead.
    #[napi(js_name = "withBackend")]
    pub fn with_backend(&self, other: &NativeSeams) {
        let theirs = other.take();
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(mine), Some(theirs)) = (g.as_mut(), theirs) {
            mine.backend = theirs.backend;
            mine.counter = theirs.counter;
        }
    }

    /// Keeps no results (`get()` refuses with `MISSING`).
    #[napi(js_name = "withoutBackend")]
    pub fn without_backend(&self) {
        if let Some(s) = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            s.backend = None;
        }
    }
}

/// A URL-ish text with anything between `//` and `@` hidden.
fn redact(s: &str) -> String {
    match (s.find("//"), s.rfind('@')) {
        (Some(a), Some(b)) if b > a => format!("{}***{}", &s[..a + 2], &s[b..]),
        _ => s.to_string(),
    }
}
