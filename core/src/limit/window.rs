//! A sliding window shared by every process that names the same key:
//! [`flow::Window`]'s rules, run in Redis by `lua/window.lua`.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::store::{Req, Store};
use super::{Asked, Limit, Micros, clock_arg, limit_impl, micros_up, script};
use crate::flow::{self, Nanos};
use crate::task::state::Refused;

const SOURCE: &str = script!("window.lua");
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCE));

/// What one call to the script answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowAnswer {
    /// Whether the event was counted (always `false` for a look).
    pub taken: bool,
    /// How long until there is room after the call: 0 when there is,
    /// `i64::MAX` when there never will be (`limit` 0).
    pub wait: Nanos,
    /// How many events remain in the window after the call.
    pub left: i64,
}

/// At most `limit` events in any `per`-long stretch, in Redis under one
/// key.
#[derive(Clone)]
pub struct SharedWindow {
    store: Store,
    limit: i64,
    per: Nanos,
    limit_arg: String,
    per_arg: String,
}

impl SharedWindow {
    /// The window `key` on the Redis at `url`: no I/O, the first call
    /// connects. Refused as [`flow::Window::new`] refuses (a negative
    /// `limit`, a `per` that is not positive), plus a bad URL or an empty
    /// key. Stamps are Redis's microseconds, so `per` is counted in whole
    /// microseconds, rounded up.
    pub fn new(url: &str, key: &str, limit: i64, per: Nanos) -> Result<Self, Refused> {
        flow::Window::new(limit, per)
            .map_err(|e| super::invalid(super::renamed(e, "limit", "per")))?;
        let store = Store::new(url, "window", key)?;
        Ok(SharedWindow {
            store,
            limit,
            per,
            limit_arg: limit.to_string(),
            per_arg: micros_up(per).to_string(),
        })
    }

    /// The most events in any window.
    pub fn limit(&self) -> i64 {
        self.limit
    }

    /// The window's length.
    pub fn per(&self) -> Nanos {
        self.per
    }

    /// The Redis key it lives under.
    pub fn key(&self) -> &str {
        self.store.key()
    }

    /// Whether an event is within the quota now (Redis's clock), counting
    /// it if it is.
    pub async fn take(&self) -> Result<bool, Refused> {
        self.made(self.ask_take()).await
    }

    /// How many events remain in the window now.
    pub async fn left(&self) -> Result<i64, Refused> {
        self.made(self.ask_left()).await
    }

    /// How long until there is room: 0 when there is, `i64::MAX` when
    /// `limit` is 0.
    pub async fn next(&self) -> Result<Nanos, Refused> {
        self.made(self.ask_next()).await
    }

    /// Counts an event, sleeping until there is room (each refusal says how
    /// long). Refused: a `limit` of 0, where the wait would be for ever.
    pub async fn wait(&self) -> Result<(), Refused> {
        loop {
            let a = self.call(true, None).await?;
            if a.taken {
                return Ok(());
            }
            if a.wait == i64::MAX {
                return Err(Refused::Invalid(
                    "invalid `limit`: 0 lets no event through, so the wait is for ever".into(),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_nanos(a.wait.max(1) as u64)).await;
        }
    }

    /// One call to the script: count (or only look) at `now` (microseconds;
    /// `None` reads Redis `TIME`). An explicit `now` is for tests that
    /// compare with the in-process window, and leaves the key without an
    /// expiry.
    #[doc(hidden)]
    pub async fn call(&self, take: bool, now: Option<Micros>) -> Result<WindowAnswer, Refused> {
        self.send(self.ask(take, now)).await
    }

    /// [`Self::take`], asked.
    pub fn ask_take(&self) -> Asked<WindowAnswer, bool> {
        Asked {
            req: self.ask(true, None),
            pick: |a| a.taken,
        }
    }

    /// [`Self::left`], asked.
    pub fn ask_left(&self) -> Asked<WindowAnswer, i64> {
        Asked {
            req: self.ask(false, None),
            pick: |a| a.left,
        }
    }

    /// [`Self::next`], asked.
    pub fn ask_next(&self) -> Asked<WindowAnswer, Nanos> {
        Asked {
            req: self.ask(false, None),
            pick: |a| a.wait,
        }
    }

    /// [`Self::call`]'s script call (the methods' asks are made of it).
    fn ask(&self, take: bool, now: Option<Micros>) -> Req {
        let now = clock_arg(now);
        self.store.req(
            SOURCE,
            &SCRIPT,
            &[
                &self.limit_arg,
                &self.per_arg,
                if take { "1" } else { "0" },
                &now,
            ],
        )
    }
}

limit_impl!(SharedWindow, WindowAnswer, |me, v| {
    let (taken, wait, left): (i64, i64, i64) = me.store.typed(v)?;
    Ok(WindowAnswer {
        taken: taken == 1,
        wait: if wait < 0 {
            i64::MAX
        } else {
            wait.saturating_mul(1000)
        },
        left,
    })
});
