//! The specs as a binding that speaks JSON sends them (Node's `lib/`): the
//! same types, read with serde, so their fields are named once — here and
//! in `specs.rs` — rather than copied field by field into a binding's own
//! request structs.
//!
//! The wire's conventions: fields in camelCase (what [`super::Host::spell`]
//! answers for Node); spans and instants as JSON numbers of milliseconds,
//! rounded to the nearest (an instant is absolute, epoch ms); and, since
//! JSON has no infinities, ±Infinity as the strings `"Infinity"` and
//! `"-Infinity"` where a count or a span may be one, reaching the spec as
//! the number it is for `build` to take or refuse. What does not parse is
//! a request the binding wrote wrong, not a user's value out of range:
//! ranges and their error texts stay `build`'s.

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::{BackoffSpec, Host, RateSpec, SendSpec, SpecError, When};
use crate::task::rhythm::{Cron, Every, Rhythm, RhythmError};
use crate::task::{Canvas, Sig};

/// A JSON number, or `"Infinity"` / `"-Infinity"`.
struct Num(f64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum N {
            F(f64),
            S(String),
        }
        match N::deserialize(d)? {
            N::F(x) => Ok(Num(x)),
            N::S(s) if s == "Infinity" => Ok(Num(f64::INFINITY)),
            N::S(s) if s == "-Infinity" => Ok(Num(f64::NEG_INFINITY)),
            N::S(s) => Err(serde::de::Error::custom(format!("{s:?} is not a number"))),
        }
    }
}

/// Milliseconds as a JSON number, as the core's `i64` (rounded; ±Infinity
/// saturate).
fn ms(x: f64) -> i64 {
    x.round() as i64
}

/// A count, or null.
pub(super) fn num<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(Option::<Num>::deserialize(d)?.map(|Num(x)| x))
}

/// A span in ms, or null.
pub(super) fn span<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(num(d)?.map(ms))
}

/// An instant in epoch ms, or null.
pub(super) fn instant<'de, D: Deserializer<'de>>(d: D) -> Result<Option<When>, D::Error> {
    Ok(span(d)?.map(When::At))
}

/// `{fixed}` (ms), or `{base, cap, jitter}` with any part omitted (the
/// core's default for it).
impl<'de> Deserialize<'de> for BackoffSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<BackoffSpec, D::Error> {
        #[derive(Deserialize)]
        struct B {
            fixed: Option<f64>,
            base: Option<f64>,
            cap: Option<f64>,
            jitter: Option<bool>,
        }
        let b = B::deserialize(d)?;
        Ok(match b.fixed {
            Some(delay) => BackoffSpec::Fixed { delay: ms(delay) },
            None => BackoffSpec::Exponential {
                base: b.base.map(ms),
                cap: b.cap.map(ms),
                jitter: b.jitter,
            },
        })
    }
}

/// Celery's notation (`"10/m"`), or `{count, per}` (`per` in ms).
impl<'de> Deserialize<'de> for RateSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RateSpec, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum R {
            Text(String),
            Parts { count: f64, per: f64 },
        }
        Ok(match R::deserialize(d)? {
            R::Text(t) => RateSpec::Text(t),
            R::Parts { count, per } => RateSpec::Parts {
                count: Some(count),
                per: Some(ms(per)),
            },
        })
    }
}

/// A rhythm as given: `{every, anchor}` (ms; the anchor an instant or
/// null), `{cron, tz}` (no zone: [`Cron::in_zone`]'s default) or `{at}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum RhythmSpec {
    Every {
        every: f64,
        #[serde(default)]
        anchor: Option<f64>,
    },
    Cron {
        cron: String,
        #[serde(default)]
        tz: Option<String>,
    },
    At {
        at: f64,
    },
}

impl RhythmSpec {
    /// The rhythm, or why not.
    pub fn build(self) -> Result<Rhythm, RhythmError> {
        Ok(match self {
            RhythmSpec::Every { every, anchor } => Rhythm::Every(match anchor {
                Some(a) => Every::anchored(ms(every), ms(a))?,
                None => Every::new(ms(every))?,
            }),
            RhythmSpec::Cron { cron, tz } => Rhythm::Cron(Cron::in_zone(&cron, tz.as_deref())?),
            RhythmSpec::At { at } => Rhythm::At(ms(at)),
        })
    }
}

/// A canvas tree as given: `{"sig": [name, args, kwargs | null, immutable,
/// options | null]}`, `{"chain": [...]}`, `{"group": [...]}`, `{"chord":
/// [[...], callback]}`.
// A tree is read once per send, so boxing the signature would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CanvasSpec {
    Sig(
        String,
        Vec<Value>,
        Option<Map<String, Value>>,
        bool,
        Option<SendSpec>,
    ),
    Chain(Vec<CanvasSpec>),
    Group(Vec<CanvasSpec>),
    Chord(Vec<CanvasSpec>, Box<CanvasSpec>),
}

impl CanvasSpec {
    /// The canvas, each signature's options checked as `host` spells them
    /// (instants are absolute: no clock is read).
    pub fn build(self, host: Host) -> Result<Canvas, SpecError> {
        let all = |parts: Vec<CanvasSpec>| -> Result<Vec<Canvas>, SpecError> {
            parts.into_iter().map(|p| p.build(host)).collect()
        };
        Ok(match self {
            CanvasSpec::Sig(name, args, kwargs, immutable, opts) => {
                let sig = Sig::new(name, args)
                    .with_kwargs(kwargs.unwrap_or_default())
                    .with_options(opts.unwrap_or_default().options(host, || 0)?);
                Canvas::Sig(if immutable { sig.immutable() } else { sig })
            }
            CanvasSpec::Chain(parts) => Canvas::Chain(all(parts)?),
            CanvasSpec::Group(parts) => Canvas::Group(all(parts)?),
            CanvasSpec::Chord(parts, callback) => {
                Canvas::Chord(all(parts)?, Box::new(callback.build(host)?))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{PolicySpec, WorkerSpec};

    #[test]
    fn node_names_spans_and_infinities() {
        let p: PolicySpec = serde_json::from_str(
            r#"{"retries":"Infinity","timeout":1.6,"acksLate":true,"rate":{"count":2,"per":1000},"backoff":{"fixed":5}}"#,
        )
        .unwrap();
        assert_eq!(p.retries, Some(f64::INFINITY));
        assert_eq!(p.timeout, Some(2));
        assert_eq!(p.acks_late, Some(true));
        assert_eq!(p.backoff, Some(BackoffSpec::Fixed { delay: 5 }));
        assert_eq!(
            p.rate,
            Some(RateSpec::Parts {
                count: Some(2.0),
                per: Some(1000)
            })
        );
        assert!(serde_json::from_str::<PolicySpec>(r#"{"acks_late":true}"#).is_err());
        let w: WorkerSpec =
            serde_json::from_str(r#"{"prefetchMultiplier":2,"softTimeLimit":null}"#).unwrap();
        assert_eq!(
            (w.prefetch_multiplier, w.soft_time_limit),
            (Some(2.0), None)
        );
        let s: SendSpec = serde_json::from_str(r#"{"eta":10,"dedupeKey":"k"}"#).unwrap();
        assert_eq!(
            (s.eta, s.dedupe_key.as_deref()),
            (Some(When::At(10)), Some("k"))
        );
    }

    #[test]
    fn rhythms_and_canvases() {
        let r: RhythmSpec = serde_json::from_str(r#"{"every":1000,"anchor":null}"#).unwrap();
        assert!(matches!(r.build(), Ok(Rhythm::Every(_))));
        let r: RhythmSpec = serde_json::from_str(r#"{"cron":"* * * * *"}"#).unwrap();
        assert!(matches!(r.build(), Ok(Rhythm::Cron(_))));
        assert!(serde_json::from_str::<RhythmSpec>(r#"{"nope":1}"#).is_err());
        let c: CanvasSpec = serde_json::from_str(
            r#"{"chord":[[{"sig":["a",[1],null,false,null]}],{"sig":["b",[],null,true,{"priority":3}]}]}"#,
        )
        .unwrap();
        let Ok(Canvas::Chord(parts, cb)) = c.build(Host::Node) else {
            panic!("a chord")
        };
        assert_eq!(parts.len(), 1);
        assert!(matches!(*cb, Canvas::Sig(_)));
        let bad: CanvasSpec =
            serde_json::from_str(r#"{"sig":["a",[],null,false,{"priority":10}]}"#).unwrap();
        assert!(
            bad.build(Host::Node).is_ok(),
            "a priority past 9 is refused at send"
        );
        let bad: CanvasSpec =
            serde_json::from_str(r#"{"sig":["a",[],null,false,{"dedupeTtl":5}]}"#).unwrap();
        assert_eq!(bad.build(Host::Node).unwrap_err().arg(), "dedupeTtl");
    }
}
