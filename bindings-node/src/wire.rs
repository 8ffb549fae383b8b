//! The event loop's own socket for the shared limits (`lib/wire.js`): the
//! core's `limit::wire::Wire`, one per URL per environment, in a slab that
//! JS names by number.
//!
//! No rules here: a call is queued on the wire when the core takes it, or
//! made on the shared link (the hub's `drive`) when the core says the wire
//! is down or does not serve the URL; replies are read by the limit's own
//! `answer`; calls a lost socket hands back are made again on the shared
//! link under the tickets JS already waits on.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Instant;

use headway_core::limit::wire::{Fed, Wire};
use headway_core::limit::{Asked, Limit, Req, Waiting};
use headway_core::task::Refused;
use napi::bindgen_prelude::{BufferSlice, Either, Either3};
use napi_derive::napi;

use crate::tasks::Refusal;
use crate::tasks::hub::{Answer, Settled, drive, hub, render, spawn_ticketed};

/// What the binding keeps for a call on the wire: its ticket, and the
/// core's reading of its reply as the JSON text JS parses.
struct Call {
    ticket: u32,
    waiting: Waiting<String>,
}

thread_local! {
    static WIRES: RefCell<Vec<Wire<Call>>> = const { RefCell::new(Vec::new()) };
    static BY_URL: RefCell<HashMap<String, Option<u32>>> = RefCell::new(HashMap::new());
}

/// The wire for `url` in this environment, or `None` when the core serves
/// that URL on the shared link only.
pub(crate) fn wire_for(url: &str) -> Option<u32> {
    BY_URL.with(|m| {
        *m.borrow_mut().entry(url.to_string()).or_insert_with(|| {
            let w = Wire::new(url).ok().flatten()?;
            WIRES.with(|ws| {
                let mut ws = ws.borrow_mut();
                ws.push(w);
                Some(ws.len() as u32 - 1)
            })
        })
    })
}

fn with<R>(id: u32, f: impl FnOnce(&mut Wire<Call>) -> R) -> napi::Result<R> {
    WIRES.with(|ws| {
        ws.borrow_mut()
            .get_mut(id as usize)
            .map(f)
            .ok_or_else(|| napi::Error::from_reason(format!("headway: no wire {id}")))
    })
}

/// One of `limit`'s methods, asked of the core: made on the wire `id`
/// when there is one and the core takes it, else on the shared link;
/// `render` makes the JSON text JS parses. A refused ask (a bad argument)
/// is the answer.
pub(crate) fn call<L: Limit, T: Send + 'static>(
    id: Option<u32>,
    limit: &L,
    asked: Result<Asked<L::Answer, T>, Refused>,
    render: fn(T) -> String,
) -> napi::Result<Answer> {
    match asked {
        Ok(a) => call_with(id, limit, a.req, a.pick, render),
        Err(e) => Ok(Either3::C(Refusal::from(e))),
    }
}

/// [`call`] with the part of the answer taken by `pick` (a method whose
/// answer holds more than the core's reply, as a gate's permit).
pub(crate) fn call_with<L: Limit, T: Send + 'static>(
    id: Option<u32>,
    limit: &L,
    req: Req,
    pick: impl FnOnce(L::Answer) -> T + Send + 'static,
    render: fn(T) -> String,
) -> napi::Result<Answer> {
    let Some(id) = id else {
        let run = limit.run(req);
        return drive(async move { run.await.map(pick) }, render);
    };
    let ticket = hub()?.ticket();
    let c = Call {
        ticket,
        waiting: Waiting::new(limit.clone(), move |a| render(pick(a))),
    };
    if let Err((req, c)) = with(id, |w| w.push(Instant::now(), req, c))? {
        again(c, req);
    }
    Ok(Either3::B(ticket))
}

/// `req` made on the shared link under the ticket JS already holds.
fn again(c: Call, req: Req) {
    // Only fails without a hub, which made the ticket.
    let _ = spawn_ticketed(c.ticket, c.waiting.again(req), |text| text);
}

/// Where wire `id`'s socket goes: `[host, port, timeout ms]`.
#[napi(js_name = "_wireAddress", catch_unwind)]
pub fn wire_address(id: u32) -> napi::Result<(String, u32, f64)> {
    with(id, |w| {
        let (host, port) = w.address();
        (
            host.to_string(),
            u32::from(port),
            w.timeout().as_secs_f64() * 1e3,
        )
    })
}

/// The bytes to write on wire `id`'s socket now, or `null`.
#[napi(js_name = "_wireFlush", catch_unwind)]
pub fn wire_flush(id: u32) -> napi::Result<Option<String>> {
    with(id, |w| w.flush().map(|(text, _)| text))
}

/// Bytes wire `id`'s socket read: the settled tickets as `_hubDrain`'s
/// text, `null` when none, or `false` when the socket is done (close it
/// and call `_wireLost`). When bytes wait to be written (a call queued
/// again as `EVAL`) the text starts with a space, `true` when nothing
/// settled: JS then calls `_wireFlush` — a call it saves on every other
/// reply.
#[napi(js_name = "_wireFeed", catch_unwind)]
pub fn wire_feed(id: u32, bytes: BufferSlice) -> napi::Result<Option<Either<String, bool>>> {
    let (fed, unsent) = with(id, |w| {
        let fed = w.feed(&bytes);
        (fed, w.unsent())
    })?;
    match fed {
        Fed::Answers(a) if a.is_empty() => Ok(unsent.then_some(Either::B(true))),
        Fed::Answers(a) => {
            let done: Vec<(u32, Settled)> = a
                .into_iter()
                .map(|(c, r)| (c.ticket, c.waiting.finish(r).map_err(Refusal::from)))
                .collect();
            hub()?.answered(done.len());
            let text = render(&done);
            Ok(Some(Either::A(if unsent {
                format!(" {text}")
            } else {
                text
            })))
        }
        Fed::Broken => Ok(Some(Either::B(false))),
    }
}

/// Whether calls on wire `id` wait for replies.
#[napi(js_name = "_wireBusy", catch_unwind)]
pub fn wire_busy(id: u32) -> napi::Result<bool> {
    with(id, |w| w.busy())
}

/// Wire `id`'s socket closed: the calls it carried are made again on the
/// shared link. `random` in [0, 1) draws the backoff's jitter.
#[napi(js_name = "_wireLost", catch_unwind)]
pub fn wire_lost(id: u32, random: f64) -> napi::Result<()> {
    for (req, c) in with(id, |w| w.lost(Instant::now(), random))? {
        again(c, req);
    }
    Ok(())
}
