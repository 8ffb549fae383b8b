//! What an admin page or a test reads about RabbitMQ: each queue this
//! broker declared or consumed, its ready messages as RabbitMQ counts them
//! (a passive `queue.declare`), and — as on Celery's Redis layout — the
//! etas this consumer holds and what it delivered and nobody settled yet;
//! result counts are the Redis store's, when there is one.

use std::collections::BTreeMap;

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

use super::AmqpBroker;
use crate::task::clock::BoxFuture;
use crate::task::spec::{Inspector, QueueInfo, RunEvent};
use crate::task::state::{Refused, State};

impl AmqpBroker {
    /// Remembers Celery queue `wire` for the inspector.
    pub(super) fn remember_queue(&self, wire: &str) {
        let mut g = self.lock();
        if !g.queues.contains(wire) {
            g.queues.insert(wire.to_string());
        }
    }
}

impl Inspector for AmqpBroker {
    fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueInfo>, Refused>> {
        Box::pin(async move {
            let names: Vec<String> = self.lock().queues.iter().cloned().collect();
            if names.is_empty() {
                return Ok(Vec::new());
            }
            // A passive declare of a queue deleted meanwhile closes its
            // channel (404): one channel for the asking, made per call.
            let (_, ch) = self.conn.channel().await?;
            let mut out = Vec::with_capacity(names.len());
            for wire in names {
                let ready = match ch
                    .queue_declare(
                        wire.as_str().into(),
                        QueueDeclareOptions::default().passive(),
                        FieldTable::default(),
                    )
                    .await
                {
                    Ok(q) => q.message_count() as u64,
                    Err(_) => break,
                };
                let name = self.facts.sender.model_queue(&wire);
                let g = self.lock();
                let (mut delayed, mut unacked) = (0u64, 0u64);
                for gr in g.groups.values() {
                    delayed += gr.held.values().filter(|d| d.message.queue == name).count() as u64;
                    unacked += gr.inbox.iter().filter(|d| d.message.queue == name).count() as u64;
                }
                let mut r = BTreeMap::new();
                if ready > 0 {
                    r.insert(0u8, ready);
                }
                out.push(QueueInfo {
                    name,
                    ready: r,
                    delayed,
                    unacked,
                });
            }
            let _ = ch.close(200, "inspected".into()).await;
            out.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(out)
        })
    }

    /// A run's start too while Celery's task events are on
    /// (`task-started`).
    fn wants_run_starts(&self) -> bool {
        self.facts.celeryev.is_on()
    }

    /// Run events become Celery's events (when on); RabbitMQ keeps no log
    /// of them.
    fn record(&self, events: Vec<RunEvent>) -> BoxFuture<'_, Result<(), Refused>> {
        crate::broker::celery::events::runs(self, &events);
        Box::pin(async { Ok(()) })
    }

    fn counts(&self) -> BoxFuture<'_, Result<BTreeMap<State, u64>, Refused>> {
        Box::pin(async move {
            match self.store() {
                Some(s) => Inspector::counts(&*s).await,
                None => Ok(BTreeMap::new()),
            }
        })
    }
}
