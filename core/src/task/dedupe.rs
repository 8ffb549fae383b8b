//! What a send does with its `dedupe_key` and `concurrency_key` before it
//! publishes: a dedupe key is claimed for the run's id (a second send
//! within the ttl answers the first run's handle and sends nothing), and a
//! broker that keeps no task limits refuses either key, naming it, rather
//! than sending a run whose limit nobody would keep.
//!
//! A dedupe key belongs to one send: a signature inside a chain, group or
//! chord that names one is refused (which of its runs would the key
//! answer?). A send whose publish fails lets go of its claim, so the key
//! never answers a run that was not sent.

use std::sync::Arc;

use super::app::App;
use super::canvas::Canvas;
use super::limits::{self, TaskLimits};
use super::message::new_id;
use super::specs::{DEDUPE_TTL, SpecError};
use super::state::Refused;

/// A send's claim on its dedupe key.
pub(crate) struct Claim {
    pub limits: Arc<dyn TaskLimits>,
    /// The full key.
    pub key: String,
    /// The run the send makes.
    pub id: String,
    /// How long it holds (ms).
    pub ttl: i64,
}

/// Refuses what `canvas`'s options ask that `app`'s broker cannot keep,
/// and takes the dedupe key off a single send (fixing its run's id): the
/// claim to make before publishing, if any.
pub(crate) fn claim_of(app: &App, canvas: &mut Canvas) -> Result<Option<Claim>, Refused> {
    let host = app.host();
    let limits = app.broker().task_limits();
    let mut keyed = false;
    let mut nested = false;
    walk(canvas, true, &mut |sig, top| {
        keyed |= sig.options.concurrency_key.is_some();
        nested |= !top && sig.options.dedupe_key.is_some();
    });
    if nested {
        return Err(SpecError::new(
            host,
            "dedupe_key",
            "applies to a single send, not a signature inside a chain, group or chord",
        )
        .into());
    }
    if keyed && limits.is_none() {
        return Err(limits::unsupported(host, "concurrency_key"));
    }
    let Canvas::Sig(sig) = canvas else {
        return Ok(None);
    };
    let Some(key) = sig.options.dedupe_key.take() else {
        return Ok(None);
    };
    let ttl = sig.options.dedupe_ttl.take().unwrap_or(DEDUPE_TTL);
    let Some(limits) = limits else {
        return Err(limits::unsupported(host, "dedupe_key"));
    };
    let id = sig
        .id
        .clone()
        .or_else(|| sig.options.id.clone())
        .unwrap_or_else(new_id);
    sig.options.id = Some(id.clone());
    let key = limits::dedupe_key(limits.namespace(), &sig.task, &key);
    Ok(Some(Claim {
        limits,
        key,
        id,
        ttl,
    }))
}

fn walk(c: &Canvas, top: bool, f: &mut impl FnMut(&super::message::Sig, bool)) {
    match c {
        Canvas::Sig(s) => f(s, top),
        Canvas::Chain(v) | Canvas::Group(v) => v.iter().for_each(|c| walk(c, false, f)),
        Canvas::Chord(v, cb) => {
            v.iter().for_each(|c| walk(c, false, f));
            walk(cb, false, f);
        }
    }
}
