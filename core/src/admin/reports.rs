//! What the page and the JSON API report: queues, consumers, counts, runs,
//! one run's stored outcome, failures, dead letters and the audit log.
//!
//! Everything is read through the app's seams (the [`Inspector`] and the
//! result store), so a report reads the same for the memory broker, headway's
//! Redis layout and Celery's.
//!
//! [`Inspector`]: crate::task::Inspector

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value, json};

use super::Inner;
use crate::task::spec::{EVENT_TEXT_MAX, RunEvent, truncate};
use crate::task::{DeadLetter, Outcome, QueueInfo, Refused, State};

/// How many run events a report reads: the memory broker's whole ring
/// (`EVENTS_KEPT`), so filters see everything a worker kept.
pub const EVENTS_READ: usize = crate::broker::memory::EVENTS_KEPT;

/// How many runs `/api/runs` and `/api/failures` answer when not told: 50, a
/// page's worth.
pub const RUNS_DEFAULT: usize = 50;

/// How much of one run's result or traceback `/api/runs/<id>` shows: 16 KiB,
/// eight times what a run event keeps, for the one run someone asked about.
pub const DETAIL_MAX: usize = 16 * 1024;

/// How many dead letters `/api/dead` answers when not told: 20, the newest
/// a page shows.
pub const DEAD_DEFAULT: usize = 20;

/// How many bytes of a dead letter its preview shows: 512, enough to tell
/// a pickle from truncated JSON from another protocol's envelope.
pub const PREVIEW_MAX: usize = 512;

/// One run the admin sent itself: shown before any worker records it, so it
/// can be revoked while it waits.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    pub id: String,
    pub task: String,
    pub queue: String,
    pub args: String,
    pub at: i64,
}

fn queue_json(q: &QueueInfo) -> Value {
    let ready: Map<String, Value> = q
        .ready
        .iter()
        .map(|(step, n)| (step.to_string(), json!(n)))
        .collect();
    json!({
        "name": q.name,
        "ready": q.ready.values().sum::<u64>(),
        "ready_by_priority": ready,
        "delayed": q.delayed,
        "unacked": q.unacked,
    })
}

fn counts_json(counts: &BTreeMap<State, u64>) -> Value {
    let m: Map<String, Value> = State::ALL
        .iter()
        .map(|s| {
            (
                s.name().to_string(),
                json!(counts.get(s).copied().unwrap_or(0)),
            )
        })
        .collect();
    Value::Object(m)
}

/// Counts and queue lengths: what the live stream sends each tick.
pub(crate) async fn snapshot(inner: &Inner) -> Result<Value, Refused> {
    let (counts, queues) = match inner.app.inspector() {
        Some(i) => (i.counts().await?, i.queues().await?),
        None => (BTreeMap::new(), Vec::new()),
    };
    Ok(json!({
        "at": inner.app.now(),
        "counts": counts_json(&counts),
        "queues": queues.iter().map(queue_json).collect::<Vec<_>>(),
    }))
}

/// The newest event per run, newest first.
fn latest(events: Vec<RunEvent>) -> Vec<RunEvent> {
    let mut seen = HashSet::new();
    events
        .into_iter()
        .filter(|e| seen.insert(e.id.clone()))
        .collect()
}

async fn events(inner: &Inner) -> Result<Vec<RunEvent>, Refused> {
    match inner.app.inspector() {
        Some(i) => i.recent(EVENTS_READ).await,
        None => Ok(Vec::new()),
    }
}

/// `/api/overview`: queues, consumers, counts per state, counts per task
/// (from the recent events), the registered task names.
pub(crate) async fn overview(inner: &Inner) -> Result<Value, Refused> {
    let insp = inner.app.inspector();
    let (queues, consumers, counts) = match insp {
        Some(i) => (i.queues().await?, i.consumers().await?, i.counts().await?),
        None => Default::default(),
    };
    let mut per_task: BTreeMap<String, BTreeMap<State, u64>> = BTreeMap::new();
    for e in latest(events(inner).await?) {
        *per_task
            .entry(e.task)
            .or_default()
            .entry(e.state)
            .or_insert(0) += 1;
    }
    let names = inner.app.task_names();
    for n in &names {
        per_task.entry(n.clone()).or_default();
    }
    let registered: HashSet<&String> = names.iter().collect();
    let tasks: Vec<Value> = per_task
        .iter()
        .map(|(name, c)| {
            json!({
                "name": name,
                "registered": registered.contains(name),
                "counts": counts_json(c),
            })
        })
        .collect();
    let mut dead = Vec::with_capacity(queues.len());
    if let Some(i) = insp {
        for q in &queues {
            dead.push(json!({ "queue": q.name, "count": i.dead_count(&q.name).await? }));
        }
    }
    Ok(json!({
        "at": inner.app.now(),
        "read_only": inner.read_only,
        "dead": dead,
        "inspector": insp.is_some(),
        "queues": queues.iter().map(queue_json).collect::<Vec<_>>(),
        "consumers": consumers.iter().map(|c| json!({
            "name": c.name,
            "lease_until": c.lease_until,
            "holding": c.holding,
        })).collect::<Vec<_>>(),
        "workers": workers_json(&inner.app),
        "counts": counts_json(&counts),
        "tasks": tasks,
        "task_names": names,
    }))
}

/// The app's workers running in this process, with their runner threads:
/// `healthy` false while every one is stuck in a body past its timeout (the
/// worker claims nothing then).
fn workers_json(app: &crate::task::App) -> Vec<Value> {
    crate::task::runners::workers(app)
        .iter()
        .map(|w| {
            let mut out = Map::from_iter([("name".to_string(), json!(w.name))]);
            out.extend(w.runners.json());
            Value::Object(out)
        })
        .collect()
}

/// `/health`'s list: the app's workers here that cannot run a call.
pub(crate) fn stuck_workers(app: &crate::task::App) -> Vec<Value> {
    let mut all = workers_json(app);
    all.retain(|w| w["healthy"] == json!(false));
    all
}

fn event_json(e: &RunEvent) -> Value {
    json!({
        "id": e.id,
        "task": e.task,
        "state": e.state,
        "final": e.state.is_final(),
        "at": e.at,
        "worker": e.worker,
        "retries": e.retries,
        "runtime": e.runtime,
        "args": e.args,
        "detail": e.detail,
    })
}

/// Which runs a listing answers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub limit: usize,
    pub state: Option<State>,
    pub task: Option<String>,
}

/// `/api/runs`: the newest state of each recent run, newest first —
/// including runs this admin sent that no worker has recorded yet, with the
/// state the result store holds for them (PENDING when none).
pub(crate) async fn runs(inner: &Inner, f: &Filter) -> Result<Value, Refused> {
    let mut rows: Vec<(i64, Value)> = Vec::new();
    let latest = latest(events(inner).await?);
    let known: HashSet<&str> = latest.iter().map(|e| e.id.as_str()).collect();
    let sent: Vec<Sent> = inner
        .sent
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|s| !known.contains(s.id.as_str()))
        .cloned()
        .collect();
    for s in sent {
        // The result store can be ahead of the event log (a worker stores,
        // then records): a stored outcome brings its own detail, so a row
        // never says SUCCESS without the value.
        let (state, detail) = match inner.app.backend() {
            Some(b) => b
                .fetch(&s.id)
                .await?
                .map_or((State::Pending, None), |o| (o.state, outcome_detail(&o))),
            None => (State::Pending, None),
        };
        rows.push((
            s.at,
            json!({
                "id": s.id,
                "task": s.task,
                "state": state,
                "final": state.is_final(),
                "at": s.at,
                "worker": null,
                "retries": 0,
                "runtime": null,
                "args": s.args,
                "detail": detail,
                "queue": s.queue,
            }),
        ));
    }
    for e in &latest {
        rows.push((e.at, event_json(e)));
    }
    mark_revoked(inner, rows.iter_mut().map(|(_, v)| v)).await?;
    // Stable: among equal times, sent runs (listed first) stay first.
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    let runs: Vec<Value> = rows
        .into_iter()
        .map(|(_, v)| v)
        .filter(|v| {
            f.state.is_none_or(|s| v["state"] == json!(s))
                && f.task.as_ref().is_none_or(|t| v["task"] == json!(t))
        })
        .take(f.limit)
        .collect();
    Ok(json!({ "runs": runs }))
}

/// `/api/failures`: recent runs whose newest event is FAILURE, newest first.
pub(crate) async fn failures(inner: &Inner, limit: usize) -> Result<Value, Refused> {
    let failures: Vec<Value> = latest(events(inner).await?)
        .iter()
        .filter(|e| e.state == State::Failure)
        .take(limit)
        .map(event_json)
        .collect();
    Ok(json!({ "failures": failures }))
}

/// Shows runs that are revoked but not yet settled (still queued, or
/// waiting for an eta) as REVOKED: a worker will skip them, so a page that
/// keeps offering "Revoke" for them would mislead. `revoked: true` and the
/// detail say that no worker has recorded it yet.
async fn mark_revoked<'a>(
    inner: &Inner,
    rows: impl Iterator<Item = &'a mut Value>,
) -> Result<(), Refused> {
    let mut open: Vec<&'a mut Value> = rows.filter(|v| v["final"] != json!(true)).collect();
    if open.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = open
        .iter()
        .map(|v| v["id"].as_str().unwrap_or_default().to_string())
        .collect();
    let revoked = inner.app.broker().revoked(&ids).await?;
    for (v, r) in open.iter_mut().zip(revoked) {
        if r {
            v["state"] = json!(State::Revoked);
            v["final"] = json!(true);
            v["revoked"] = json!(true);
            v["detail"] = json!(REVOKED_WAITING);
        }
    }
    Ok(())
}

/// What a worker's event would say of a stored outcome: the value as JSON
/// for a success, the error (and its traceback) otherwise.
fn outcome_detail(o: &Outcome) -> Option<String> {
    let text = match (&o.result, &o.error) {
        (Some(v), _) if o.state == State::Success => serde_json::to_string(v).ok()?,
        (_, Some(f)) => match &f.traceback {
            Some(tb) => format!("{f}\n{tb}"),
            None => f.to_string(),
        },
        _ => return None,
    };
    Some(truncate(text, EVENT_TEXT_MAX))
}

/// The detail of a run revoked before any worker recorded it.
const REVOKED_WAITING: &str = "revoked: a worker will skip it when it comes up";

fn cut(text: String) -> String {
    truncate(text, DETAIL_MAX)
}

/// `/api/runs/<id>`: the stored outcome (result and traceback cut to
/// [`DETAIL_MAX`]), and the run's recent events.
pub(crate) async fn run(inner: &Inner, id: &str) -> Result<Value, Refused> {
    let stored = match inner.app.backend() {
        Some(b) => b.fetch(id).await?,
        None => None,
    };
    let evs: Vec<Value> = events(inner)
        .await?
        .iter()
        .filter(|e| e.id == id)
        .map(event_json)
        .collect();
    let sent_task = inner
        .sent
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|s| s.id == id)
        .map(|s| s.task.clone());
    let mut out = json!({
        "id": id,
        "stored": stored.is_some(),
        "events": evs,
    });
    let o = &mut out;
    match stored {
        Some(s) => {
            o["state"] = json!(s.state);
            o["final"] = json!(s.state.is_final());
            o["task"] = json!(s.task);
            o["at"] = json!(s.at);
            o["retries"] = json!(s.retries);
            if let Some(r) = s.result {
                let text = serde_json::to_string(&r).unwrap_or_default();
                if text.len() > DETAIL_MAX {
                    o["result_text"] = json!(cut(text));
                    o["result_truncated"] = json!(true);
                } else {
                    o["result"] = r;
                }
            }
            if let Some(e) = s.error {
                o["error"] = json!({
                    "kind": truncate(e.kind, EVENT_TEXT_MAX),
                    "message": cut(e.message),
                    "traceback": e.traceback.map(cut),
                });
            }
        }
        None => {
            o["state"] = json!(State::Pending);
            o["final"] = json!(false);
            o["task"] = json!(sent_task);
        }
    }
    o["stored_state"] = o["state"].clone();
    mark_revoked(inner, std::iter::once(&mut *o)).await?;
    Ok(out)
}

/// `bytes` as text that shows what they are: valid UTF-8 as itself, except
/// `\`, control characters and invalid bytes, which are escaped (`\n`,
/// `\x00`, `\u{85}`, `\x80`), cut at [`PREVIEW_MAX`] bytes of input. A
/// pickle reads as `\x80\x04…`, JSON as JSON; the page still renders it as
/// text only.
pub fn preview(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(PREVIEW_MAX)];
    let mut out = String::with_capacity(cut.len() + 16);
    for chunk in cut.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if bytes.len() > cut.len() {
        out.push('…');
    }
    out
}

fn dead_json(d: &DeadLetter) -> Value {
    json!({
        "queue": d.queue,
        "id": d.id,
        "reason": d.reason,
        "at": d.at,
        "size": d.size,
        "preview": preview(&d.raw),
        "truncated": d.raw.len() > PREVIEW_MAX,
    })
}

/// `/api/dead?queue=`: how many dead letters `queue` keeps and the newest
/// `limit` of them, each with its reason, size and an escaped preview of
/// its bytes (never the bytes themselves: they may be anything).
pub(crate) async fn dead(inner: &Inner, queue: &str, limit: usize) -> Result<Value, Refused> {
    let (count, letters) = match inner.app.inspector() {
        Some(i) => (
            i.dead_count(queue).await?,
            i.dead_letters(queue, limit).await?,
        ),
        None => (0, Vec::new()),
    };
    Ok(json!({
        "queue": queue,
        "count": count,
        "letters": letters.iter().map(dead_json).collect::<Vec<_>>(),
    }))
}

/// `/api/audit`: the changes this admin made, newest first.
pub(crate) fn audit(inner: &Inner) -> Value {
    let log = inner.audit.lock().unwrap_or_else(|e| e.into_inner());
    json!({ "audit": log.iter().rev().cloned().collect::<Vec<_>>() })
}
