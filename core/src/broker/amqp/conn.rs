//! The connection to RabbitMQ, made again after it is lost.
//!
//! One lapin connection at a time, numbered by an epoch: a delivery tag is
//! only meaningful on the channel that delivered it, so a receipt carries
//! the epoch it was delivered under and a settle for an older epoch is
//! dropped (RabbitMQ put that message back when the old channel closed).
//! A failed dial waits out the core's [`Backoff`] (100 ms doubling to 5 s,
//! jittered) before the next, so a broker that is down is not hammered,
//! and a caller meanwhile is refused at once with when the next try is.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use lapin::options::ConfirmSelectOptions;
use lapin::{Channel, Connection, ConnectionProperties};

use super::options::AmqpUrl;
use crate::flow::{Backoff, Jitter, MILLI};
use crate::task::BrokerErrorKind;
use crate::task::state::Refused;

/// The live connection: its epoch, and its publishing channel (publisher
/// confirms on).
#[derive(Clone)]
pub(super) struct Live {
    pub epoch: u64,
    pub conn: std::sync::Arc<Connection>,
    pub publish: Channel,
}

#[derive(Default)]
struct State {
    live: Option<Live>,
    epoch: u64,
    failures: i32,
    retry_at: Option<Instant>,
}

pub(super) struct Conn {
    url: AmqpUrl,
    label: String,
    backoff: Backoff,
    state: Mutex<State>,
    dial: tokio::sync::Mutex<()>,
}

/// A channel with publisher confirms on.
async fn publish_channel(url: &AmqpUrl, conn: &Connection) -> Result<Channel, Refused> {
    let publish = conn
        .create_channel()
        .await
        .map_err(|e| refused(url, "cannot open a channel", &e))?;
    publish
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| refused(url, "cannot turn on publisher confirms", &e))?;
    Ok(publish)
}

/// Why a lapin call failed, as a broker refusal naming `what`.
pub(super) fn refused(url: &AmqpUrl, what: &str, e: &lapin::Error) -> Refused {
    let kind = match e.kind() {
        lapin::ErrorKind::ProtocolError(_) => BrokerErrorKind::Server,
        _ => BrokerErrorKind::Connection,
    };
    Refused::broker(kind, format!("{url}: {what}: {e}"))
}

impl Conn {
    pub fn new(url: AmqpUrl, label: String) -> Conn {
        Conn {
            url,
            label,
            backoff: Backoff::new(100 * MILLI, 2.0, 5_000 * MILLI, i32::MAX, Jitter::Full)
                .expect("a valid backoff"),
            state: Mutex::new(State::default()),
            dial: tokio::sync::Mutex::new(()),
        }
    }

    pub fn url(&self) -> &AmqpUrl {
        &self.url
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ready(&self) -> Option<Result<Live, Refused>> {
        let s = self.lock();
        if let Some(l) = &s.live
            && l.conn.status().connected()
            && l.publish.status().connected()
        {
            return Some(Ok(l.clone()));
        }
        match s.retry_at {
            Some(at) if Instant::now() < at => Some(Err(Refused::broker(
                BrokerErrorKind::Connection,
                format!(
                    "{}: unreachable; reconnecting in {} ms",
                    self.url,
                    at.saturating_duration_since(Instant::now()).as_millis()
                ),
            ))),
            _ => None,
        }
    }

    /// The live connection, dialling when there is none and the backoff
    /// allows.
    pub async fn live(&self) -> Result<Live, Refused> {
        if let Some(r) = self.ready() {
            return r;
        }
        let _dial = self.dial.lock().await;
        if let Some(r) = self.ready() {
            return r;
        }
        // A connection that lives on with a dead publishing channel (a
        // declaration RabbitMQ refused closes only the channel) gets a new
        // channel, not a new connection: its consumers keep going.
        let alive = self
            .lock()
            .live
            .clone()
            .filter(|l| l.conn.status().connected());
        if let Some(l) = alive {
            let publish = publish_channel(&self.url, &l.conn).await?;
            let mut s = self.lock();
            let live = Live { publish, ..l };
            s.live = Some(live.clone());
            return Ok(live);
        }
        let made = self.dial_once().await;
        let mut s = self.lock();
        match made {
            Ok((conn, publish)) => {
                s.epoch += 1;
                if s.failures > 0 {
                    crate::task::metrics::reconnected();
                    self.log(&format!(
                        "{}: reconnected after {} attempt(s); resuming",
                        self.url, s.failures
                    ));
                }
                s.failures = 0;
                s.retry_at = None;
                let live = Live {
                    epoch: s.epoch,
                    conn: std::sync::Arc::new(conn),
                    publish,
                };
                s.live = Some(live.clone());
                Ok(live)
            }
            Err(e) => {
                s.failures = s.failures.saturating_add(1);
                let u = (s.failures as f64 * 0.618_033_988_75).fract();
                let wait = self.backoff.delay(s.failures, u, 0);
                s.retry_at = Some(Instant::now() + Duration::from_nanos(wait.max(0) as u64));
                s.live = None;
                self.log(&format!(
                    "{}; cannot connect, next attempt in {} ms",
                    e,
                    wait / MILLI
                ));
                Err(e)
            }
        }
    }

    async fn dial_once(&self) -> Result<(Connection, Channel), Refused> {
        let props = ConnectionProperties::default().with_connection_name(self.label.clone().into());
        let conn = tokio::time::timeout(
            Duration::from_secs(10),
            Connection::connect_uri(self.url.uri(), props),
        )
        .await
        .map_err(|_| {
            Refused::broker(
                BrokerErrorKind::Connection,
                format!("{}: unreachable: no answer in 10 s", self.url),
            )
        })?
        .map_err(|e| refused(&self.url, "unreachable", &e))?;
        let publish = publish_channel(&self.url, &conn).await?;
        Ok((conn, publish))
    }

    /// A call on the connection of `epoch` failed: drop it (when it is
    /// still the live one and is down) so the next call dials again; one
    /// whose connection is up only needs a new publishing channel, which
    /// the next call opens.
    pub fn lost(&self, epoch: u64) {
        let mut s = self.lock();
        if s.live
            .as_ref()
            .is_some_and(|l| l.epoch == epoch && !l.conn.status().connected())
        {
            s.live = None;
        }
    }

    /// A fresh channel on the live connection.
    pub async fn channel(&self) -> Result<(u64, Channel), Refused> {
        let live = self.live().await?;
        match live.conn.create_channel().await {
            Ok(c) => Ok((live.epoch, c)),
            Err(e) => {
                self.lost(live.epoch);
                Err(refused(&self.url, "cannot open a channel", &e))
            }
        }
    }

    /// Closes the connection (a broker being closed).
    pub async fn close(&self) {
        let live = self.lock().live.take();
        if let Some(l) = live {
            let _ = l.conn.close(200, "bye".into()).await;
        }
    }

    pub fn log(&self, what: &str) {
        crate::log::emit(
            crate::log::Level::Warn,
            "headway.amqp",
            crate::log::About::worker(&self.label),
            format_args!("{}: {what}", self.label),
        );
    }
}
