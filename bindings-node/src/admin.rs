//! The admin interface for Node: the core's `Admin` behind `NativeAdmin`,
//! which `bindings-node/lib/admin.js` drives from a `(req, res)` handler.
//!
//! No rules here: the handler hands over the method, the URL below the
//! mount point, the raw headers and the body; the core answers the status,
//! headers and body, or the head of a live stream whose frames `next(id)`
//! gives one at a time. Answers are the hub's (`tasks/hub.rs`): a reply the
//! core has at once (the memory broker) comes back from the call itself,
//! anything slower as a ticket answered through the environment's bell.
//!
//! A stream is kept by number (the core's `Streams`) until `close(id)`,
//! which also ends a `next` still waiting for its tick, so a page that goes
//! away leaves no outstanding ticket and nothing keeps the process alive.

use std::convert::identity;
use std::sync::Arc;

use headway_core::admin::{
    Admin, AdminConfig, EventStream, Reply, Request, Streams, declared_over,
};
use headway_core::task::Refused;
use napi::bindgen_prelude::Buffer;
use napi_derive::napi;
use serde::Serialize;

use crate::raw::invalid_arg;
use crate::tasks::app::NativeApp;
use crate::tasks::hub::{Answer, drive, json};

/// One admin over one app (`lib/admin.js`'s `handler` wraps it).
#[napi]
pub struct NativeAdmin {
    inner: Admin,
    streams: Arc<Streams<EventStream>>,
}

/// A reply as `lib/admin.js` reads it.
#[derive(Serialize)]
struct ReplyOut<'a> {
    status: u16,
    /// `[[name, value], ...]`, in order (`Set-Cookie` may repeat).
    headers: &'a [(String, String)],
    /// The body as text: every body the core makes is UTF-8 (the page, its
    /// script and style, JSON, plain text).
    body: std::borrow::Cow<'a, str>,
    /// The stream's number for `next`/`close`, or `null`.
    stream: Option<u32>,
}

fn render(reply: Reply, streams: &Streams<EventStream>) -> String {
    let (head, stream) = match reply {
        Reply::Full(r) => (r, None),
        Reply::Stream(r, s) => (r, Some(s)),
    };
    let id = stream.map(|s| streams.open(s));
    let out = ReplyOut {
        status: head.status,
        headers: &head.headers,
        body: String::from_utf8_lossy(&head.body),
        stream: id,
    };
    serde_json::to_string(&out).unwrap_or_else(|_| "null".into())
}

/// Node's flat `rawHeaders` (`[name, value, ...]`) as `(name, value)` pairs.
fn pairs(headers: Vec<String>) -> Vec<(String, String)> {
    let mut pairs = Vec::with_capacity(headers.len() / 2);
    let mut it = headers.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        pairs.push((k, v));
    }
    pairs
}

#[napi]
impl NativeAdmin {
    /// An admin over `app`. `token` null or empty: one is generated
    /// (`tokenGenerated`). `maxBody` null: the core's 64 KiB.
    #[napi(constructor, catch_unwind)]
    pub fn new(
        app: &NativeApp,
        token: Option<String>,
        read_only: bool,
        max_body: Option<f64>,
        allowed_origins: Option<Vec<String>>,
    ) -> napi::Result<Self> {
        let max_body = AdminConfig::max_body_of(headway_core::task::Host::Node, max_body)
            .map_err(invalid_arg)?;
        let cfg = AdminConfig {
            token,
            read_only,
            max_body,
            allowed_origins: allowed_origins.unwrap_or_default(),
        };
        let inner = Admin::new(app.core().clone(), cfg).map_err(invalid_arg)?;
        Ok(NativeAdmin {
            inner,
            streams: Arc::default(),
        })
    }

    /// The token: the one given or the one generated.
    #[napi(getter)]
    pub fn token(&self) -> String {
        self.inner.token().to_string()
    }

    /// Whether the token was generated (and so must be printed).
    #[napi(getter, js_name = "tokenGenerated")]
    pub fn token_generated(&self) -> bool {
        self.inner.token_generated()
    }

    /// Whether every change is refused.
    #[napi(getter, js_name = "readOnly")]
    pub fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    /// The most body bytes worth reading: past it the answer is 413 anyway.
    #[napi(getter, js_name = "maxBody")]
    pub fn max_body(&self) -> u32 {
        u32::try_from(self.inner.max_body()).unwrap_or(u32::MAX)
    }

    /// How many streams are open (tests: none is left behind).
    #[napi(getter, js_name = "openStreams")]
    pub fn open_streams(&self) -> u32 {
        self.streams.len() as u32
    }

    /// Answers one request: `headers` flat as Node's `req.rawHeaders`
    /// (`[name, value, name, value, ...]`). The answer's JSON text is
    /// `{status, headers, body, stream}`. `mount` is Express's `baseUrl`,
    /// `tls` whether the socket is encrypted, `peer` its remote address:
    /// one positional argument each, as JS passes them.
    /// Whether `headers` (`req.rawHeaders`) declare a body past `maxBody`
    /// (the core's Content-Length rule, as Python's admin asks it): it is
    /// refused (413) whatever comes, so none of it is read.
    #[napi(js_name = "declaresOver", catch_unwind)]
    pub fn declares_over(&self, headers: Vec<String>) -> bool {
        declared_over(&pairs(headers), self.inner.max_body())
    }

    #[napi(catch_unwind)]
    #[allow(clippy::too_many_arguments)]
    pub fn handle(
        &self,
        method: String,
        path: String,
        headers: Vec<String>,
        body: Buffer,
        mount: Option<String>,
        tls: Option<bool>,
        peer: Option<String>,
    ) -> napi::Result<Answer> {
        let req = Request {
            method,
            path,
            headers: pairs(headers),
            body: body.to_vec(),
            mount: mount.unwrap_or_default(),
            tls: tls.unwrap_or(false),
            peer,
        };
        let admin = self.inner.clone();
        let streams = self.streams.clone();
        drive(
            async move {
                let reply = admin.handle(req).await;
                Ok::<_, Refused>(render(reply, &streams))
            },
            identity,
        )
    }

    /// The next frame of stream `id` as JSON text (a string), or `null` once
    /// it is closed (or unknown). The first comes at once, then one per core
    /// tick.
    #[napi(catch_unwind)]
    pub fn next(&self, id: u32) -> napi::Result<Answer> {
        let next = self.streams.next(id);
        drive(
            async move {
                let frame = next
                    .await
                    .map_err(|busy| Refused::Invalid(format!("admin stream: {busy}")))?;
                Ok(frame.map_or_else(|| "null".into(), |b| json(String::from_utf8_lossy(&b))))
            },
            identity,
        )
    }

    /// Drops stream `id` and ends a `next` waiting on it. Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&self, id: u32) {
        self.streams.close(id);
    }

    /// Closes every open stream: what a stopping server calls, since a
    /// stream never ends by itself.
    #[napi(js_name = "closeAll", catch_unwind)]
    pub fn close_all(&self) {
        self.streams.close_all();
    }
}
