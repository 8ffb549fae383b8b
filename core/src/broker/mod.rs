//! Brokers: where messages wait, who holds them, where results are kept.
//!
//! Each implements the seams of [`crate::task::spec`]. `memory` is in-process
//! (tests, a single service that wants a queue without a server); `redis` is
//! headway's own Redis layout (see `docs/redis-layout.md`); `celery` is
//! Celery's Redis layout; `amqp` is RabbitMQ on Celery's AMQP topology;
//! `link` is the Redis plumbing (reconnecting
//! connection, patient retries, pub/sub waiters) the Redis layouts share,
//! `dead` how both read a dead letter back, `options` the limits both take,
//! and `error` what kind of broker failure a Redis error is. `target` is
//! what a `broker=` argument means: the one place a URL's scheme picks one
//! of them.

pub mod amqp;
pub mod celery;
mod dead;
pub mod error;
pub mod link;
mod lua;
pub mod memory;
mod options;
pub mod raw;
pub mod redis;
mod run_waits;
pub mod target;

pub use amqp::{AmqpBroker, AmqpOptions};
pub use memory::{MemoryBroker, MemoryOptions};
pub use raw::Raw;
pub use redis::{RedisBroker, RedisOptions, RedisUrl, Topology, Wait};
pub use target::{Connected, Layout, Store, Target, TargetError, redact};
