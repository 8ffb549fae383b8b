//! The admin interface: a page, JSON reports, sending, revoking and a live
//! stream of counts — all its rules here, once, for every language.
//!
//! The core answers a [`Request`] (method, path, headers, body) with a
//! [`Reply`]; the Python ASGI adapter and the Node `(req, res)` adapter only
//! convert the request and pump the reply, so routes, validation, auth,
//! escaping and the page itself cannot differ between them.
//!
//! Security, after Flower's history (an admin page left open, or open to
//! cross-site requests, is how task dashboards get taken over):
//! - every route but `/health` (and the login page and its style) needs the
//!   token, compared in constant time — as `Authorization: Bearer`, or
//!   posted once to `/login` for a session cookie (see [`session`]); with
//!   none configured one is generated ([`Admin::token`]) for the adapter to
//!   print, and a configured one under [`TOKEN_MIN`] characters is refused;
//! - a change is a POST with `Authorization: Bearer <token>`, or with the
//!   session cookie plus the page's CSRF value (`X-CSRF-Token`) and an
//!   `Origin`/`Referer` of this host or of `allowed_origins`; GET never
//!   changes anything; read-only mode refuses every POST (403);
//! - sending takes registered tasks only, JSON only, within `max_body`;
//! - every change made (send, revoke, re-queueing or purging dead letters)
//!   is kept in an audit log (`/api/audit`): when, how the caller proved
//!   itself, what, and what came of it;
//! - every reply carries CSP `default-src 'self'; frame-ancestors 'none'`,
//!   `nosniff`, `no-referrer` and `no-store`; JSON escapes `<`, `>`, `&`; the
//!   page renders data as text only.

mod auth;
mod body;
mod config;
mod http;
mod page;
mod remote;
mod reports;
mod routes;
mod session;
mod slot;
mod stream;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

pub use auth::{COOKIE, CSRF_HEADER};
pub use body::{declared_length, declared_over};
pub use http::{CSP, Reply, Request, Response, safe_json};
pub use page::{APP_JS, STYLE_CSS};
pub use reports::{DEAD_DEFAULT, DETAIL_MAX, EVENTS_READ, PREVIEW_MAX, RUNS_DEFAULT, preview};
pub use session::{
    LOGIN_FAILS_GLOBAL, LOGIN_FAILS_PER_CLIENT, SESSION_MAX_AGE_S, SESSIONS_MAX, TOKEN_MIN,
};
pub use slot::{NEXT_BUSY, StreamSlot, Streams};
pub use stream::{EventStream, RETRY_MS, SHARED_FOR, STREAMS_MAX, TICK};

use crate::task::{App, Refused};

/// The largest request body the admin reads: 64 KiB. A send's args are meant
/// to be a few values typed into a form; anything bigger belongs in the
/// producer's code. (Celery leaves size to the broker; Flower has no cap.)
pub const MAX_BODY: usize = 64 * 1024;

/// How many runs sent from the admin it remembers to list before a worker
/// records them: 100.
pub const SENT_KEPT: usize = 100;

/// How many changes the audit log keeps (the oldest go first): 1 000, a
/// long day of an operator's clicks, in a few hundred KiB at most — an
/// entry keeps the count of the ids a change named, never the ids, and at
/// most 128 bytes of any one text, so it stays under 1 KiB.
pub const AUDIT_KEPT: usize = 1000;

/// How an admin is set up.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// The token every route but `/health` needs. `None` (or empty): one is
    /// generated — 32 random bytes, base64url — and [`Admin::token`] answers
    /// it for the adapter to print at start. A configured one shorter than
    /// [`TOKEN_MIN`] characters is refused by [`Admin::new`].
    pub token: Option<String>,
    /// Refuse every change (send, revoke, re-queueing or purging dead
    /// letters) with 403: a page to look at, like Bull Board's read-only
    /// mode.
    pub read_only: bool,
    /// The largest request body read ([`MAX_BODY`] by default).
    pub max_body: usize,
    /// Origins besides this host's own (`https://ops.example.com`) whose
    /// pages may make changes with the session cookie. Compared exactly (case
    /// aside), never as patterns: Flower's unanchored regex let
    /// `x@example.com.evil.com` in (CVE-2022-30034).
    pub allowed_origins: Vec<String>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            token: None,
            read_only: false,
            max_body: MAX_BODY,
            allowed_origins: Vec::new(),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) app: App,
    pub(crate) token: String,
    pub(crate) generated: bool,
    /// The live sessions, one per login: the cookie carries a session's id
    /// (never the token), and its page its own CSRF value.
    pub(crate) sessions: Mutex<session::Sessions>,
    /// The failed-login buckets.
    pub(crate) limits: Mutex<session::Limits>,
    pub(crate) read_only: bool,
    pub(crate) max_body: usize,
    pub(crate) allowed_origins: Vec<String>,
    pub(crate) sent: Mutex<VecDeque<reports::Sent>>,
    /// The changes made, oldest first (see [`AUDIT_KEPT`]).
    pub(crate) audit: Mutex<VecDeque<serde_json::Value>>,
    /// What the live streams share: one snapshot, and the count of them.
    pub(crate) hub: stream::Hub,
}

/// One admin over one app. Cheap to clone (shared).
#[derive(Clone)]
pub struct Admin {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("read_only", &self.inner.read_only)
            .field("max_body", &self.inner.max_body)
            .field("allowed_origins", &self.inner.allowed_origins)
            .finish_non_exhaustive()
    }
}

impl Admin {
    /// An admin over `app` set up by `cfg`. Sessions live in this admin
    /// only, so restarting it logs every page out.
    ///
    /// Refused ([`Refused::Invalid`], naming `token`): a configured token
    /// shorter than [`TOKEN_MIN`] characters.
    pub fn new(app: App, cfg: AdminConfig) -> Result<Admin, Refused> {
        let (token, generated) = match cfg.token {
            Some(t) if !t.is_empty() => {
                session::check_token(&t)?;
                (t, false)
            }
            _ => (auth::generate(), true),
        };
        let now = app.now();
        Ok(Admin {
            inner: Arc::new(Inner {
                app,
                token,
                generated,
                sessions: Mutex::new(session::Sessions::default()),
                limits: Mutex::new(session::Limits::new(now)),
                read_only: cfg.read_only,
                max_body: cfg.max_body,
                allowed_origins: cfg
                    .allowed_origins
                    .iter()
                    .map(|o| auth::normalise_origin(o))
                    .collect(),
                sent: Mutex::new(VecDeque::new()),
                audit: Mutex::new(VecDeque::new()),
                hub: stream::Hub::default(),
            }),
        })
    }

    /// The token: the configured one, or the one generated for the adapter
    /// to print (to be typed into the login form, never put in a URL).
    pub fn token(&self) -> &str {
        &self.inner.token
    }

    /// Whether the token was generated rather than configured, i.e. whether
    /// the adapter must print it for anyone to get in.
    pub fn token_generated(&self) -> bool {
        self.inner.generated
    }

    /// Whether every change is refused.
    pub fn read_only(&self) -> bool {
        self.inner.read_only
    }

    /// The largest body the adapter needs to read: a longer one is refused
    /// (413) whatever is passed, so an adapter may stop reading past it.
    pub fn max_body(&self) -> usize {
        self.inner.max_body
    }

    /// How many live streams are open now (at most [`STREAMS_MAX`]).
    pub fn streams(&self) -> usize {
        self.inner.hub.streams()
    }

    /// The app it reports on.
    pub fn app(&self) -> &App {
        &self.inner.app
    }

    /// Answers one request: a response, or the head and frames of the live
    /// stream. Never panics on any input; every reply carries the security
    /// headers.
    pub async fn handle(&self, req: Request) -> Reply {
        routes::handle(&self.inner, req).await
    }
}
