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
//! the chain, and a chord at the head takes the rest of the chain into its
//! callback (what Celery does). A group or chord later in a chain does the
//! same with what follows it, and becomes the chain's last link as a whole:
//! a nested signature in Celery's dict form (`broker::celery::codec::dicts`),
//! planned and published by the worker when the link before it succeeds,
//! given that link's result. Its ids are fixed at send, so the handle can
//! wait on them.
//!
//! A signature's `link` / `link_error` callbacks (Celery's
//! `apply_async(link=…)`, kept in its `extra` as Celery's dicts) go with the
//! message it becomes.

use super::app::App;
use super::message::{Chord, Join, Message, Sig, new_id};
use super::state::Refused;
use crate::broker::celery::codec::carry_links;
use crate::broker::celery::codec::dicts;

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
    /// A chain's earlier links, first first (the handle's parents).
    pub parents: Vec<String>,
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
                let Some(at) = flat.iter().position(|c| !matches!(c, Canvas::Sig(_))) else {
                    return Ok(Canvas::Chain(flat));
                };
                // What follows the group or chord becomes (the end of) a
                // chord's callback.
                let rest = flat.split_off(at + 1);
                let joined = match flat.pop().expect("the link at `at`") {
                    Canvas::Group(parts) if rest.is_empty() => Canvas::Group(parts),
                    Canvas::Group(parts) => Canvas::Chord(parts, Box::new(Canvas::Chain(rest))),
                    Canvas::Chord(parts, cb) if rest.is_empty() => Canvas::Chord(parts, cb),
                    Canvas::Chord(parts, cb) => {
                        let mut then = vec![*cb];
                        then.extend(rest);
                        Canvas::Chord(parts, Box::new(Canvas::Chain(then)))
                    }
                    _ => unreachable!("chains were flattened, sigs skipped"),
                }
                .normal()?;
                if flat.is_empty() {
                    return Ok(joined);
                }
                flat.push(joined);
                Ok(Canvas::Chain(flat))
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
        let all = match &c {
            Canvas::Group(_) => true,
            Canvas::Chain(links) => matches!(links.last(), Some(Canvas::Group(_))),
            _ => false,
        };
        let mut plan = Plan {
            all,
            ..Plan::default()
        };
        let mut c = c;
        if let Canvas::Chain(links) = &mut c {
            // Ids fixed here, so the handle can name its parents.
            let n = links.len();
            for l in links.iter_mut().take(n.saturating_sub(1)) {
                if matches!(l, Canvas::Sig(_)) {
                    plan.parents.extend(fix_ids(l));
                }
            }
        }
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
            let mut m = app.message_of(&sig);
            carry_links(&sig.extra, &mut m);
            carry_headers(&sig.extra, &mut m);
            Ok(Built {
                finals: vec![m.id.clone()],
                heads: vec![m],
            })
        }
        Canvas::Chain(links) => {
            let mut finals = Vec::new();
            let mut sigs: Vec<Sig> = Vec::with_capacity(links.len());
            for l in links {
                match l {
                    Canvas::Sig(mut s) => {
                        if s.id.is_none() {
                            s.id = Some(s.options.id.clone().unwrap_or_else(new_id));
                        }
                        finals = vec![s.id.clone().unwrap_or_default()];
                        sigs.push(s);
                    }
                    // normal() leaves a group or chord only last, never first.
                    mut nested => {
                        finals = fix_ids(&mut nested);
                        sigs.push(dicts::nested(&nested));
                    }
                }
            }
            let mut head = app.message_of(&sigs[0]);
            carry_links(&sigs[0].extra, &mut head);
            carry_headers(&sigs[0].extra, &mut head);
            head.chain = sigs.split_off(1);
            Ok(Built {
                heads: vec![head],
                finals,
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

/// A signature's custom `headers` (Celery's `apply_async(headers=…)`) onto
/// the message it becomes: carried with it, and told to its body in
/// Celery's `self.request`. A key the message model holds is not taken.
fn carry_headers(extra: &serde_json::Map<String, serde_json::Value>, m: &mut Message) {
    if let Some(serde_json::Value::Object(h)) = extra.get("headers")
        && !h.is_empty()
    {
        let c = m.carried_mut();
        for (k, v) in h {
            if !crate::task::request::MODEL_FIELDS.contains(&k.as_str()) {
                c.headers.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Gives every signature in `c` an id where it has none, and answers the ids
/// waiting on `c` answers: a signature's, a chain's last, a group's parts',
/// a chord's callback's.
fn fix_ids(c: &mut Canvas) -> Vec<String> {
    match c {
        Canvas::Sig(s) => {
            let id =
                s.id.get_or_insert_with(|| s.options.id.clone().unwrap_or_else(new_id));
            vec![id.clone()]
        }
        Canvas::Chain(links) => links.iter_mut().map(fix_ids).last().unwrap_or_default(),
        Canvas::Group(parts) => parts.iter_mut().flat_map(fix_ids).collect(),
        Canvas::Chord(parts, cb) => {
            for p in parts {
                fix_ids(p);
            }
            fix_ids(cb)
        }
    }
}

/// Prepends `value` to the arguments of what runs first in `c` (every part
/// of a group or a chord's header), unless that signature is immutable: a
/// nested group or chord given the result of the chain link before it.
pub(crate) fn given(c: &mut Canvas, value: &serde_json::Value) {
    match c {
        Canvas::Sig(s) => {
            if !s.immutable {
                s.args.insert(0, value.clone());
            }
        }
        Canvas::Chain(links) => {
            if let Some(first) = links.first_mut() {
                given(first, value);
            }
        }
        Canvas::Group(parts) | Canvas::Chord(parts, _) => {
            for p in parts {
                given(p, value);
            }
        }
    }
}
