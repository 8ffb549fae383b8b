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
use std::time::{Duration, Instant};

use tokio::net::UnixStream;

use super::wire::{self, FromChild, ToChild};
use crate::task::app::App;
use crate::task::state::Failure;

/// The fd a child finds its socket on.
pub const CHILD_FD: RawFd = 3;

/// Set once this process serves a parent as a pool child.
static IN_CHILD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process is a process-pool child (it serves a parent): a
/// body here has no path to the result store mid-run (see
/// [`crate::task::progress`]).
pub fn in_child() -> bool {
    IN_CHILD.load(std::sync::atomic::Ordering::Relaxed)
}

fn mark_child() {
    IN_CHILD.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The child's way to its parent for what a body says mid-run (a custom
/// state): a second handle on the socket, written a whole frame at a time
/// under the lock. The serving loop writes only between runs, so a state
/// frame never interleaves with an answer.
static SAYS: Mutex<Option<StdStream>> = Mutex::new(None);

fn keep_saying(s: &StdStream) {
    if let Ok(c) = s.try_clone() {
        *SAYS.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
    }
}

/// Sends the parent run `id`'s custom state `state` with `meta` (checked
/// already); the parent stores it before the run's answer. Refused when
/// this process serves no parent.
pub fn say_state(
    id: &str,
    state: &str,
    meta: serde_json::Value,
) -> Result<(), crate::task::state::Refused> {
    use crate::task::state::{BrokerErrorKind, Refused};
    let mut g = SAYS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = g.as_mut() else {
        return Err(Refused::Invalid(
            "this process serves no process pool".into(),
        ));
    };
    let msg = FromChild::State {
        id: id.to_string(),
        state: state.to_string(),
        meta,
    };
    // The socket may be non-blocking (an async child's): a full buffer is
    // waited out rather than a frame cut.
    let frame = wire::frame_bytes(&msg).map_err(|e| Refused::Invalid(e.to_string()))?;
    let mut at = 0;
    while at < frame.len() {
        match std::io::Write::write(s, &frame[at..]) {
            Ok(0) => {
                return Err(Refused::broker(
                    BrokerErrorKind::Closed,
                    "the parent closed the socket",
                ));
            }
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(Refused::broker(
                    BrokerErrorKind::Closed,
                    format!("the parent's socket: {e}"),
                ));
            }
        }
    }
    Ok(())
}

/// Serves the parent on fd [`CHILD_FD`] until it closes the socket.
///
/// # Safety
/// The fd must be the socket the parent passed and owned by nothing else.
pub async unsafe fn serve_fd(app: App) -> std::io::Result<()> {
    mark_child();
    // SAFETY: the caller vouches that fd 3 is the parent's socket.
    let std = unsafe { StdStream::from_raw_fd(CHILD_FD) };
    std.set_nonblocking(true)?;
    keep_saying(&std);
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
        mark_child();
        // SAFETY: the caller vouches that fd 3 is the parent's socket.
        let stream = unsafe { StdStream::from_raw_fd(CHILD_FD) };
        stream.set_nonblocking(false)?;
        keep_saying(&stream);
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
///
/// Arming and disarming touch a mutex and wake the thread only when it must
/// look again (a run armed with an earlier deadline than the one it sleeps
/// towards). A disarm never wakes it: it finds nothing due when it wakes.
/// Waking it on every run was two context switches per run in a child that
/// ran no-op bodies (the drain in `bench/procs` spent half of a child's CPU
/// switching tasks).
pub struct SoftTimer {
    state: Arc<Armed>,
}

/// What the timer thread knows: the run being timed and when its soft limit
/// passes, and when the thread itself will next look (`None`: it sleeps
/// until woken).
#[derive(Default)]
struct Timing {
    armed: Option<(u64, Instant)>,
    looks: Option<Instant>,
}

/// The timing and the bell the timer thread waits on.
type Armed = (Mutex<Timing>, Condvar);

impl SoftTimer {
    /// A timer calling `fire(seq)` from its thread.
    pub fn new(fire: impl Fn(u64) + Send + 'static) -> std::io::Result<SoftTimer> {
        let state: Arc<Armed> = Arc::new((Mutex::new(Timing::default()), Condvar::new()));
        let st = Arc::downgrade(&state);
        std::thread::Builder::new()
            .name("headway-soft".into())
            .spawn(move || {
                // The thread holds only a weak reference between looks, so
                // it ends once the timer is dropped (within `IDLE`).
                const IDLE: Duration = Duration::from_millis(500);
                loop {
                    let Some(st) = st.upgrade() else { return };
                    let (lock, cv) = &*st;
                    let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
                    let now = Instant::now();
                    let due = match g.armed {
                        Some((seq, at)) if at <= now => {
                            g.armed = None;
                            Some(seq)
                        }
                        _ => None,
                    };
                    if let Some(seq) = due {
                        g.looks = None;
                        drop(g);
                        fire(seq);
                        continue;
                    }
                    let wait = match g.armed {
                        Some((_, at)) => (at - now).min(IDLE),
                        None => IDLE,
                    };
                    g.looks = Some(now + wait);
                    let (mut g, _) = cv.wait_timeout(g, wait).unwrap_or_else(|e| e.into_inner());
                    g.looks = None;
                }
            })?;
        Ok(SoftTimer { state })
    }

    /// Times run `seq`: `fire(seq)` after `ms` unless disarmed.
    pub fn arm(&self, seq: u64, ms: i64) {
        let (lock, cv) = &*self.state;
        let at = Instant::now() + Duration::from_millis(ms.max(1) as u64);
        let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
        g.armed = Some((seq, at));
        // Asleep towards a later look (or busy firing, `looks` unset): wake
        // it so it sleeps towards this deadline instead.
        if g.looks.is_none_or(|l| l > at) {
            cv.notify_all();
        }
    }

    /// Stops timing (the run returned). The thread is not woken: when it
    /// next looks, nothing is due.
    pub fn disarm(&self) {
        let (lock, _) = &*self.state;
        lock.lock().unwrap_or_else(|e| e.into_inner()).armed = None;
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

#[cfg(test)]
mod tests {
    use super::SoftTimer;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    fn timer() -> (SoftTimer, mpsc::Receiver<(u64, Instant)>) {
        let (tx, rx) = mpsc::channel();
        let t = SoftTimer::new(move |seq| {
            let _ = tx.send((seq, Instant::now()));
        })
        .expect("the timer thread starts");
        (t, rx)
    }

    #[test]
    fn an_armed_run_fires_once_at_its_limit() {
        let (t, rx) = timer();
        let armed = Instant::now();
        t.arm(7, 50);
        let (seq, at) = rx.recv_timeout(Duration::from_secs(5)).expect("fired");
        assert_eq!(seq, 7);
        assert!(at - armed >= Duration::from_millis(50), "fired early");
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "fired twice"
        );
    }

    #[test]
    fn a_disarmed_run_does_not_fire_and_the_next_one_does() {
        let (t, rx) = timer();
        t.arm(1, 60);
        t.disarm();
        // The positive control: run 2, armed after, fires.
        t.arm(2, 150);
        let (seq, _) = rx.recv_timeout(Duration::from_secs(5)).expect("fired");
        assert_eq!(seq, 2, "only the run still armed fires");
    }

    #[test]
    fn an_earlier_deadline_wakes_a_thread_sleeping_towards_a_later_one() {
        let (t, rx) = timer();
        // The thread sleeps towards run 1's far deadline...
        t.arm(1, 60_000);
        std::thread::sleep(Duration::from_millis(30));
        // ...and run 2, armed in its place with a near one, fires on time.
        let armed = Instant::now();
        t.arm(2, 40);
        let (seq, at) = rx.recv_timeout(Duration::from_secs(5)).expect("fired");
        assert_eq!(seq, 2);
        assert!(
            at - armed < Duration::from_millis(300),
            "woke late: {:?}",
            at - armed
        );
    }
}
