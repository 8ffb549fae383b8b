//! Limits shared across processes and languages: [`crate::flow::Bucket`],
//! [`crate::flow::Window`] and [`crate::flow::Gate`]'s rules, run in Redis.
//!
//! An in-process bucket limits one process. Ten workers behind a load
//! balancer, or a Python service and a Node one calling the same API, need
//! one limit between them, so the state has to live outside every one of
//! them and be changed in one step: each limit is a Lua script (`lua/`)
//! that reads, decides and writes its key atomically. The scripts are
//! line-for-line the in-process rules — the same float steps in the same
//! order — and `core/tests/limit_props.rs` runs random sequences through
//! both and compares every answer.
//!
//! The clock is Redis's `TIME`, read inside the script. Machines' clocks
//! disagree by milliseconds (seconds, on a bad day), and a bucket refilled
//! by whichever caller's clock runs fastest is not a rate; one clock, the
//! one the state lives beside, makes every process agree, and a call costs
//! no clock of its own. `TIME` has microseconds, so shared limits count in
//! whole microseconds (a `per` or `lease` is rounded up to one); spans are
//! still answered in [`Nanos`]. Scripts that read `TIME` and then write are
//! replicated by their effects (Redis ≥ 5's default), so a replica agrees.
//!
//! Every key expires once it says nothing a missing key would not say (a
//! bucket once full, a window once its newest event left, a gate once its
//! last lease ended), plus a second (a bucket: one to two, so that most
//! takes need not move its expiry): an idle limit costs no memory.
//!
//! Arguments are refused by the in-process constructors (the same error
//! texts), then the URL and key; a call is refused with the brokers'
//! [`Refused::Broker`] when Redis is not there ([`store::PATIENCE`]).
//! Construction does no I/O: the first call connects.

mod bucket;
mod gate;
pub mod store;
pub(crate) mod tasks;
pub mod tokens;
mod window;
pub mod wire;

pub use bucket::{BucketAnswer, SharedBucket};
pub use gate::{GateAnswer, GateOp, LEASE, SharedGate, new_permit};
pub use store::Req;
pub use window::{SharedWindow, WindowAnswer};

use crate::flow::{Invalid, Nanos};
use crate::task::clock::BoxFuture;
use crate::task::state::Refused;

/// A shared limit as a binding that makes its calls itself sees it
/// ([`wire`]): each call is asked (`ask`, on each type), its reply read
/// here, or the call made on the shared link instead.
pub trait Limit: Clone + Send + Sync + 'static {
    /// What one call answers.
    type Answer: Send + 'static;
    /// What the script's reply says.
    fn answer(&self, v: wire::Reply) -> Result<Self::Answer, Refused>;
    /// `req` made on the shared link (through a short outage), answered.
    fn run(&self, req: Req)
    -> impl Future<Output = Result<Self::Answer, Refused>> + Send + 'static;
}

/// One of a limit's methods asked but not made: its script call, and the
/// part of the call's answer the method returns. The async methods make
/// it on the shared link; a binding that makes calls itself
/// ([`wire`]) makes the same `req` and applies the same `pick`.
pub struct Asked<A, T> {
    pub req: Req,
    pub pick: fn(A) -> T,
}

/// A call a binding made on its own socket ([`wire::Wire`]), waiting for
/// its reply: what the reply means for the method that asked (the limit's
/// `answer`, then the method's `pick`, then the binding's conversion, all
/// in `T`), or, when the socket was lost with it, the same call made on
/// the shared link. One allocation per call, whatever the limit.
pub struct Waiting<T> {
    call: Box<dyn Erased<T>>,
}

trait Erased<T>: Send {
    fn finish(self: Box<Self>, reply: Result<wire::Reply, Refused>) -> Result<T, Refused>;
    fn again(self: Box<Self>, req: Req) -> BoxFuture<'static, Result<T, Refused>>;
}

struct Picking<L, F> {
    limit: L,
    pick: F,
}

impl<L, F, T> Erased<T> for Picking<L, F>
where
    L: Limit,
    F: FnOnce(L::Answer) -> T + Send + 'static,
    T: 'static,
{
    fn finish(self: Box<Self>, reply: Result<wire::Reply, Refused>) -> Result<T, Refused> {
        let a = self.limit.answer(reply?)?;
        Ok((self.pick)(a))
    }

    fn again(self: Box<Self>, req: Req) -> BoxFuture<'static, Result<T, Refused>> {
        let Picking { limit, pick } = *self;
        let run = limit.run(req);
        Box::pin(async move { run.await.map(pick) })
    }
}

impl<T: 'static> Waiting<T> {
    /// A call of `limit`'s whose answer `pick` turns into `T`.
    pub fn new<L: Limit>(limit: L, pick: impl FnOnce(L::Answer) -> T + Send + 'static) -> Self {
        Waiting {
            call: Box::new(Picking { limit, pick }),
        }
    }

    /// The reply (or the refusal [`wire::Wire::feed`] gave for it) read.
    pub fn finish(self, reply: Result<wire::Reply, Refused>) -> Result<T, Refused> {
        self.call.finish(reply)
    }

    /// `req` made on the shared link (a socket lost, or a wire down).
    pub fn again(self, req: Req) -> BoxFuture<'static, Result<T, Refused>> {
        self.call.again(req)
    }
}

/// A limit held behind an `Arc` (a binding's handle): a call clones a
/// pointer, not the limit's key and arguments.
impl<L: Limit> Limit for std::sync::Arc<L> {
    type Answer = L::Answer;

    fn answer(&self, v: wire::Reply) -> Result<L::Answer, Refused> {
        (**self).answer(v)
    }

    fn run(&self, req: Req) -> impl Future<Output = Result<L::Answer, Refused>> + Send + 'static {
        (**self).run(req)
    }
}

/// [`Limit`] for a limit type whose `store` runs its file's `SCRIPT`, the
/// reply read by `$read` (`$me` the limit, `$v` the reply).
macro_rules! limit_impl {
    ($ty:ty, $answer:ty, |$me:ident, $v:ident| $read:block) => {
        impl $ty {
            async fn send(&self, req: Req) -> Result<$answer, Refused> {
                let v: Value = self.store.run(&SCRIPT, &req.args).await?;
                self.answer(v)
            }

            /// A method's call made on the shared link: its part of the
            /// answer.
            async fn made<T>(&self, a: $crate::limit::Asked<$answer, T>) -> Result<T, Refused> {
                Ok((a.pick)(self.send(a.req).await?))
            }
        }

        impl Limit for $ty {
            type Answer = $answer;

            fn answer(&self, $v: Value) -> Result<$answer, Refused> {
                let $me = self;
                $read
            }

            fn run(
                &self,
                req: Req,
            ) -> impl Future<Output = Result<$answer, Refused>> + Send + 'static {
                let me = self.clone();
                async move { me.send(req).await }
            }
        }
    };
}
pub(crate) use limit_impl;

/// Microseconds: Redis `TIME`'s unit, the scripts' clock.
pub type Micros = i64;

/// A script's source: `lua/clock.lua` (the clock and exact number text
/// every script uses), then the script's own file.
macro_rules! script {
    ($body:literal) => {
        concat!(
            include_str!("lua/clock.lua"),
            "\n",
            include_str!(concat!("lua/", $body))
        )
    };
}
pub(crate) use script;

/// The script's `now` argument: empty reads Redis `TIME`.
fn clock_arg(now: Option<Micros>) -> String {
    now.map(|n| n.to_string()).unwrap_or_default()
}

/// Nanoseconds as whole microseconds, rounded up (a positive span stays
/// positive).
fn micros_up(ns: Nanos) -> Micros {
    ns / 1000 + i64::from(ns % 1000 > 0)
}

/// The in-process refusal, as the task side's [`Refused::Invalid`] (the
/// same text).
fn invalid(e: Invalid) -> Refused {
    Refused::Invalid(e.to_string())
}

/// The in-process refusal with the argument named as the shared limit's
/// constructor spells it (`Window`'s `allow`/`window` are `limit`/`per`;
/// `Gate`'s `limit` is `n`), the reason unchanged.
fn renamed(e: Invalid, first: &'static str, second: &'static str) -> Invalid {
    let arg = match e.arg {
        "allow" | "limit" => first,
        "window" => second,
        other => other,
    };
    Invalid { arg, why: e.why }
}

/// A number the script sent as text.
fn float_of(text: &str) -> Result<f64, Refused> {
    text.parse::<f64>().map_err(|_| {
        Refused::broker(
            crate::task::state::BrokerErrorKind::Data,
            format!("a shared limit's script answered {text:?}, not a number"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow;

    #[test]
    fn rounds_up_to_micros() {
        assert_eq!(micros_up(1), 1);
        assert_eq!(micros_up(1000), 1);
        assert_eq!(micros_up(1001), 2);
        assert_eq!(micros_up(flow::SECOND), 1_000_000);
    }

    #[test]
    fn a_waiting_call_reads_its_reply_with_the_methods_pick() {
        use redis::Value;
        let g = SharedGate::new("redis://127.0.0.1:1", "k", 1, None).unwrap();
        let (_, pick) = g.ask_take_new();
        let w = Waiting::new(g.clone(), move |a| pick(a).map(|p| p.len()));
        let reply = Value::Array(vec![Value::Int(1), Value::Int(1), Value::Int(-1)]);
        // Taken: the permit the ask made (an id), through the binding's
        // conversion.
        assert_eq!(w.finish(Ok(reply)).unwrap(), Some(36));
        let (_, pick) = g.ask_take_new();
        let w = Waiting::new(g.clone(), pick);
        let full = Value::Array(vec![Value::Int(0), Value::Int(1), Value::Int(5)]);
        assert_eq!(w.finish(Ok(full)).unwrap(), None);
        // A refusal is the answer; a reply of the wrong shape is refused.
        let (_, pick) = g.ask_take_new();
        let w = Waiting::new(g.clone(), pick);
        assert!(matches!(
            w.finish(Err(Refused::Invalid("x".into()))),
            Err(Refused::Invalid(_))
        ));
        let (_, pick) = g.ask_take_new();
        let w = Waiting::new(g, pick);
        assert!(w.finish(Ok(Value::Int(3))).is_err());
    }

    #[test]
    fn refuses_as_in_process() {
        let url = "redis://127.0.0.1:1";
        let e = |r: Result<(), Refused>| match r {
            Err(Refused::Invalid(t)) => t,
            other => panic!("{:?}", other.err()),
        };
        assert_eq!(
            e(SharedBucket::new(url, "k", -1.0, None).map(|_| ())),
            flow::Bucket::new(-1.0, None, 0).unwrap_err().to_string()
        );
        assert_eq!(
            e(SharedBucket::new(url, "k", 1.0, Some(f64::NAN)).map(|_| ())),
            "invalid `burst`: must be a finite number"
        );
        assert_eq!(
            e(SharedWindow::new(url, "k", -1, flow::SECOND).map(|_| ())),
            "invalid `limit`: must not be negative"
        );
        assert_eq!(
            e(SharedWindow::new(url, "k", 1, 0).map(|_| ())),
            "invalid `per`: must be positive"
        );
        assert_eq!(
            e(SharedGate::new(url, "k", -1, None).map(|_| ())),
            "invalid `n`: must not be negative"
        );
        assert_eq!(
            e(SharedGate::new(url, "k", 1, Some(0)).map(|_| ())),
            "invalid `lease`: must be positive"
        );
        assert_eq!(
            e(SharedBucket::new(url, "", 1.0, None).map(|_| ())),
            "invalid `key`: must not be empty"
        );
        assert!(e(SharedBucket::new("http://x", "k", 1.0, None).map(|_| ())).contains("`url`"));
        // The positive control: the same arguments, valid, are accepted.
        let b = SharedBucket::new(url, "k", 0.5, None).unwrap();
        assert_eq!((b.rate(), b.burst()), (0.5, 1.0));
        assert_eq!(b.key(), "headway:limit:bucket:k");
        assert!(SharedWindow::new(url, "k", 0, 1).is_ok());
        assert_eq!(SharedGate::new(url, "k", 0, None).unwrap().lease(), LEASE);
    }
}
