//! `RedisBroker` (headway's own Redis layout, or Celery's) and the broker an
//! app is built on.
//!
//! The core's `Target` decides what a URL means, connects once on the clock
//! of the first app that uses it and refuses another; this converts JS
//! values (ms as numbers) and maps the refusals. The connect happens inside
//! `new App(...)`, which is synchronous in JS: it blocks the event loop for
//! the connect (a loopback Redis answers in a millisecond; an unreachable
//! one is refused after the core's 5 s connect timeout), as Python's
//! `App(...)` blocks.

use std::sync::{Arc, Mutex};

use headway_core::broker::target::backend_store;
use headway_core::broker::{Connected, Store, Target, TargetError};
use headway_core::task::{Clock, Host};
use napi::bindgen_prelude::Either;
use napi_derive::napi;

use super::hub::{Answer, drive, json};
use super::time::NativeClock;
use super::{Refusal, either, lock, ms, rt};

/// A refused target, its option named as JS spells it (the core's
/// `Host::target_refused`).
fn refusal(e: TargetError) -> Refusal {
    Refusal::invalid(Host::Node.target_refused(&e))
}

fn made(r: Result<Target, TargetError>) -> Either<NativeRedis, Refusal> {
    either(r.map(|target| NativeRedis { target }).map_err(refusal))
}

/// The core's runtime, for a blocking connect.
fn runtime() -> Result<&'static tokio::runtime::Runtime, Refusal> {
    rt().map_err(|e| Refusal::invalid(e.reason.clone()))
}

/// The broker `target` names, connected (blocking) on `clock`.
fn connect(target: &Target, clock: &Arc<dyn Clock>) -> Result<NativeSeams, Refusal> {
    let on = runtime()?.block_on(target.connect(clock))?;
    Ok(NativeSeams {
        inner: Mutex::new(Some((on, Store::Broker))),
    })
}

/// A broker, result store and chord counter on Redis (see `lib/brokers.js`).
#[napi]
pub struct NativeRedis {
    target: Target,
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
        made(Target::headway(&url, consumer, prefix, lease.map(ms)))
    }

    /// Celery's layout and message format: `visibilityTimeout` ms (kombu's
    /// 3600 s when omitted); `taskSendSentEvent`: a `task-sent` event for
    /// each message sent (Celery's `task_send_sent_event`); `masterName`:
    /// with Celery's Sentinel URL, the master the sentinels watch.
    #[napi(catch_unwind)]
    pub fn celery(
        url: String,
        consumer: Option<String>,
        visibility_timeout: Option<f64>,
        task_send_sent_event: Option<bool>,
        master_name: Option<String>,
    ) -> Either<NativeRedis, Refusal> {
        made(
            Target::celery_on(
                &url,
                master_name.as_deref(),
                consumer,
                visibility_timeout.map(ms),
            )
            .map(|t| t.task_send_sent_event(task_send_sent_event.unwrap_or(false))),
        )
    }

    /// The URL, password redacted.
    #[napi(getter)]
    pub fn url(&self) -> String {
        self.target.shown().to_string()
    }

    /// `"headway"` or `"celery"`.
    #[napi(getter)]
    pub fn layout(&self) -> String {
        self.target.layout().name().into()
    }

    /// The seams of an app on `clock` (connecting now if needed).
    #[napi(catch_unwind)]
    pub fn seams(&self, clock: &NativeClock) -> Either<NativeSeams, Refusal> {
        either(connect(&self.target, &clock.clock))
    }

    /// Hands back what consumers whose lease (or visibility timeout) ran out
    /// were holding; answers how many went back.
    #[napi(catch_unwind)]
    pub fn recover(&self) -> napi::Result<Answer> {
        let t = self.target.clone();
        drive(async move { t.recover().await }, json)
    }

    /// Lets go of this consumer's claims so another takes them now, not after
    /// the lease: call it after the worker stopped.
    #[napi(catch_unwind)]
    pub fn close(&self) -> napi::Result<Answer> {
        let t = self.target.clone();
        drive(async move { t.close().await }, json)
    }
}

/// The broker an app is built on and where it keeps results, consumed by
/// `new NativeApp(seams, clock)`.
#[napi]
pub struct NativeSeams {
    inner: Mutex<Option<(Connected, Store)>>,
}

impl NativeSeams {
    /// Takes them out (an app owns them).
    pub(crate) fn take(&self) -> Option<(Connected, Store)> {
        lock(&self.inner).take()
    }

    /// Keeps results in `s` (while they are not yet an app's).
    fn keep_in(&self, s: Store) {
        if let Some((_, store)) = lock(&self.inner).as_mut() {
            *store = s;
        }
    }
}

#[napi]
impl NativeSeams {
    /// The seams a URL names (the core's `Target::url_or_default`: none,
    /// the core's default broker). `name` is the argument's, for the
    /// refusal.
    #[napi(catch_unwind)]
    pub fn url(
        url: Option<String>,
        name: String,
        clock: &NativeClock,
    ) -> Either<NativeSeams, Refusal> {
        either(
            Target::url_or_default(&name, url.as_deref())
                .map_err(refusal)
                .and_then(|t| connect(&t, &clock.clock)),
        )
    }

    /// Keeps results and chord counts in `other`'s store instead.
    #[napi(js_name = "withBackend")]
    pub fn with_backend(&self, other: &NativeSeams) {
        if let Some((theirs, _)) = other.take() {
            self.keep_in(Store::In(theirs));
        }
    }

    /// Keeps results where the `backend` URL `url` says beside this broker
    /// (the core's `backend_store`: beside RabbitMQ, `redis://` is Celery's
    /// Redis result store and `rpc://` Celery's RPC backend), connecting
    /// now on `clock`.
    #[napi(js_name = "withBackendUrl", catch_unwind)]
    pub fn with_backend_url(&self, url: String, clock: &NativeClock) -> Option<Refusal> {
        let go = || -> Result<(), Refusal> {
            let on = lock(&self.inner).as_ref().map(|(on, _)| on.clone());
            let on = on.ok_or_else(|| Refusal::invalid("these seams were already used"))?;
            let store = runtime()?.block_on(backend_store("backend", &url, &on, &clock.clock))?;
            self.keep_in(store);
            Ok(())
        };
        go().err()
    }

    /// Keeps no results (`get()` refuses with `MISSING`).
    #[napi(js_name = "withoutBackend")]
    pub fn without_backend(&self) {
        self.keep_in(Store::Nowhere);
    }
}
