//! kombu's AMQP topology for Celery's queues, declared the way a Celery
//! app declares them, so either side may be first and neither's
//! declaration is refused by the other's.
//!
//! A Celery queue `q` is a durable classic queue bound to a durable direct
//! exchange of the same name with routing key `q` (the default queue
//! `celery` on the exchange `celery`; a queue Celery creates on demand,
//! `Queue(q, Exchange(q), q)`). Producers publish on the default exchange
//! `""` with the queue's name as the routing key, as Celery's
//! `send_task_message` does for a direct exchange. With a configured
//! `task_queue_max_priority`, every queue carries `x-max-priority`; both
//! sides must agree on it, since RabbitMQ refuses (406, and closes the
//! channel) a declaration whose arguments differ from the queue's.
//!
//! Remote control is kombu's pidbox: the non-durable fanout exchange
//! `celery.pidbox`, and per node an auto-delete queue
//! `<node>.celery.pidbox` (messages live 300 s, the queue 10 s after its
//! consumer left: Celery's `control_queue_ttl` and `control_queue_expires`).

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, ExchangeKind};

use super::options::AmqpUrl;
use crate::task::state::Refused;

/// The pidbox exchange Celery's remote control broadcasts on.
pub(super) const PIDBOX: &str = "celery.pidbox";

fn name(s: &str) -> Result<ShortString, Refused> {
    ShortString::try_new(s)
        .map_err(|_| Refused::Invalid(format!("invalid `queue` {s:?}: over AMQP's 255-byte names")))
}

/// Declares Celery queue `queue` (wire name): its exchange, the queue and
/// the binding.
pub(super) async fn declare_queue(
    ch: &Channel,
    url: &AmqpUrl,
    queue: &str,
    max_priority: Option<u8>,
) -> Result<(), Refused> {
    let q = name(queue)?;
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare(
        q.clone(),
        ExchangeKind::Direct,
        durable,
        FieldTable::default(),
    )
    .await
    .map_err(|e| super::conn::refused(url, &format!("cannot declare exchange {queue:?}"), &e))?;
    let mut args = FieldTable::default();
    // py-amqp writes a Python int that fits as a signed 32-bit `I`.
    if let Some(p) = max_priority {
        args.insert("x-max-priority".into(), AMQPValue::LongInt(p.into()));
    }
    ch.queue_declare(q.clone(), QueueDeclareOptions::durable(), args)
        .await
        .map_err(|e| {
            super::conn::refused(
                url,
                &format!(
                    "cannot declare queue {queue:?} (x-max-priority {max_priority:?}; a queue \
                     declared with other arguments must be deleted or matched)"
                ),
                &e,
            )
        })?;
    ch.queue_bind(
        q.clone(),
        q.clone(),
        q,
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .map_err(|e| super::conn::refused(url, &format!("cannot bind queue {queue:?}"), &e))?;
    Ok(())
}

/// Declares the pidbox exchange, and `node`'s pidbox queue bound to it
/// when `node` is given.
pub(super) async fn declare_pidbox(
    ch: &Channel,
    url: &AmqpUrl,
    node: Option<&str>,
) -> Result<(), Refused> {
    ch.exchange_declare(
        PIDBOX.into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .map_err(|e| super::conn::refused(url, "cannot declare the pidbox exchange", &e))?;
    let Some(node) = node else {
        return Ok(());
    };
    let q = name(&format!("{node}.{PIDBOX}"))?;
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(300_000));
    args.insert("x-expires".into(), AMQPValue::LongInt(10_000));
    let opts = QueueDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    ch.queue_declare(q.clone(), opts, args)
        .await
        .map_err(|e| super::conn::refused(url, "cannot declare the pidbox queue", &e))?;
    ch.queue_bind(
        q,
        PIDBOX.into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .map_err(|e| super::conn::refused(url, "cannot bind the pidbox queue", &e))?;
    Ok(())
}
