//! Chain, group and chord: work that depends on other work.
//!
//! A canvas is planned into messages before anything is published, so it can
//! be built once and sent twice, and so every id a caller will wait on is
//! known at send:
//! - a **chain** is a message carrying its own tail; a link that is not
//!   immutable is called with the previous link's result prepended;
//! - a **group** publishes every part at once and waits on them in order; a
//!   chain inside a group stays a chain (its head is published, its tail
//!   travels with it, and the group waits on its last link);
//! - a **chord** gives every part the same counter key and the same callback,
//!   so whichever part finishes last sends the callback with the parts'
//!   results in order. The counter is opened at send, before any part can
//!   finish. A part that fails for good records the callback as failed so
//!   nobody waits on a callback that will never be sent.
//!
//! A group at the head of a chain is a chord whose callback is the rest of
//! the chain (what Celery does). A group or chord anywhere later in a chain is
//! refused: a message's tail is a list of single runs.

use super::app::App;
use super::message::{Chord, Join, Message, Sig, new_id};
use super::state::Refused;

/// A piece of work that has not been published yet.
// A `Sig` is a few hundred bytes (kwargs and carried options are ordered
// maps); a canvas is built once per send, so boxing it would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Canvas {
    /// One run.
    Sig(Sig),
    /// Runs in order, each started when the one before it succeeds.
    Chain(Vec<Canvas>),
    /// Runs all at once, waited on together.
    Group(Vec<Canvas>),
    /// Parts, then a callback given their results.
    Chord(Vec<Canvas>, Box<Canvas>),
}

/// What sending a canvas does.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Messages to publish.
    pub publish: Vec<Message>,
    /// Chord counters to open first: (key, size).
    pub opens: Vec<(String, u32)>,
    /// What the handle waits on.
    pub wait: Vec<String>,
    /// Whether the handle answers a list.
    pub all: bool,
}

/// One planned piece: its head messages (published unless a chord embeds
/// them) and the ids whose results are its results.
struct Built {
    heads: Vec<Message>,
    finals: Vec<String>,
}

fn invalid(why: &str) -> Refused {
    Refused::Invalid(why.to_string())
}

impl Canvas {
    /// Flattens nested chains and turns a group at the head of a chain into a
    /// chord over the rest.
    fn normal(self) -> Result<Canvas, Refused> {
        match self {
            Canvas::Chain(links) => {
                let mut flat = Vec::new();
                for l in links {
                    match l.normal()? {
                        Canvas::Chain(inner) => flat.extend(inner),
                        other => flat.push(other),
                    }
                }
                if flat.is_empty() {
                    return Err(invalid("a chain needs at least one link"));
                }
                if flat.len() == 1 {
                    return Ok(flat.remove(0));
                }
                match flat.first() {
                    Some(Canvas::Group(_)) => {
                        let Canvas::Group(parts) = flat.remove(0) else {
                            unreachable!()
                        };
                        let rest = if flat.len() == 1 {
                            flat.remove(0)
                        } else {
                            Canvas::Chain(flat)
                        };
                        Canvas::Chord(parts, Box::new(rest)).normal()
                    }
                    _ => {
                        if flat[1..].iter().any(|c| !matches!(c, Canvas::Sig(_))) {
                            return Err(invalid(
                                "a group or chord can only come first in a chain (a chain's tail is a list of single runs)",
                            ));
                        }
                        Ok(Canvas::Chain(flat))
                    }
                }
            }
            Canvas::Group(parts) => {
                let mut flat = Vec::new();
                for p in parts {
                    match p.normal()? {
                        Canvas::Group(inner) => flat.extend(inner),
                        other => flat.push(other),
                    }
                }
                Ok(Canvas::Group(flat))
            }
            Canvas::Chord(parts, cb) => {
                let mut flat = Vec::new();
                for p in parts {
                    match p.normal()? {
                        Canvas::Group(inner) => flat.extend(inner),
                        other => flat.push(other),
                    }
                }
                Ok(Canvas::Chord(flat, Box::new(cb.normal()?)))
            }
            sig => Ok(sig),
        }
    }

    pub(crate) fn plan(self, app: &App) -> Result<Plan, Refused> {
        let c = self.normal()?;
        let mut plan = Plan {
            all: matches!(c, Canvas::Group(_)),
            ..Plan::default()
        };
        let built = build(app, c, &mut plan)?;
        let root = built.heads.first().map(|m| m.id.clone());
        for mut m in built.heads {
            if m.root_id.is_none() {
                m.root_id = root.clone();
            }
            plan.publish.push(m);
        }
        plan.wait = built.finals;
        Ok(plan)
    }
}

fn build(app: &App, c: Canvas, plan: &mut Plan) -> Result<Built, Refused> {
    match c {
        Canvas::Sig(sig) => {
            let m = app.message_of(&sig);
            Ok(Built {
                finals: vec![m.id.clone()],
                heads: vec![m],
            })
        }
        Canvas::Chain(links) => {
            let mut sigs: Vec<Sig> = links
                .into_iter()
                .map(|l| match l {
                    Canvas::Sig(s) => s,
                    _ => unreachable!("normal() leaves only sigs in a chain"),
                })
                .collect();
            for s in &mut sigs {
                if s.id.is_none() {
                    s.id = Some(s.options.id.clone().unwrap_or_else(new_id));
                }
            }
            let last = sigs.last().and_then(|s| s.id.clone()).unwrap_or_default();
            let mut head = app.message_of(&sigs[0]);
            head.chain = sigs.split_off(1);
            Ok(Built {
                heads: vec![head],
                finals: vec![last],
            })
        }
        Canvas::Group(parts) => {
            let gid = new_id();
            let mut heads = Vec::new();
            let mut finals = Vec::new();
            for (i, p) in parts.into_iter().enumerate() {
                let b = build(app, p, plan)?;
                for mut h in b.heads {
                    h.group = Some(gid.clone());
                    h.group_index = Some(i as u32);
                    heads.push(h);
                }
                finals.extend(b.finals);
            }
            Ok(Built { heads, finals })
        }
        Canvas::Chord(parts, cb) => {
            let key = new_id();
            let mut part_heads = Vec::new();
            let mut part_finals = Vec::new();
            for (i, p) in parts.into_iter().enumerate() {
                if matches!(p, Canvas::Chord(..)) {
                    return Err(invalid("a chord cannot be a part of another chord"));
                }
                let b = build(app, p, plan)?;
                if b.heads.len() != 1 || b.finals.len() != 1 {
                    return Err(invalid("each chord part must be one run or one chain"));
                }
                let mut h = b.heads.into_iter().next().expect("one head");
                h.group = Some(key.clone());
                h.group_index = Some(i as u32);
                part_heads.push(h);
                part_finals.extend(b.finals);
            }
            let immutable = match &*cb {
                Canvas::Sig(s) => s.immutable,
                Canvas::Chain(links) => {
                    matches!(links.first(), Some(Canvas::Sig(s)) if s.immutable)
                }
                _ => false,
            };
            let cb = build(app, *cb, plan)?;
            if cb.heads.len() != 1 {
                return Err(invalid("a chord's callback must be one run or one chain"));
            }
            let mut callback = cb.heads.into_iter().next().expect("one head");
            callback.join = Some(Join {
                parts: part_finals.clone(),
                immutable,
            });
            callback.parent_id = None;
            let size = part_heads.len() as u32;
            if size == 0 {
                return Ok(Built {
                    heads: vec![callback],
                    finals: cb.finals,
                });
            }
            plan.opens.push((key.clone(), size));
            let chord = Box::new(Chord {
                key,
                size,
                callback: Box::new(callback),
            });
            for h in &mut part_heads {
                h.chord = Some(chord.clone());
            }
            Ok(Built {
                heads: part_heads,
                finals: cb.finals,
            })
        }
    }
}
