//! Celery's `rpc://` result backend: a result is a message sent back to
//! the caller, not a record kept anywhere.
//!
//! Each producer has a reply queue named by its oid (the `reply_to` of
//! every message it sends; non-durable, auto-deleted, expiring after a day
//! unused, as Celery's `RPCBackend.binding`). A worker that settles a run
//! publishes the result meta (`{"task_id", "status", "result",
//! "traceback", "children", ...}`, Celery's result format) on the default
//! exchange to the run's `reply_to`, with `correlation_id` = the task id;
//! the caller reads its queue and keeps the latest state per id. So a
//! result goes only to the process that sent the task (another process's
//! `get()` of that id waits in vain, as with Celery), and nothing is kept
//! once the caller is gone. Chords need a store both sides can read; on
//! `rpc://` they are refused, as Celery refuses them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::broker::run_waits::RunWaits;
use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};

use super::super::celery::result;
use super::AmqpBroker;
use super::listen::{self, listen};
use crate::task::app::Seams;
use crate::task::clock::BoxFuture;
use crate::task::spec::Backend;
use crate::task::state::{Outcome, Refused};

/// How many results a caller keeps (oldest forgotten first).
const KEPT: usize = 100_000;

/// How long an unused reply queue lives: Celery's `result_expires`, 1 day.
const QUEUE_EXPIRES_MS: i32 = 86_400_000;

/// Results sent as messages to their caller's reply queue.
pub struct RpcStore {
    broker: Arc<AmqpBroker>,
    results: Mutex<(HashMap<String, Outcome>, VecDeque<String>)>,
    /// The waits on results, by run: a reply wakes only its own run's.
    waits: RunWaits,
}

impl std::fmt::Debug for RpcStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcStore")
            .field("queue", &self.broker.facts.sender.reply_to)
            .finish()
    }
}

impl RpcStore {
    /// The store of `broker`'s producer: its reply queue declared and read
    /// before this answers, so no result sent after it is lost.
    pub(super) async fn start(broker: &Arc<AmqpBroker>) -> Result<Arc<RpcStore>, Refused> {
        let store = Arc::new(RpcStore {
            broker: broker.clone(),
            results: Mutex::new(Default::default()),
            waits: RunWaits::default(),
        });
        let first = store.consumer().await?;
        tokio::spawn(listen(
            Arc::downgrade(&store),
            Some(first),
            RpcStore::heard,
            |s: Arc<RpcStore>| async move { s.consumer().await.ok() },
        ));
        Ok(store)
    }

    /// The seams its results are read from: the broker it rides on, this
    /// as the store, no chord counter.
    pub fn seams(self: &Arc<Self>) -> Seams {
        Seams {
            broker: self.broker.clone(),
            backend: Some(self.clone()),
            counter: None,
            inspector: Some(self.broker.clone()),
        }
    }

    /// The broker it rides on.
    pub fn broker(&self) -> &Arc<AmqpBroker> {
        &self.broker
    }

    async fn consumer(&self) -> Result<lapin::Consumer, Refused> {
        let b = &self.broker;
        let (_, ch) = b.conn.channel().await?;
        let url = b.conn.url().clone();
        let queue = b.facts.sender.reply_to.clone();
        let mut args = FieldTable::default();
        args.insert("x-expires".into(), AMQPValue::LongInt(QUEUE_EXPIRES_MS));
        let opts = QueueDeclareOptions {
            auto_delete: true,
            ..Default::default()
        };
        ch.queue_declare(queue.as_str().into(), opts, args)
            .await
            .map_err(|e| super::conn::refused(&url, "cannot declare the reply queue", &e))?;
        listen::unacked(&ch, &url, &queue, "cannot consume the reply queue").await
    }

    fn heard(&self, d: &lapin::message::Delivery) {
        let id = match d.properties.correlation_id() {
            Some(c) => c.to_string(),
            None => match serde_json::from_slice::<serde_json::Value>(&d.data)
                .ok()
                .and_then(|v| v.get("task_id")?.as_str().map(str::to_string))
            {
                Some(id) => id,
                None => return,
            },
        };
        let Ok(o) = result::decode_meta(&id, &d.data) else {
            self.broker
                .log(&format!("dropping a reply for {id:?} that cannot be read"));
            return;
        };
        let mut g = self.results.lock().unwrap_or_else(|e| e.into_inner());
        // A final state is never replaced (a late RETRY or STARTED).
        if g.0.get(&id).is_some_and(|old| old.state.is_final()) {
            return;
        }
        // Woken under the results' lock, which a wait takes to look: it
        // finds the result inserted below.
        self.waits.wake([id.as_str()]);
        if g.0.insert(id.clone(), o).is_none() {
            g.1.push_back(id);
            while g.1.len() > KEPT {
                if let Some(old) = g.1.pop_front() {
                    g.0.remove(&old);
                }
            }
        }
    }

    fn known(&self, id: &str) -> Option<Outcome> {
        let g = self.results.lock().unwrap_or_else(|e| e.into_inner());
        g.0.get(id).cloned()
    }

    async fn send(&self, outcomes: &[Outcome]) -> Result<(), Refused> {
        let b = &self.broker;
        let live = b.conn.live().await?;
        let url = b.conn.url().clone();
        let mut confirms = Vec::new();
        for o in outcomes {
            // A run whose caller is unknown (its message carried no
            // reply_to) has nobody to tell, as with Celery.
            let Some(to) = b.reply_to_of(&o.id) else {
                continue;
            };
            let Ok(cid) = lapin::types::ShortString::try_new(o.id.clone()) else {
                continue;
            };
            let body = result::encode_meta(o, None, None);
            let props = BasicProperties::default()
                .with_content_type("application/json".into())
                .with_content_encoding("utf-8".into())
                .with_delivery_mode(1)
                .with_correlation_id(cid);
            let c = live
                .publish
                .basic_publish(
                    "".into(),
                    to.as_str().into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    props,
                )
                .await
                .map_err(|e| {
                    b.conn.lost(live.epoch);
                    super::conn::refused(&url, "cannot send a result", &e)
                })?;
            confirms.push(c);
        }
        for c in confirms {
            c.await.map_err(|e| {
                b.conn.lost(live.epoch);
                super::conn::refused(&url, "lost before a result was confirmed", &e)
            })?;
        }
        Ok(())
    }
}

impl Backend for RpcStore {
    fn store(&self, outcomes: Vec<Outcome>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move { self.send(&outcomes).await })
    }

    /// An RPC result lives only in the caller that heard it: forgetting
    /// drops it there (Celery's RPC backend keeps nothing elsewhere).
    fn forget<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), Refused>> {
        let mut g = self.results.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            g.0.remove(id);
        }
        Box::pin(async { Ok(()) })
    }

    fn fetch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        Box::pin(async move { Ok(self.known(id)) })
    }

    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        let look = move || self.known(id).filter(|o| o.state.is_final());
        Box::pin(async move { Ok(self.waits.wait_final(id, timeout, look).await) })
    }
}
