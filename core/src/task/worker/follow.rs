//! What waits on a run: chains, chords and Celery links.
//!
//! A success sends what follows it (the chain's next link, Celery `link`
//! callbacks, the chord's arrival); a run that will not succeed fails
//! everything waiting on it, so nobody waits for something that will never
//! come. Kept together so the success path and the give-up path learn each
//! new kind of follow-up at once.

use serde_json::Value;

use crate::log::shown;
use crate::task::app::App;
use crate::task::message::Message;
use crate::task::spec::Joined;
use crate::task::state::{Failure, Outcome, Refused, State};

/// The parts' results, in order, or why the callback cannot run.
pub(super) async fn collect(app: &App, parts: &[String]) -> Result<Vec<Value>, Failure> {
    let Some(b) = app.backend() else {
        return Err(Failure::new("ChordError", "a chord needs a result store"));
    };
    let mut out = Vec::with_capacity(parts.len());
    for id in parts {
        match b.fetch(id).await {
            Ok(Some(o)) if o.state == State::Success => out.push(o.result.unwrap_or(Value::Null)),
            Ok(Some(o)) => {
                let why = o
                    .error
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| o.state.to_string());
                return Err(Failure::new(
                    "ChordError",
                    format!("dependency {id} did not succeed: {why}"),
                ));
            }
            Ok(None) => {
                return Err(Failure::new(
                    "ChordError",
                    format!("dependency {id} has no result"),
                ));
            }
            Err(e) => return Err(Failure::new("ChordError", e.to_string())),
        }
    }
    Ok(out)
}

/// Sends the Celery `link` (`errors` false) or `link_error` callbacks `m`
/// carries, given `arg`, as Celery 5.5 sends them (see
/// [`crate::broker::celery::codec::apply_links`]). A signature that cannot
/// be read is logged and skipped, as it cannot be run anywhere.
async fn celery_links(
    app: &App,
    m: &Message,
    arg: Value,
    errors: bool,
) -> Result<Vec<String>, Refused> {
    let Some(c) = m.carried.as_deref() else {
        return Ok(Vec::new());
    };
    let (sigs, grouped) = if errors {
        (&c.errbacks, true)
    } else {
        (&c.callbacks, c.callbacks.len() > 1)
    };
    if sigs.is_empty() {
        return Ok(Vec::new());
    }
    let (out, bad) =
        crate::broker::celery::codec::apply_links(sigs, &arg, m, grouped, |s| app.message_of(s));
    for e in bad {
        crate::log::emit(
            crate::log::Level::Warn,
            "headway.worker",
            crate::log::About::default().run(&m.task, &m.id),
            format_args!(
                "headway worker: a callback of {} was not sent: {}",
                shown(&m.id),
                shown(&e.to_string())
            ),
        );
    }
    let ids = out.iter().map(|n| n.id.clone()).collect();
    if !out.is_empty() {
        app.broker().publish(out).await?;
    }
    Ok(ids)
}

/// Whether anything follows a success of `m`: Celery `link` callbacks, the
/// chain's next link ([`send_links`]), or the chord's arrival ([`arrive`]).
/// Kept beside them so the batched fast path (result, event and late ack in
/// one write) never skips a follow-up kind that they learn.
pub(super) fn follows(m: &Message) -> bool {
    !m.chain.is_empty()
        || m.chord.is_some()
        || m.carried
            .as_deref()
            .is_some_and(|c| !c.callbacks.is_empty())
}

/// Sends a success's Celery `link` callbacks and its chain's next link;
/// answers the ids sent (the run's children).
pub(super) async fn send_links(
    app: &App,
    m: &Message,
    value: Value,
) -> Result<Vec<String>, Refused> {
    let mut sent = celery_links(app, m, value.clone(), false).await?;
    if let Some((next, rest)) = m.chain.split_first() {
        if crate::broker::celery::codec::dicts::is_nested(next) {
            sent.extend(send_nested(app, m, next, rest, &value).await?);
            return Ok(sent);
        }
        let mut n = app.message_of(next);
        if !next.immutable {
            n.args.insert(0, value);
        }
        // A Celery chain link's own `link`/`link_error` travel with it.
        crate::broker::celery::codec::carry_links(&next.extra, &mut n);
        n.chain = rest.to_vec();
        crate::task::trace::inherit(m, &mut n);
        n.chord = m.chord.clone();
        n.root_id = Some(m.root_id.clone().unwrap_or_else(|| m.id.clone()));
        n.parent_id = Some(m.id.clone());
        n.group = m.group.clone();
        n.group_index = m.group_index;
        sent.push(n.id.clone());
        app.broker().publish(vec![n]).await?;
    }
    Ok(sent)
}

/// Plans and publishes the group or chord `next` (a nested chain link),
/// given `value`, with the chain's `rest` after it, as children of `m`.
async fn send_nested(
    app: &App,
    m: &Message,
    next: &crate::task::message::Sig,
    rest: &[crate::task::message::Sig],
    value: &Value,
) -> Result<Vec<String>, Refused> {
    let mut c = crate::broker::celery::codec::dicts::canvas_of_nested(next)
        .map_err(|e| Refused::Invalid(format!("the chain after {}: {e}", m.id)))?;
    crate::task::canvas::given(&mut c, value);
    if !rest.is_empty() {
        let mut links = vec![c];
        links.extend(rest.iter().cloned().map(crate::task::canvas::Canvas::Sig));
        c = crate::task::canvas::Canvas::Chain(links);
    }
    let root = m.root_id.clone().unwrap_or_else(|| m.id.clone());
    app.publish_planned(c, |n| {
        crate::task::trace::inherit(m, n);
        n.root_id = Some(root.clone());
        n.parent_id = Some(m.id.clone());
    })
    .await
}

/// A success's chord arrival; none when a chain follows it (its last link
/// carries the chord).
pub(super) async fn arrive(app: &App, m: &Message) -> Result<(), Refused> {
    if !m.chain.is_empty() {
        return Ok(());
    }
    if let Some(chord) = &m.chord {
        let counter = app
            .inner
            .counter
            .as_ref()
            .ok_or_else(|| Refused::Invalid("a chord needs an app with a counter".into()))?;
        let mut cb = (*chord.callback).clone();
        cb.root_id = Some(m.root_id.clone().unwrap_or_else(|| m.id.clone()));
        if counter.arrive(&chord.key, &m.id, chord.size, &cb).await? == Joined::Last {
            app.broker().publish(vec![cb]).await?;
        }
    }
    Ok(())
}

/// Records a run that will not succeed, and everything waiting on it: the
/// rest of its chain, and its chord's callback (with that callback's chain).
/// A failure (not a revoke, and not an unregistered name, as with Celery)
/// then sends its Celery `link_error` callbacks with its id. Counted in
/// the app's metrics as `state`, with `took` (ms) when its body ran.
pub(super) async fn give_up(
    app: &App,
    m: &Message,
    state: State,
    f: Failure,
    took: Option<i64>,
) -> Result<(), Refused> {
    app.metrics().settled(&m.task, state, took);
    record_given_up(app, m, state, &f).await?;
    if state == State::Failure && f.kind != "NotRegistered" {
        celery_links(app, m, Value::String(m.id.clone()), true).await?;
    }
    Ok(())
}

async fn record_given_up(app: &App, m: &Message, state: State, f: &Failure) -> Result<(), Refused> {
    let now = app.now();
    let mut o = Outcome::new(m.id.clone(), state, now);
    o.retries = m.retries;
    o.task = Some(m.task.clone());
    o.error = Some(f.clone());
    let mut all = vec![o];
    let because = Failure::new(
        if state == State::Failure {
            f.kind.clone()
        } else {
            "Revoked".into()
        },
        format!("an earlier link ({}) did not succeed: {}", m.id, f),
    );
    for s in &m.chain {
        if let Some(id) = &s.id {
            let mut o = Outcome::new(id.clone(), state, now);
            o.task = Some(s.task.clone());
            o.error = Some(because.clone());
            all.push(o);
        }
    }
    if let Some(chord) = &m.chord {
        let cb = &chord.callback;
        let cf = Failure::new(
            "ChordError",
            format!("dependency {} did not succeed: {}", m.id, f),
        );
        let mut o = Outcome::new(cb.id.clone(), State::Failure, now);
        o.task = Some(cb.task.clone());
        o.error = Some(cf.clone());
        all.push(o);
        for s in &cb.chain {
            if let Some(id) = &s.id {
                let mut o = Outcome::new(id.clone(), State::Failure, now);
                o.task = Some(s.task.clone());
                o.error = Some(cf.clone());
                all.push(o);
            }
        }
    }
    app.store(all).await
}
