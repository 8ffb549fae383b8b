//! The command connection: one multiplexed connection that reconnects with
//! headway's backoff, and the runner every command goes through.
//!
//! Why: a Redis restart must neither fail every call at once nor leave a
//! dead connection in use. A connection error drops the connection once
//! (per epoch), the next call dials again after a capped, jittered backoff,
//! and a patient call waits through a short outage (`patience`).

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, Client, Cmd, Pipeline, RedisError, Value};
use tokio::time::Instant;

use super::{RedisBroker, RedisUrl, log};
use crate::flow::{Backoff, MILLI};
use crate::task::policy::seeded;
use crate::task::state::Refused;

/// Connecting gives up after 2 s; a reply after 10 s (a stuck server or a
/// pipeline of thousands of scripts).
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call did not get an answer.
pub(super) enum Fail {
    /// The link is down and waiting out its backoff.
    Down(Refused, Instant),
    /// Redis (or the socket) answered an error on connection `epoch`.
    Redis(u64, RedisError),
}

pub(super) struct LinkState {
    pub(super) conn: Option<MultiplexedConnection>,
    pub(super) epoch: u64,
    pub(super) failures: i32,
    pub(super) retry_at: Option<Instant>,
}

/// One multiplexed connection that reconnects with headway's backoff.
pub(super) struct Link {
    pub(super) client: Client,
    pub(super) url: RedisUrl,
    pub(super) seed: String,
    pub(super) state: Mutex<LinkState>,
    pub(super) dial: tokio::sync::Mutex<()>,
    /// 50 ms doubling to 2 s (ioredis's default cap), full jitter (AWS,
    /// "Exponential Backoff and Jitter").
    pub(super) backoff: Backoff,
}

pub(super) fn conn_error(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}

impl Link {
    pub(super) fn lock(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn refused(&self, e: &RedisError) -> Refused {
        Refused::Broker(format!("{}: {}", self.url, self.url.scrub(&e.to_string())))
    }

    pub(super) async fn get(&self) -> Result<(u64, MultiplexedConnection), Fail> {
        if let Some(r) = self.ready() {
            return r;
        }
        let _dial = self.dial.lock().await;
        if let Some(r) = self.ready() {
            return r;
        }
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let made = self
            .client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await;
        let mut s = self.lock();
        match made {
            Ok(c) => {
                s.epoch += 1;
                if s.failures > 0 {
                    log(&format!(
                        "{}: reconnected after {} attempt(s); resuming",
                        self.url, s.failures
                    ));
                }
                s.failures = 0;
                s.retry_at = None;
                s.conn = Some(c.clone());
                Ok((s.epoch, c))
            }
            Err(e) => {
                s.failures = s.failures.saturating_add(1);
                let wait = self
                    .backoff
                    .delay(s.failures, seeded(&self.seed, s.failures as u32), 0);
                let at = Instant::now() + Duration::from_nanos(wait as u64);
                s.retry_at = Some(at);
                let why = self.refused(&e);
                log(&format!(
                    "{why}; cannot connect, next attempt in {} ms",
                    wait / MILLI
                ));
                Err(Fail::Down(why, at))
            }
        }
    }

    pub(super) fn ready(&self) -> Option<Result<(u64, MultiplexedConnection), Fail>> {
        let s = self.lock();
        if let Some(c) = &s.conn {
            return Some(Ok((s.epoch, c.clone())));
        }
        match s.retry_at {
            Some(at) if Instant::now() < at => Some(Err(Fail::Down(
                Refused::Broker(format!(
                    "{}: unreachable; reconnecting in {} ms",
                    self.url,
                    at.saturating_duration_since(Instant::now()).as_millis()
                )),
                at,
            ))),
            _ => None,
        }
    }

    /// Drops connection `epoch` after a connection error, once.
    pub(super) fn broken(&self, epoch: u64, e: &RedisError) {
        let mut s = self.lock();
        if s.epoch == epoch && s.conn.is_some() {
            s.conn = None;
            s.failures = s.failures.max(1);
            log(&format!(
                "{}; connection lost, reconnecting",
                self.refused(e)
            ));
        }
    }
}

impl RedisBroker {
    /// Runs a pipeline and answers its replies. NOSCRIPT (a restarted Redis)
    /// reloads the scripts and runs it again; a connection error drops the
    /// connection, and with `patient` the call waits for the link to come
    /// back for up to `patience`. Every error is shown with the URL redacted.
    pub(super) async fn run(&self, p: &Pipeline, patient: bool) -> Result<Vec<Value>, Refused> {
        let start = Instant::now();
        let mut reloaded = false;
        loop {
            let fail = match self.link.get().await {
                Ok((epoch, mut c)) => match p.query_async::<Vec<Value>>(&mut c).await {
                    Ok(v) => return Ok(v),
                    Err(e) if e.code() == Some("NOSCRIPT") && !reloaded => {
                        reloaded = true;
                        match self.load_scripts(&mut c).await {
                            Ok(()) => continue,
                            Err(e) => Fail::Redis(epoch, e),
                        }
                    }
                    Err(e) => Fail::Redis(epoch, e),
                },
                Err(f) => f,
            };
            let (why, retry_at) = match fail {
                Fail::Down(why, at) => (why, at),
                Fail::Redis(epoch, e) => {
                    let lost = conn_error(&e);
                    if !lost && e.code() != Some("LOADING") {
                        return Err(self.link.refused(&e));
                    }
                    if lost {
                        self.link.broken(epoch, &e);
                    }
                    (
                        self.link.refused(&e),
                        Instant::now() + Duration::from_millis(50),
                    )
                }
            };
            let deadline = start + self.patience;
            if !patient || Instant::now() >= deadline {
                return Err(why);
            }
            let at = retry_at
                .min(deadline)
                .max(Instant::now() + Duration::from_millis(5));
            tokio::time::sleep_until(at).await;
            if at >= deadline {
                // One last attempt before raising, whatever the backoff
                // says: Redis may have come back since the last one.
                self.link.lock().retry_at = None;
            }
        }
    }

    pub(super) async fn one(&self, c: Cmd, patient: bool) -> Result<Value, Refused> {
        let mut p = ::redis::pipe();
        p.add_command(c);
        Ok(self.run(&p, patient).await?.pop().unwrap_or(Value::Nil))
    }
}
