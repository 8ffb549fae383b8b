//! Logging in and out: the token traded for a session by a POST form, the
//! session cookie, and the limit on failed logins.
//!
//! Why each rule:
//! - The token comes in a POST body (`POST /login`, a form or JSON), never
//!   in a URL: a `?token=` lands in access logs, proxy logs and the
//!   browser's history. `GET /?token=` is no login — it answers a redirect
//!   to the page without a session, so the token at least leaves the
//!   address bar.
//! - Each login gets a session of its own (a fresh random id and CSRF
//!   value), kept on the server for [`SESSION_MAX_AGE_S`] of the app's
//!   clock; `POST /logout` forgets it, so its cookie is refused from then
//!   on, even where a copy of it survives.
//! - The cookie is `HttpOnly; SameSite=Strict`, its `Path` is where the
//!   admin is mounted, its `Max-Age` the session's, and it is `Secure` when
//!   the request came over TLS or a proxy says `X-Forwarded-Proto: https`
//!   (trusting that header can only make the cookie stricter: a client that
//!   lies gets a cookie its plain-HTTP browser will not send back).
//! - A configured token under [`TOKEN_MIN`] characters is refused at start:
//!   it could be guessed.
//! - A failed login is logged (stderr, like the core's other warnings) and
//!   taken from two [`Bucket`]s: one per client address (as the server saw
//!   it, never a header) and one for everyone. While either is empty every
//!   login — right token or not — is answered 429 with `Retry-After`, so
//!   guessing costs minutes per handful of tries, from any number of
//!   addresses.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::Inner;
use super::auth::{self, COOKIE};
use super::http::{Request, Response, query_pairs};
use super::page;
use crate::flow::Bucket;
use crate::task::Refused;

/// The shortest token an admin accepts: 16 characters. A generated one is
/// 43 (256 bits).
pub const TOKEN_MIN: usize = 16;

/// How long a session lasts: 12 hours, a working day with margin; the
/// cookie's `Max-Age` says the same.
pub const SESSION_MAX_AGE_S: i64 = 12 * 3600;

/// The most sessions kept at once: 1 000. Past it, the one that would end
/// soonest is dropped, so logins cannot grow memory without bound.
pub const SESSIONS_MAX: usize = 1000;

/// Failed logins one client address may make in a burst: 5, refilled at 5
/// a minute.
pub const LOGIN_FAILS_PER_CLIENT: f64 = 5.0;

/// Failed logins everyone together may make in a burst: 20, refilled at
/// 20 a minute — the bound on guessing from many addresses at once.
pub const LOGIN_FAILS_GLOBAL: f64 = 20.0;

/// How many client addresses' buckets are kept: 10 000; past it, full
/// (idle) ones are dropped first.
const CLIENTS_MAX: usize = 10_000;

/// One login's session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// The CSRF value its page carries.
    pub(crate) csrf: String,
    /// When it ends (app ms).
    expires: i64,
}

/// Every live session, by the id its cookie carries.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    by_id: HashMap<String, Session>,
}

impl Sessions {
    /// A new session at `now`: its id (the cookie's value) and CSRF value.
    fn open(&mut self, now: i64) -> (String, Session) {
        self.by_id.retain(|_, s| s.expires > now);
        if self.by_id.len() >= SESSIONS_MAX
            && let Some(first) = self
                .by_id
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
        {
            self.by_id.remove(&first);
        }
        let id = auth::generate();
        let s = Session {
            csrf: auth::generate(),
            expires: now.saturating_add(SESSION_MAX_AGE_S * 1000),
        };
        self.by_id.insert(id.clone(), s.clone());
        (id, s)
    }

    /// The live session with id `id` at `now`.
    pub(crate) fn get(&self, id: &str, now: i64) -> Option<&Session> {
        self.by_id.get(id).filter(|s| s.expires > now)
    }

    fn close(&mut self, id: &str) -> bool {
        self.by_id.remove(id).is_some()
    }
}

/// The failed-login buckets.
#[derive(Debug)]
pub(crate) struct Limits {
    per_client: HashMap<String, Bucket>,
    global: Bucket,
}

fn per_minute(n: f64, at: i64) -> Bucket {
    Bucket::new(n / 60.0, Some(n), at).expect("a positive finite rate")
}

impl Limits {
    pub(crate) fn new(at_ms: i64) -> Limits {
        Limits {
            per_client: HashMap::new(),
            global: per_minute(LOGIN_FAILS_GLOBAL, ns(at_ms)),
        }
    }

    /// How long (ns) until `client` may try again; 0 when it may now.
    fn wait(&self, client: &str, now: i64) -> i64 {
        let mine = self.per_client.get(client).map_or(0, |b| b.next(now, 1.0));
        mine.max(self.global.next(now, 1.0))
    }

    /// Takes one failed login from `client`'s bucket and the global one.
    fn fail(&mut self, client: &str, now: i64) {
        if !self.per_client.contains_key(client) && self.per_client.len() >= CLIENTS_MAX {
            self.per_client
                .retain(|_, b| b.tokens(now) < LOGIN_FAILS_PER_CLIENT);
            if self.per_client.len() >= CLIENTS_MAX
                && let Some(k) = self.per_client.keys().next().cloned()
            {
                self.per_client.remove(&k);
            }
        }
        self.per_client
            .entry(client.to_string())
            .or_insert_with(|| per_minute(LOGIN_FAILS_PER_CLIENT, now))
            .take(now, 1.0);
        self.global.take(now, 1.0);
    }
}

fn ns(ms: i64) -> i64 {
    ms.saturating_mul(1_000_000)
}

/// The configured token, refused when it is too short to be a secret.
pub(crate) fn check_token(token: &str) -> Result<(), Refused> {
    let n = token.chars().count();
    if n < TOKEN_MIN {
        return Err(Refused::Invalid(format!(
            "invalid `token`: must be at least {TOKEN_MIN} characters, got {n}; \
             leave it out to have one generated"
        )));
    }
    Ok(())
}

/// Where the admin is mounted, as a cookie `Path` and a URL prefix: `""` at
/// the root, else `/a/b` without a trailing `/`. A mount holding anything
/// but URL path characters is taken as the root, so it cannot add cookie
/// attributes.
pub(crate) fn mount(req: &Request) -> &str {
    let m = req.mount.trim_end_matches('/');
    let ok = m.starts_with('/')
        && m.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"/-._~%!$&'()*+=:@".contains(&c));
    if ok { m } else { "" }
}

/// Whether the cookie must be `Secure`: the request came over TLS, or the
/// proxy in front says the client's did.
fn secure(req: &Request) -> bool {
    req.tls
        || req.get("x-forwarded-proto").is_some_and(|v| {
            v.split(',')
                .next()
                .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"))
        })
}

/// The `Set-Cookie` value for session `id` (empty with `max_age` 0: the
/// cookie cleared).
fn cookie(req: &Request, id: &str, max_age: i64) -> String {
    let path = match mount(req) {
        "" => "/",
        m => m,
    };
    let mut c = format!("{COOKIE}={id}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict");
    if secure(req) {
        c.push_str("; Secure");
    }
    c
}

/// The login page (status `status`) with one of this module's own messages.
pub(crate) fn login_page(req: &Request, status: u16, message: &str) -> Response {
    Response::with(
        status,
        "text/html; charset=utf-8",
        page::login(mount(req), message),
    )
}

/// The token a login body carries: a form (`token=...`) or JSON
/// (`{"token": "..."}`).
fn token_in(req: &Request) -> Option<String> {
    let media = req
        .get("content-type")
        .and_then(|ct| ct.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase());
    match media.as_deref() {
        Some("application/json") => match serde_json::from_slice::<Value>(&req.body).ok()? {
            Value::Object(mut m) => match m.remove("token") {
                Some(Value::String(t)) => Some(t),
                _ => None,
            },
            _ => None,
        },
        None | Some("application/x-www-form-urlencoded") => {
            let text = std::str::from_utf8(&req.body).ok()?;
            query_pairs(text)
                .into_iter()
                .find(|(k, _)| k == "token")
                .map(|(_, v)| v)
        }
        Some(_) => None,
    }
}

/// Whether the request wants a page back (a browser's form) rather than
/// JSON.
fn wants_json(req: &Request) -> bool {
    req.get("content-type").is_some_and(|ct| {
        ct.trim()
            .to_ascii_lowercase()
            .starts_with("application/json")
    })
}

fn refuse(req: &Request, status: u16, code: &str, message: &str) -> Response {
    if wants_json(req) {
        Response::error(status, code, message)
    } else {
        login_page(req, status, message)
    }
}

/// `POST /login`: the token in the body; a session cookie and a 303 to the
/// page when it is right.
pub(crate) fn login(inner: &Inner, req: &Request) -> Response {
    if req.body.len() > inner.max_body {
        return Response::error(
            413,
            "too_large",
            format!("the body is over {} bytes", inner.max_body),
        );
    }
    // A page elsewhere may not post a login here. (A login forged from
    // elsewhere would need the token anyway, so a form without an origin —
    // `Origin: null` under this admin's `no-referrer` — is let through.)
    if auth::names_other_origin(inner, req) {
        return refuse(
            req,
            403,
            "origin",
            "a login must come from this admin's own page",
        );
    }
    let now = inner.app.now();
    let client = req.peer.as_deref().unwrap_or("unknown");
    let wait = inner
        .limits
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .wait(client, ns(now));
    if wait > 0 {
        let secs = (wait as u64).div_ceil(1_000_000_000).max(1);
        return refuse(
            req,
            429,
            "too_many_logins",
            "too many failed logins: wait a minute and try again",
        )
        .and("Retry-After", secs.to_string());
    }
    let given = token_in(req).unwrap_or_default();
    if given.is_empty() || !auth::same(&given, &inner.token) {
        inner
            .limits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .fail(client, ns(now));
        crate::log::warn(
            "headway.admin",
            format_args!("headway admin: failed login from {client}"),
        );
        return refuse(req, 401, "unauthorized", "that is not this admin's token");
    }
    let (id, _) = inner
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .open(now);
    let to = format!("{}/", mount(req));
    let r = if wants_json(req) {
        Response::json(200, &json!({ "logged_in": true }))
    } else {
        Response::with(303, "text/plain; charset=utf-8", b"see the page".to_vec())
            .and("Location", to)
    };
    r.and("Set-Cookie", cookie(req, &id, SESSION_MAX_AGE_S))
}

/// `POST /logout` (the session's own CSRF value and origin, like a change):
/// the session is forgotten on the server and the cookie cleared.
pub(crate) fn logout(inner: &Inner, req: &Request) -> Response {
    let Some(id) = auth::cookie(req, COOKIE) else {
        return Response::error(400, "no_session", "there is no session to log out of");
    };
    if let Err(r) = auth::csrf_and_origin(inner, req) {
        return r;
    }
    inner
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .close(id);
    Response::json(200, &json!({ "logged_out": true })).and("Set-Cookie", cookie(req, "", 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_cannot_add_cookie_attributes() {
        let r = |m: &str| Request::new("GET", "/").mount(m);
        assert_eq!(mount(&r("/admin/")), "/admin");
        assert_eq!(mount(&r("")), "");
        assert_eq!(mount(&r("/a; Domain=evil")), "");
        assert_eq!(mount(&r("admin")), "");
        assert_eq!(
            cookie(&r("/x"), "v", 5),
            "headway_admin=v; Path=/x; Max-Age=5; HttpOnly; SameSite=Strict"
        );
        assert!(cookie(&r("").tls(true), "v", 5).ends_with("; Secure"));
    }

    #[test]
    fn sessions_expire_and_are_capped() {
        let mut s = Sessions::default();
        let (a, _) = s.open(0);
        assert!(s.get(&a, SESSION_MAX_AGE_S * 1000 - 1).is_some());
        assert!(s.get(&a, SESSION_MAX_AGE_S * 1000).is_none());
        for i in 0..SESSIONS_MAX + 5 {
            s.open(i as i64);
        }
        assert_eq!(s.by_id.len(), SESSIONS_MAX);
        assert!(s.get(&a, 1).is_none(), "the soonest to end went first");
    }
}
