//! Stopping gracefully, and giving a message back.
//!
//! A stop must lose nothing the worker holds: prefetched messages go back
//! at once, runs in progress get the grace, and what is still running after
//! it is cancelled and given back too. Giving back depends on whether the
//! message was already acked (early ack), hence one helper for every path
//! that hands a message on.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{Shared, Worker};
use crate::task::app::App;
use crate::task::message::Message;
use crate::task::spec::Receipt;
use crate::task::state::Refused;

impl Worker {
    /// Stops claiming, gives prefetched messages back, waits up to `grace`
    /// for runs in progress, then cancels and gives back the rest. Returns at
    /// once; `run` resolves when it is all done.
    pub fn stop(&self, grace: Duration) {
        *self.shared.grace.lock().unwrap_or_else(|e| e.into_inner()) = grace;
        self.shared.stopping.send_replace(true);
        self.shared.woken.notify_waiters();
    }
}

/// Once the claim loop has stopped: prefetched messages go back at once
/// (each run sees `stopping` while it waits for a slot); runs in progress
/// get the grace, then are cancelled (and give their messages back).
pub(super) async fn wind_down(s: &Shared, set: &mut JoinSet<()>) {
    let grace = *s.grace.lock().unwrap_or_else(|e| e.into_inner());
    let drained =
        tokio::time::timeout(grace, async { while set.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        s.cancel.send_replace(true);
        while set.join_next().await.is_some() {}
    }
}

/// Resolves once the flag is true (at once if it already is).
pub(super) async fn wait_true(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Gives a message back for another worker: a claim not yet acked is
/// rejected onto its queue; one acked early is published again.
pub(super) async fn give_back(
    app: &App,
    m: &Message,
    receipt: Receipt,
    acked: bool,
) -> Result<(), Refused> {
    if acked {
        app.broker().publish(vec![m.clone()]).await
    } else {
        app.broker().reject(receipt, true).await
    }
}
