//! A token bucket shared by every process that names the same key:
//! [`flow::Bucket`]'s rules, run in Redis by `lua/bucket.lua`.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::store::{Req, Store};
use super::{Asked, Limit, Micros, clock_arg, float_of, limit_impl, script};
use crate::flow::{self, Nanos, SECOND};
use crate::task::state::Refused;

const SOURCE: &str = script!("bucket.lua");
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCE));

/// What one call to the script answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketAnswer {
    /// Whether the tokens were taken (always `false` for a look).
    pub taken: bool,
    /// How long until `n` tokens are there after the call: 0 when they are,
    /// `i64::MAX` when they never will be.
    pub wait: Nanos,
    /// The tokens there after the call.
    pub tokens: f64,
}

/// `rate` tokens a second up to `burst`, in Redis under one key.
#[derive(Clone)]
pub struct SharedBucket {
    store: Store,
    rate: f64,
    burst: f64,
    per_ns: String,
    burst_arg: String,
}

impl SharedBucket {
    /// The bucket `key` on the Redis at `url`: no I/O, the first call
    /// connects. `rate` and `burst` as [`flow::Bucket::new`] takes them
    /// (the same defaults and the same refusals), plus a bad URL or an
    /// empty key. A key that does not exist yet is a full bucket.
    pub fn new(url: &str, key: &str, rate: f64, burst: Option<f64>) -> Result<Self, Refused> {
        let model = flow::Bucket::new(rate, burst, 0).map_err(super::invalid)?;
        let store = Store::new(url, "bucket", key)?;
        Ok(Self::on(store, &model))
    }

    /// The bucket `model`'s rate and burst describe, kept in `store`.
    pub(crate) fn on(store: Store, model: &flow::Bucket) -> Self {
        let (rate, burst) = (model.rate(), model.burst());
        SharedBucket {
            store,
            rate,
            burst,
            // The in-process bucket's own division, sent as the shortest text
            // that reads back as the same double.
            per_ns: (rate / SECOND as f64).to_string(),
            burst_arg: burst.to_string(),
        }
    }

    /// Tokens per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The most it holds.
    pub fn burst(&self) -> f64 {
        self.burst
    }

    /// The Redis key it lives under.
    pub fn key(&self) -> &str {
        self.store.key()
    }

    /// Whether `n` tokens are there now (Redis's clock), taking them if
    /// they are. Refused: an invalid `n` ([`flow::Bucket::check`]), Redis.
    pub async fn take(&self, n: f64) -> Result<bool, Refused> {
        self.made(self.ask_take(n)?).await
    }

    /// How long until `n` tokens would be there, without taking them: 0
    /// when they are, `i64::MAX` when they never will be.
    pub async fn next(&self, n: f64) -> Result<Nanos, Refused> {
        self.made(self.ask_next(n)?).await
    }

    /// How many tokens are there now.
    pub async fn tokens(&self) -> Result<f64, Refused> {
        self.made(self.ask_tokens()).await
    }

    /// Takes `n` tokens, sleeping until they are there: each refusal's
    /// answer says how long (one round trip per try, never a guess).
    /// Refused: `n` that can never be taken (more than the burst, or a zero
    /// rate), since the wait would be for ever.
    pub async fn wait(&self, n: f64) -> Result<(), Refused> {
        loop {
            let a = self.call(n, true, None).await?;
            if a.taken {
                return Ok(());
            }
            if a.wait == i64::MAX {
                return Err(Refused::Invalid(format!(
                    "invalid `n`: {n} can never be taken: more than the burst ({}) or a zero rate",
                    self.burst
                )));
            }
            tokio::time::sleep(std::time::Duration::from_nanos(a.wait.max(1) as u64)).await;
        }
    }

    /// One call to the script: take (or only look at) `n` tokens at `now`
    /// (microseconds; `None` reads Redis `TIME`). An explicit `now` is for
    /// tests that compare with the in-process bucket, and leaves the key
    /// without an expiry.
    #[doc(hidden)]
    pub async fn call(
        &self,
        n: f64,
        take: bool,
        now: Option<Micros>,
    ) -> Result<BucketAnswer, Refused> {
        let req = self.ask(n, take, now)?;
        self.send(req).await
    }

    /// [`Self::take`], asked.
    pub fn ask_take(&self, n: f64) -> Result<Asked<BucketAnswer, bool>, Refused> {
        let req = self.ask(n, true, None)?;
        Ok(Asked {
            req,
            pick: |a| a.taken,
        })
    }

    /// [`Self::next`], asked.
    pub fn ask_next(&self, n: f64) -> Result<Asked<BucketAnswer, Nanos>, Refused> {
        let req = self.ask(n, false, None)?;
        Ok(Asked {
            req,
            pick: |a| a.wait,
        })
    }

    /// [`Self::tokens`], asked: a look at no tokens.
    pub fn ask_tokens(&self) -> Asked<BucketAnswer, f64> {
        let req = self
            .ask(0.0, false, None)
            .expect("0 tokens is a valid look");
        Asked {
            req,
            pick: |a| a.tokens,
        }
    }

    /// [`Self::call`]'s script call (the methods' asks are made of it).
    /// Refused: an invalid `n`.
    fn ask(&self, n: f64, take: bool, now: Option<Micros>) -> Result<Req, Refused> {
        let n = flow::Bucket::check(n).map_err(super::invalid)?;
        let n = n.to_string();
        let now = clock_arg(now);
        Ok(self.store.req(
            SOURCE,
            &SCRIPT,
            &[
                &self.per_ns,
                &self.burst_arg,
                &n,
                if take { "1" } else { "0" },
                &now,
            ],
        ))
    }
}

limit_impl!(SharedBucket, BucketAnswer, |me, v| {
    let (taken, wait, tokens): (i64, String, Vec<u8>) = me.store.typed(v)?;
    let tokens = <[u8; 8]>::try_from(tokens.as_slice()).map_err(|_| {
        Refused::broker(
            crate::task::state::BrokerErrorKind::Data,
            format!(
                "a shared bucket's script answered {} bytes for its level, not 8",
                tokens.len()
            ),
        )
    })?;
    Ok(BucketAnswer {
        taken: taken == 1,
        wait: if wait == "inf" {
            i64::MAX
        } else {
            flow::nanos(float_of(&wait)?)
        },
        tokens: f64::from_le_bytes(tokens),
    })
});
