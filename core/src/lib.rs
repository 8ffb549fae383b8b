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
//! drift apart. The public API, beside the bindings', is in `docs/api.md`.
//!
//! Flow control is told the time (`now`, nanoseconds) and given its draws:
//!
//! ```
//! use headway_core::flow::{Limits, Pool, SECOND, Taken};
//!
//! let mut pool: Pool<u32> = Pool::new(Limits::default(), None);
//! assert!(matches!(pool.take(0, 0.5), Taken::Make));
//! pool.made(7, 0); // opened: lent, born at 0
//! assert!(pool.give(7, SECOND)); // kept idle
//! assert!(matches!(pool.take(2 * SECOND, 0.5), Taken::Ready(7)));
//! ```
//!
//! The task queue runs on the crate's tokio runtime:
//!
//! ```
//! use std::time::Duration;
//! use headway_core::task::{App, Options, Policy, WorkerConfig, body};
//! use serde_json::{Map, json};
//!
//! headway_core::runtime::runtime().unwrap().block_on(async {
//!     let app = App::memory(None);
//!     let add = body(|_ctx, args| async move {
//!         Ok(json!(args[0].as_i64().unwrap_or(0) + args[1].as_i64().unwrap_or(0)))
//!     });
//!     app.register("add", Policy::default(), add)?;
//!     let worker = app.worker(WorkerConfig::default())?;
//!     let running = tokio::spawn({
//!         let worker = worker.clone();
//!         async move { worker.run().await }
//!     });
//!     let args = vec![json!(2), json!(3)];
//!     let handle = app.send("add", args, Map::new(), Options::default()).await?;
//!     assert_eq!(handle.get(Some(Duration::from_secs(5))).await?, json!(5));
//!     worker.stop(Duration::from_secs(1));
//!     running.await.unwrap()?;
//!     Ok::<(), headway_core::task::Refused>(())
//! })
//! .unwrap();
//! ```

pub mod admin;
pub mod broker;
pub mod flow;
mod hashed;
pub mod limit;
pub mod log;
pub mod runtime;
pub mod task;
