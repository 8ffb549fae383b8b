//! The child's side: take runs from the parent, one at a time, and answer.
//!
//! A host starts this after importing the app (so every task is registered)
//! and serves the app's calls as a worker's host would: the body runs through
//! the same [`HostQueue`](crate::task::HostQueue) as on the threads pool, so
//! arguments, results and failures cross the same way in both pools. When the
//! parent closes the socket (it retired this child, it stopped, or it died)
//! `serve` returns and the host exits.
//!
//! A host whose bodies can run on the thread that reads the socket (a
//! Python child: sync bodies on its main thread) uses the blocking [`Conn`]
//! instead, and keeps soft limits with a [`SoftTimer`]: no hop between
//! threads inside the child, which is two wake-ups of the four a run costs
//! (measured: the process pool's no-op drain is bounded by them on two
//! cores).

use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream as StdStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use tokio::net::UnixStream;

use super::wire::{self, FromChild, ToChild};
use crate::task::app::App;
use crate::task::state::Failure;

/// The fd a child finds its socket on.
pub const CHILD_FD: RawFd = 3;

/// Serves the parent on fd [`CHILD_FD`] until it closes the socket.
///
/// # Safety
/// The fd must be the socket the parent passed and owned by nothing else.
pub async unsafe fn serve_fd(app: App) -> std::io::Result<()> {
    // SAFETY: the caller vouches that fd 3 is the parent's socket.
    let std = unsafe { StdStream::from_raw_fd(CHILD_FD) };
    std.set_nonblocking(true)?;
    serve(app, UnixStream::from_std(std)?).await
}

/// A run the parent handed over.
#[derive(Debug)]
pub struct Job {
    pub seq: u64,
    pub key: String,
    pub ctx: crate::task::body::Context,
    pub args: Vec<serde_json::Value>,
}

/// The child's end of the socket, read and written blocking.
pub struct Conn {
    stream: StdStream,
}

impl Conn {
    /// The socket on fd [`CHILD_FD`], after saying `ready`.
    ///
    /// # Safety
    /// The fd must be the socket the parent passed and owned by nothing else.
    pub unsafe fn open() -> std::io::Result<Conn> {
        // SAFETY: the caller vouches that fd 3 is the parent's socket.
        let stream = unsafe { StdStream::from_raw_fd(CHILD_FD) };
        stream.set_nonblocking(false)?;
        let mut conn = Conn { stream };
        wire::write_blocking(
            &mut conn.stream,
            &FromChild::Ready {
                pid: std::process::id(),
            },
        )?;
        Ok(conn)
    }

    /// The next run, or `None` once the parent closed the socket.
    pub fn take(&mut self) -> std::io::Result<Option<Job>> {
        Ok(
            wire::read_blocking::<_, ToChild>(&mut self.stream)?.map(|m| {
                let ToChild::Call {
                    seq,
                    key,
                    ctx,
                    args,
                } = m;
                Job {
                    seq,
                    key,
                    ctx,
                    args,
                }
            }),
        )
    }

    /// Answers run `seq`.
    pub fn answer(
        &mut self,
        seq: u64,
        r: Result<serde_json::Value, Failure>,
    ) -> std::io::Result<()> {
        let (ok, err) = match r {
            Ok(v) => (Some(v), None),
            Err(f) => (None, Some(f)),
        };
        wire::write_blocking(&mut self.stream, &FromChild::Done { seq, ok, err })
    }
}

/// The failure of a run whose task the child does not have.
pub fn not_registered(key: &str) -> Failure {
    Failure::new(
        "NotRegistered",
        format!("no task is registered as {key:?} in the child process"),
    )
}

/// Fires a callback for a run once its soft limit passes, on a thread of its
/// own, unless the run was disarmed first — for a host that runs bodies on
/// the thread reading the socket, where nothing else is awake to time them.
pub struct SoftTimer {
    state: Arc<Armed>,
}

/// The run being timed and when its soft limit passes, and the bell the
/// timer thread waits on.
type Armed = (Mutex<Option<(u64, Instant)>>, Condvar);

impl SoftTimer {
    /// A timer calling `fire(seq)` from its thread.
    pub fn new(fire: impl Fn(u64) + Send + 'static) -> std::io::Result<SoftTimer> {
        let state = std::sync::Arc::new((std::sync::Mutex::new(None), std::sync::Condvar::new()));
        let st = std::sync::Arc::downgrade(&state);
        std::thread::Builder::new()
            .name("headway-soft".into())
            .spawn(move || {
                loop {
                    let Some(st) = st.upgrade() else { return };
                    let (lock, cv) = &*st;
                    let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
                    let due = match *g {
                        None => {
                            let _ = cv
                                .wait_timeout(g, std::time::Duration::from_millis(500))
                                .unwrap_or_else(|e| e.into_inner());
                            continue;
                        }
                        Some((seq, at)) => {
                            let now = std::time::Instant::now();
                            if now < at {
                                let _ = cv
                                    .wait_timeout(g, at - now)
                                    .unwrap_or_else(|e| e.into_inner());
                                continue;
                            }
                            *g = None;
                            seq
                        }
                    };
                    drop(g);
                    fire(due);
                }
            })?;
        Ok(SoftTimer { state })
    }

    /// Times run `seq`: `fire(seq)` after `ms` unless disarmed.
    pub fn arm(&self, seq: u64, ms: i64) {
        let (lock, cv) = &*self.state;
        let at = std::time::Instant::now() + std::time::Duration::from_millis(ms.max(1) as u64);
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = Some((seq, at));
        cv.notify_all();
    }

    /// Stops timing (the run returned).
    pub fn disarm(&self) {
        let (lock, cv) = &*self.state;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = None;
        cv.notify_all();
    }
}

/// Serves the parent on `stream` until it closes it.
pub async fn serve(app: App, stream: UnixStream) -> std::io::Result<()> {
    let (mut rx, mut tx) = stream.into_split();
    wire::write(
        &mut tx,
        &FromChild::Ready {
            pid: std::process::id(),
        },
    )
    .await?;
    while let Some(msg) = wire::read::<_, ToChild>(&mut rx).await? {
        let ToChild::Call {
            seq,
            key,
            ctx,
            args,
        } = msg;
        let r = match app.registered(&key) {
            Some(reg) => reg.body.call(ctx, args).await,
            None => Err(not_registered(&key)),
        };
        let (ok, err) = match r {
            Ok(v) => (Some(v), None),
            Err(f) => (None, Some(f)),
        };
        wire::write(&mut tx, &FromChild::Done { seq, ok, err }).await?;
    }
    Ok(())
}
