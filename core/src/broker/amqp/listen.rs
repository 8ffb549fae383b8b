//! A consumer read for as long as its owner lives: the pidbox queue
//! (`revoke.rs`) and the rpc backend's reply queue (`rpc.rs`) both read
//! one, without acks, and make it again after a lost connection.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::BasicConsumeOptions;
use lapin::types::FieldTable;

use super::AmqpUrl;
use crate::task::state::Refused;

/// A consumer of `queue` on `ch` without acks: what it reads is gone from
/// the queue once sent, as kombu reads a pidbox and Celery its reply queue.
/// Refused as `what` went wrong (`cannot consume the pidbox`).
pub(super) async fn unacked(
    ch: &lapin::Channel,
    url: &AmqpUrl,
    queue: &str,
    what: &str,
) -> Result<lapin::Consumer, Refused> {
    ch.basic_consume(
        queue.into(),
        "".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .map_err(|e| super::conn::refused(url, what, &e))
}

/// Reads `consumer` until `me` is dropped, handing each delivery to
/// `heard`; after a lost connection, asks `again` for a new consumer,
/// waiting 100 ms doubling to 6.4 s between failed attempts. The owner is
/// looked at least once a second, so a dropped one ends this promptly.
pub(super) async fn listen<T, F, Fut>(
    me: Weak<T>,
    mut consumer: Option<lapin::Consumer>,
    heard: fn(&T, &Delivery),
    again: F,
) where
    F: Fn(Arc<T>) -> Fut,
    Fut: Future<Output = Option<lapin::Consumer>>,
{
    let mut failures = 0u32;
    loop {
        if let Some(mut c) = consumer.take() {
            failures = 0;
            loop {
                let next = tokio::time::timeout(Duration::from_secs(1), c.next()).await;
                let Some(owner) = me.upgrade() else {
                    return;
                };
                match next {
                    Err(_) => {}
                    Ok(Some(Ok(d))) => heard(&owner, &d),
                    Ok(_) => break,
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100u64 << failures.min(6))).await;
        let Some(owner) = me.upgrade() else {
            return;
        };
        consumer = again(owner).await;
        if consumer.is_none() {
            failures += 1;
        }
    }
}
