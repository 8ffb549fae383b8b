//! The process pool: bodies run in child processes the core starts,
//! supervises and replaces.
//!
//! Why processes: a Python body holds the GIL, so a worker on threads uses
//! one core for pure-Python work, and a thread cannot be stopped — a body
//! past its hard time limit, or terminated, keeps running. A child process
//! can be killed wherever it is, and N children use N cores. Celery's
//! default worker is prefork for both reasons; BullMQ's "sandboxed
//! processors" are the same idea for JS.
//!
//! The parent (the worker, in the core) claims, keeps leases, acks and
//! stores results exactly as on the threads pool; only the body moves. The
//! children are started fresh (`program args...`, given by the binding:
//! `python -m headway._child`, `node lib/child.js`), never forked from a
//! process that has a tokio runtime and a Python interpreter's threads, and
//! each imports the app itself. They take one run at a time over a socket
//! pair on fd 3 ([`wire`]), so stdout and stderr stay the body's.
//!
//! - [`pool`]: the parent's side (start, hand out, limits, replace, reap);
//! - [`spawn`]: one child process (start, `ready`, signal, reap);
//! - [`child`]: the child's side (serve runs through the app's host queue);
//! - [`wire`]: the frames between them.

pub mod child;
pub mod pool;
pub mod spawn;
pub mod wire;

pub use pool::{Idle, ProcSpec, Procs, TIME_LIMIT, WORKER_LOST, timed_out};
pub use spawn::{KILL_AFTER, STARTUP, describe, node_flags, rss_kib};
