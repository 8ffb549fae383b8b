//! headway-core: all of headway's logic, with no Python or Node in it.
//!
//! Two halves:
//! - [`flow`]: flow control, sans-I/O. A pool bookkeeper with a ward in front
//!   of making, backoff with four jitters, a token bucket, an exact sliding
//!   window and a concurrency gate. Time and randomness are passed in, so every
//!   sequence is reproducible and a test drives an hour in three lines.
//! - [`task`] and [`broker`]: a task queue — apps, workers, retries, canvas and
//!   beat — on an in-memory broker, on Redis, and on Celery's own Redis layout.
//!
//! The bindings (`bindings-python`, `bindings-node`) convert values, map errors
//! and bridge their runtimes; every rule lives here so the two languages cannot
//! drift apart.

pub mod admin;
pub mod broker;
pub mod flow;
pub mod log;
pub mod runtime;
pub mod task;
