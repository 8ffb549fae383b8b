//! The only clock the task side reads.
//!
//! An app, its broker, workers and beats read time through one [`Clock`], in
//! milliseconds since the Unix epoch. In production that is the system clock.
//! In tests it is a [`VirtualClock`]: one that workers and beats *sleep on* —
//! a sleep advances it instead of waiting — so a retry schedule or an hour of
//! beats runs in milliseconds and prints the same every time.
//!
//! What the virtual clock moves is what the queue schedules: etas, retry
//! backoffs, expiry, beats. How long a body may actually run (`timeout`) and
//! how long a caller waits for a result (`get(timeout)`) are real waits on the
//! runtime's timer, since no clock can make a stuck body finish sooner.
//!
//! Times here can come from messages (an eta of `i64::MAX` ms is a valid
//! message), so nothing here overflows: a sleep until any instant is a
//! sleep, and a virtual clock moved past the end of `i64` stops there.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

/// A boxed future, as the task seams return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// `Ok(())` at once, as a [`BoxFuture`] that allocates nothing: the
/// future has no size, and a box of nothing is not allocated. What a seam
/// that finished in the call answers (the memory broker's ack, store and
/// note, per run: an `async { Ok(()) }` block is one byte, so its box was
/// an allocation each).
pub fn done<'a, E: 'a>() -> BoxFuture<'a, Result<(), E>> {
    Box::pin(Done(std::marker::PhantomData))
}

/// [`done`]'s future. `fn() -> E`: it holds no `E`, so it is `Send`
/// whatever `E` is.
struct Done<E>(std::marker::PhantomData<fn() -> E>);

impl<E> Future for Done<E> {
    type Output = Result<(), E>;

    fn poll(
        self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), E>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Time for the task side: milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> i64;
    /// Resolves at `at` (at once when it has passed). A virtual clock
    /// advances to `at` and resolves at once.
    fn sleep_until(&self, at: i64) -> BoxFuture<'_, ()>;
    /// Whether sleeping on it advances it rather than waits.
    fn is_virtual(&self) -> bool {
        false
    }
    /// Resolves when the clock has been moved by someone (never, for the
    /// system clock). What a broker waiting for an eta listens to.
    fn moved(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }

    fn sleep_until(&self, at: i64) -> BoxFuture<'_, ()> {
        let wait = at.saturating_sub(self.now());
        Box::pin(async move {
            if wait > 0 {
                // Far enough ahead is for ever: tokio's timer does not
                // overflow on a sleep of `i64::MAX` ms (it parks it).
                tokio::time::sleep(Duration::from_millis(wait as u64)).await;
            }
        })
    }
}

/// The system clock as one `Arc` for the process. Whether two apps share a
/// clock is asked by identity ([`same`]) — a connected broker serves one
/// clock — so every caller that means "the system clock" hands out this one.
pub fn system() -> Arc<dyn Clock> {
    static SYSTEM: LazyLock<Arc<dyn Clock>> = LazyLock::new(|| Arc::new(SystemClock));
    SYSTEM.clone()
}

/// Whether `a` and `b` are one clock (not two that read alike: two virtual
/// clocks at the same instant still move apart).
pub fn same(a: &Arc<dyn Clock>, b: &Arc<dyn Clock>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// A clock that sleeping advances.
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: AtomicI64,
    moved: Notify,
}

impl VirtualClock {
    /// A clock that reads `start` until something moves it.
    pub fn new(start: i64) -> Arc<VirtualClock> {
        Arc::new(VirtualClock {
            now: AtomicI64::new(start),
            moved: Notify::new(),
        })
    }

    /// Moves it forward by `ms` (a negative step does nothing: time here never
    /// runs backwards), stopping at `i64::MAX` rather than wrapping round.
    pub fn advance(&self, ms: i64) {
        if ms > 0 {
            let _ = self
                .now
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                    Some(t.saturating_add(ms))
                });
            self.moved.notify_waiters();
        }
    }

    /// Moves it to `at` if that is later than now.
    pub fn advance_to(&self, at: i64) {
        if self.now.fetch_max(at, Ordering::SeqCst) < at {
            self.moved.notify_waiters();
        }
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, at: i64) -> BoxFuture<'_, ()> {
        self.advance_to(at);
        Box::pin(async {
            // Let whoever was woken by the move run before the sleeper goes on.
            tokio::task::yield_now().await;
        })
    }

    fn is_virtual(&self) -> bool {
        true
    }

    fn moved(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.moved.notified())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn done_is_ok_at_once_and_has_no_size() {
        // No size: its box is never allocated (what it is for).
        assert_eq!(std::mem::size_of::<Done<crate::task::Refused>>(), 0);
        assert!(done::<crate::task::Refused>().await.is_ok());
    }

    #[tokio::test]
    async fn virtual_sleep_advances() {
        let c = VirtualClock::new(1000);
        assert_eq!(c.now(), 1000);
        c.sleep_until(5000).await;
        assert_eq!(c.now(), 5000);
        c.sleep_until(10).await;
        assert_eq!(c.now(), 5000);
        c.advance(-5);
        assert_eq!(c.now(), 5000);
        c.advance(5);
        assert_eq!(c.now(), 5005);
        assert!(c.is_virtual() && !SystemClock.is_virtual());
        assert!(SystemClock.now() > 1_600_000_000_000);
    }

    #[test]
    fn the_system_clock_is_one_clock() {
        assert!(same(&system(), &system()));
        let own: Arc<dyn Clock> = Arc::new(SystemClock);
        assert!(!same(&system(), &own));
        let v: Arc<dyn Clock> = VirtualClock::new(0);
        assert!(same(&v, &v.clone()));
    }

    #[tokio::test]
    async fn the_ends_of_time_do_not_overflow() {
        // An eta long past (i64::MIN) is no wait at all.
        SystemClock.sleep_until(i64::MIN).await;
        // One at the end of time is a wait that does not end (nor panic).
        let far =
            tokio::time::timeout(Duration::from_millis(20), SystemClock.sleep_until(i64::MAX));
        assert!(far.await.is_err());
        let c = VirtualClock::new(i64::MAX - 5);
        c.advance(10);
        assert_eq!(c.now(), i64::MAX, "saturates, does not wrap");
        c.advance(i64::MAX);
        assert_eq!(c.now(), i64::MAX);
        let d = VirtualClock::new(i64::MIN);
        d.sleep_until(i64::MAX).await;
        assert_eq!(d.now(), i64::MAX);
    }
}
