//! The routes: which request gets which answer, in one table.
//!
//! | route | method | answers |
//! |---|---|---|
//! | `/health` | GET | `{"ok": true}`, without the token; 503 and `{"ok": false, "workers": [...]}` while a worker of the app in this process has every runner stuck |
//! | `/` | GET | the page; without a session the login page (401) |
//! | `/login` | GET, POST | the login page; POST the token (form or JSON): a session cookie and 303 to the page; 429 past the failed-login limit |
//! | `/logout` | POST | forgets the session (its CSRF value and origin needed) and clears the cookie |
//! | `/app.js`, `/style.css` | GET | the page's script and style (the style without the token: the login page uses it) |
//! | `/favicon.ico` | GET | 204: there is none |
//! | `/api/overview` | GET | queues, consumers, workers (their health), counts, tasks |
//! | `/api/runs?limit=&state=&task=` | GET | recent runs |
//! | `/api/runs/<id>` | GET | one run's stored outcome and events |
//! | `/api/failures?limit=` | GET | recent failures |
//! | `/api/send` | POST | `{id}` of a new run of a registered task |
//! | `/api/revoke` | POST | revokes (and with `terminate` stops) a run |
//! | `/api/dead?queue=&limit=` | GET | a queue's dead-letter count and newest letters |
//! | `/api/dead/requeue` | POST | puts a queue's dead letters back on it |
//! | `/api/dead/purge` | POST | drops a queue's dead letters for good |
//! | `/api/audit` | GET | the changes made through this admin, newest first |
//! | `/api/stream` | GET | server-sent events of counts, ≥ 1 per second; 503 past [`STREAMS_MAX`] open |
//!
//! `GET /?token=` is no login: it answers 303 to the page without a session
//! (a token in a URL ends up in logs and history).
//!
//! Order of checks: the token (401), the route (404), the method (405,
//! with `Allow`), then for a change: read-only (403), CSRF and origin for a
//! cookie (403), size (413), media type (415), JSON (400), the task (404).
//! GET never changes anything. Every change that was made is audited.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::auth::{self, Who};
use super::http::{Reply, Request, Response, decode, secure};
use super::page;
use super::reports::{self, DEAD_DEFAULT, Filter, RUNS_DEFAULT, Sent};
use super::session;
use super::stream::{EventStream, RETRY_MS, STREAMS_MAX};
use super::{AUDIT_KEPT, Inner, SENT_KEPT};
use crate::task::spec::{EVENT_TEXT_MAX, truncate};
use crate::task::{DEAD_KEPT, Options, Refused, State};

/// The most runs a listing answers: the whole event ring.
const RUNS_MAX: usize = reports::EVENTS_READ;

/// The longest countdown `/api/send` takes: 30 days (seconds), past which a
/// typo is likelier than a plan.
const COUNTDOWN_MAX_S: f64 = 30.0 * 86_400.0;

/// The longest run id `/api/revoke` takes: 256 bytes, ample for a UUID or a
/// caller's own scheme, and a bound on what lands in the revoke set.
const ID_MAX: usize = 256;

/// The longest queue name the dead-letter routes take: 256 bytes, like an
/// id; a queue's name is a key, not prose.
const QUEUE_MAX: usize = 256;

/// The most ids one `/api/dead/requeue` names: 1 000, a page of choices.
const IDS_MAX: usize = 1000;

/// Answers one request, with the security headers on whatever it answers.
pub(crate) async fn handle(inner: &Arc<Inner>, req: Request) -> Reply {
    let head = req.method == "HEAD";
    let mut reply = route(inner, &req).await;
    match &mut reply {
        Reply::Full(r) => {
            secure(&mut r.headers);
            if head {
                r.body.clear();
            }
        }
        Reply::Stream(r, _) => secure(&mut r.headers),
    }
    if head && let Reply::Stream(r, _) = reply {
        return Reply::Full(r);
    }
    reply
}

/// What a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'a> {
    Page,
    Script,
    Style,
    Icon,
    Overview,
    Runs,
    Run(&'a str),
    Failures,
    Send,
    Revoke,
    Dead,
    DeadRequeue,
    DeadPurge,
    Audit,
    Workers,
    Control,
    Metrics,
    Stream,
    Login,
    Logout,
}

impl Route<'_> {
    fn parse(path: &str) -> Option<Route<'_>> {
        Some(match path {
            "/" | "" => Route::Page,
            "/app.js" => Route::Script,
            "/style.css" => Route::Style,
            "/favicon.ico" => Route::Icon,
            "/api/overview" => Route::Overview,
            "/api/runs" => Route::Runs,
            "/api/failures" => Route::Failures,
            "/api/send" => Route::Send,
            "/api/revoke" => Route::Revoke,
            "/api/dead" => Route::Dead,
            "/api/dead/requeue" => Route::DeadRequeue,
            "/api/dead/purge" => Route::DeadPurge,
            "/api/audit" => Route::Audit,
            "/api/workers" => Route::Workers,
            "/api/control" => Route::Control,
            // Prometheus text, behind the same login (a scrape sends the
            // token as `Authorization: Bearer`).
            "/metrics" => Route::Metrics,
            "/api/stream" => Route::Stream,
            "/login" => Route::Login,
            "/logout" => Route::Logout,
            p => match p.strip_prefix("/api/runs/") {
                Some(id) if !id.is_empty() && !id.contains('/') => Route::Run(id),
                _ => return None,
            },
        })
    }

    fn changes(self) -> bool {
        matches!(
            self,
            Route::Send | Route::Revoke | Route::DeadRequeue | Route::DeadPurge | Route::Control
        )
    }
}

fn full(r: Response) -> Reply {
    Reply::Full(r)
}

fn broker_error(e: Refused) -> Response {
    match e {
        Refused::Invalid(why) => Response::error(400, "invalid", why),
        Refused::UnknownTask(_) => Response::error(404, "unknown_task", e.to_string()),
        e => Response::error(502, "broker", e.to_string()),
    }
}

fn json_or(r: Result<Value, Refused>) -> Reply {
    full(match r {
        Ok(v) => Response::json(200, &v),
        Err(e) => broker_error(e),
    })
}

async fn route(inner: &Arc<Inner>, req: &Request) -> Reply {
    let path = req.route();
    let get = req.method == "GET" || req.method == "HEAD";
    if path == "/health" {
        return full(if get {
            let stuck = reports::stuck_workers(&inner.app);
            if stuck.is_empty() {
                Response::json(200, &json!({ "ok": true }))
            } else {
                Response::json(503, &json!({ "ok": false, "workers": stuck }))
            }
        } else {
            Response::error(405, "method", "use GET").and("Allow", "GET, HEAD")
        });
    }
    let route = Route::parse(path);
    // A token in the URL is no login: it would sit in access logs and
    // history. Off to the page, without a session.
    if route == Some(Route::Page) && get && raw_param(req, "token").is_some() {
        return full(
            Response::with(303, "text/plain; charset=utf-8", b"see the page".to_vec())
                .and("Location", format!("{}/", session::mount(req))),
        );
    }
    match route {
        Some(Route::Login) if req.method == "POST" => return full(session::login(inner, req)),
        Some(Route::Login) if get => return full(session::login_page(req, 200, "")),
        Some(Route::Login) => {
            return full(
                Response::error(405, "method", "use GET or POST").and("Allow", "GET, HEAD, POST"),
            );
        }
        Some(Route::Logout) if req.method == "POST" => return full(session::logout(inner, req)),
        Some(Route::Logout) => {
            return full(Response::error(405, "method", "use POST").and("Allow", "POST"));
        }
        // The login page's style: public, like the page it styles.
        Some(Route::Style) if get => {
            return full(Response::with(
                200,
                "text/css; charset=utf-8",
                page::STYLE_CSS.as_bytes().to_vec(),
            ));
        }
        _ => {}
    }
    let Some(who) = auth::who(inner, req) else {
        if route == Some(Route::Page) && get {
            return full(
                session::login_page(req, 401, "")
                    .and("WWW-Authenticate", "Bearer realm=\"headway admin\""),
            );
        }
        return full(auth::unauthorized());
    };
    let Some(route) = route else {
        return full(Response::error(
            404,
            "not_found",
            format!("no route {path}"),
        ));
    };
    if route.changes() {
        if req.method != "POST" {
            return full(
                Response::error(405, "method", "changes are made by POST only")
                    .and("Allow", "POST"),
            );
        }
        if let Err(r) = auth::may_change(inner, req, who) {
            return full(r);
        }
        let body = match json_body(inner, req) {
            Ok(v) => v,
            Err(r) => return full(r),
        };
        let (action, r) = match route {
            Route::Send => ("send", send(inner, body).await),
            Route::Revoke => ("revoke", revoke(inner, body).await),
            Route::DeadRequeue => ("dead.requeue", requeue_dead(inner, body).await),
            Route::Control => ("control", super::remote::command(inner, body).await),
            _ => ("dead.purge", purge_dead(inner, body).await),
        };
        if r.status == 200 {
            audit(inner, who, action, &r);
        }
        return full(r);
    }
    if !get {
        return full(Response::error(405, "method", "use GET").and("Allow", "GET, HEAD"));
    }
    let q = req.query();
    match route {
        Route::Page => full(Response::with(
            200,
            "text/html; charset=utf-8",
            page::index(
                &auth::session_csrf(inner, req).unwrap_or_default(),
                inner.read_only,
            ),
        )),
        Route::Script => full(Response::with(
            200,
            "text/javascript; charset=utf-8",
            page::APP_JS.as_bytes().to_vec(),
        )),
        Route::Style => full(Response::with(
            200,
            "text/css; charset=utf-8",
            page::STYLE_CSS.as_bytes().to_vec(),
        )),
        // No icon: an empty answer keeps the browser from logging a 404.
        Route::Icon => full(Response {
            status: 204,
            headers: Vec::new(),
            body: Vec::new(),
        }),
        Route::Overview => json_or(reports::overview(inner).await),
        Route::Runs => match filter(&q) {
            Ok(f) => json_or(reports::runs(inner, &f).await),
            Err(r) => full(r),
        },
        Route::Failures => match filter(&q) {
            Ok(f) => json_or(reports::failures(inner, f.limit).await),
            Err(r) => full(r),
        },
        Route::Run(id) => json_or(reports::run(inner, &decode(id, false)).await),
        Route::Dead => match dead_query(&q) {
            Ok((queue, limit)) => json_or(reports::dead(inner, &queue, limit).await),
            Err(r) => full(r),
        },
        Route::Audit => full(Response::json(200, &reports::audit(inner))),
        Route::Workers => full(super::remote::workers(inner).await),
        Route::Metrics => match crate::task::metrics::render(&inner.app).await {
            Ok(text) => full(Response::with(
                200,
                crate::task::metrics::CONTENT_TYPE,
                text.into_bytes(),
            )),
            Err(e) => full(broker_error(e)),
        },
        Route::Stream => {
            let Some(slot) = inner.hub.open() else {
                return full(
                    Response::error(
                        503,
                        "busy",
                        format!(
                            "this admin already has {STREAMS_MAX} live streams open, \
                             the most it keeps: try again later"
                        ),
                    )
                    .and("Retry-After", (RETRY_MS / 1000).to_string()),
                );
            };
            Reply::Stream(
                Response {
                    status: 200,
                    headers: vec![
                        (
                            "Content-Type".into(),
                            "text/event-stream; charset=utf-8".into(),
                        ),
                        // nginx buffers a response unless told not to.
                        ("X-Accel-Buffering".into(), "no".into()),
                    ],
                    body: Vec::new(),
                },
                EventStream::new(inner.clone(), slot),
            )
        }
        Route::Send
        | Route::Revoke
        | Route::DeadRequeue
        | Route::DeadPurge
        | Route::Control
        | Route::Login
        | Route::Logout => {
            unreachable!("handled above")
        }
    }
}

/// The first value of `name` in the query, still percent-encoded.
fn raw_param<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    let (_, q) = req.path.split_once('?')?;
    q.split('&').find_map(|p| match p.split_once('=') {
        Some((k, v)) if k == name => Some(v),
        None if p == name => Some(""),
        _ => None,
    })
}

/// `limit`, `state` and `task` from a query, each checked.
fn filter(q: &[(String, String)]) -> Result<Filter, Response> {
    let mut f = Filter {
        limit: RUNS_DEFAULT,
        ..Filter::default()
    };
    for (k, v) in q {
        match k.as_str() {
            "limit" => {
                f.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=RUNS_MAX).contains(n))
                    .ok_or_else(|| {
                        Response::error(
                            400,
                            "invalid",
                            format!("invalid `limit`: must be 1 to {RUNS_MAX}"),
                        )
                    })?;
            }
            "state" if !v.is_empty() => {
                f.state = Some(State::parse(&v.to_ascii_uppercase()).ok_or_else(|| {
                    Response::error(
                        400,
                        "invalid",
                        "invalid `state`: must be one of PENDING, RECEIVED, STARTED, \
                         RETRY, SUCCESS, FAILURE, REVOKED",
                    )
                })?);
            }
            "task" if !v.is_empty() => f.task = Some(v.clone()),
            _ => {}
        }
    }
    Ok(f)
}

/// The body of a change as a JSON object, or the refusal: 413 over
/// `max_body`, 415 for a media type that is not JSON, 400 for anything that
/// does not parse or is not an object.
fn json_body(inner: &Inner, req: &Request) -> Result<Map<String, Value>, Response> {
    if req.body.len() > inner.max_body || super::declared_over(&req.headers, inner.max_body) {
        return Err(Response::error(
            413,
            "too_large",
            format!("the body is over {} bytes", inner.max_body),
        ));
    }
    if let Some(ct) = req.get("content-type") {
        let media = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if media != "application/json" && !media.ends_with("+json") {
            return Err(Response::error(
                415,
                "media_type",
                format!("the body must be application/json, not {media}"),
            ));
        }
    }
    let v: Value = serde_json::from_slice(&req.body)
        .map_err(|e| Response::error(400, "not_json", format!("the body is not JSON: {e}")))?;
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(Response::error(
            400,
            "invalid",
            "the body must be a JSON object",
        )),
    }
}

fn invalid(why: impl Into<String>) -> Response {
    Response::error(400, "invalid", why)
}

fn unknown_fields(m: &Map<String, Value>, known: &[&str]) -> Result<(), Response> {
    match m.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(invalid(format!(
            "unknown field `{k}`: expected one of {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// `POST /api/send`: `{"task", "args"?, "kwargs"?, "queue"?, "countdown"?
/// (seconds, as Celery and Flower's `async-apply` take it), "priority"?}`.
async fn send(inner: &Inner, b: Map<String, Value>) -> Response {
    match send_checked(inner, b).await {
        Ok(r) | Err(r) => r,
    }
}

async fn send_checked(inner: &Inner, b: Map<String, Value>) -> Result<Response, Response> {
    unknown_fields(
        &b,
        &["task", "args", "kwargs", "queue", "countdown", "priority"],
    )?;
    let task = match b.get("task") {
        Some(Value::String(t)) if !t.is_empty() => t.clone(),
        _ => return Err(invalid("invalid `task`: must be a registered task's name")),
    };
    let args = match b.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(invalid("invalid `args`: must be a JSON array")),
    };
    let kwargs = match b.get("kwargs") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(invalid("invalid `kwargs`: must be a JSON object")),
    };
    let mut options = Options::default();
    match b.get("queue") {
        None | Some(Value::Null) => {}
        Some(Value::String(q)) if !q.is_empty() => options.queue = Some(q.clone()),
        Some(_) => return Err(invalid("invalid `queue`: must be a non-empty string")),
    }
    match b.get("countdown") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_f64() {
            Some(s) if (0.0..=COUNTDOWN_MAX_S).contains(&s) => {
                options.countdown = Some((s * 1000.0).round() as i64);
            }
            _ => {
                return Err(invalid(format!(
                    "invalid `countdown`: must be seconds from 0 to {COUNTDOWN_MAX_S}"
                )));
            }
        },
    }
    match b.get("priority") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_u64() {
            Some(p) if p <= 9 => options.priority = Some(p as u8),
            _ => {
                return Err(invalid(format!(
                    "invalid `priority`: {}",
                    crate::task::specs::PRIORITY_RANGE
                )));
            }
        },
    }
    if !inner.app.has_task(&task) {
        return Err(Response::error(
            404,
            "unknown_task",
            format!("no task is registered as {task:?}: the admin sends registered tasks only"),
        ));
    }
    let args_text = truncate(
        serde_json::to_string(&args).unwrap_or_default(),
        EVENT_TEXT_MAX,
    );
    let h = inner
        .app
        .send(&task, args, kwargs, options)
        .await
        .map_err(broker_error)?;
    let queue = inner
        .app
        .policy_of(&task)
        .map(|p| p.queue)
        .unwrap_or_default();
    let queue = b
        .get("queue")
        .and_then(Value::as_str)
        .map_or(queue, str::to_string);
    {
        let mut sent = inner.sent.lock().unwrap_or_else(|e| e.into_inner());
        if sent.len() >= SENT_KEPT {
            sent.pop_front();
        }
        sent.push_back(Sent {
            id: h.id().to_string(),
            task: task.clone(),
            queue: queue.clone(),
            args: args_text,
            at: inner.app.now(),
        });
    }
    Ok(Response::json(
        200,
        &json!({ "id": h.id(), "task": task, "queue": queue, "state": State::Pending }),
    ))
}

/// `POST /api/revoke`: `{"id", "terminate"?: bool}`.
async fn revoke(inner: &Inner, b: Map<String, Value>) -> Response {
    if let Err(r) = unknown_fields(&b, &["id", "terminate"]) {
        return r;
    }
    let id = match b.get("id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= ID_MAX => id.clone(),
        _ => {
            return invalid(format!(
                "invalid `id`: must be a run id of 1 to {ID_MAX} bytes"
            ));
        }
    };
    let terminate = match b.get("terminate") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(t)) => *t,
        Some(_) => return invalid("invalid `terminate`: must be true or false"),
    };
    match inner.app.revoke(std::slice::from_ref(&id), terminate).await {
        Ok(()) => Response::json(
            200,
            &json!({ "id": id, "revoked": true, "terminate": terminate }),
        ),
        Err(e) => broker_error(e),
    }
}

/// The longest text an audit entry keeps of any one value (an id, a queue,
/// a task name): 128 bytes, so an entry stays a few hundred bytes whatever
/// the request named.
const AUDIT_TEXT_MAX: usize = 128;

/// Keeps one change made in the audit log: when, how the caller proved
/// itself, which change, and what it answered — summarised by
/// [`audit_summary`], so one entry stays small whatever the change touched.
fn audit(inner: &Inner, who: Who, action: &str, r: &Response) {
    let outcome: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let entry = json!({
        "at": inner.app.now(),
        "by": match who {
            Who::Bearer => "token",
            Who::Session => "session",
        },
        "action": action,
        "outcome": audit_summary(outcome),
    });
    let mut log = inner.audit.lock().unwrap_or_else(|e| e.into_inner());
    if log.len() >= AUDIT_KEPT {
        log.pop_front();
    }
    log.push_back(entry);
}

/// An answer as the audit log keeps it: a list becomes its count
/// (`"ids": [...]` is kept as `"ids_count": n`) and text is cut to
/// [`AUDIT_TEXT_MAX`] bytes. A re-queue naming a thousand ids of 256 bytes
/// would otherwise keep a quarter of a MiB per entry, and [`AUDIT_KEPT`] of
/// them hundreds of MiB.
fn audit_summary(outcome: Value) -> Value {
    match outcome {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| match v {
                    Value::Array(a) => (format!("{k}_count"), json!(a.len())),
                    v => (k, audit_summary(v)),
                })
                .collect(),
        ),
        Value::String(s) => Value::String(truncate(s, AUDIT_TEXT_MAX)),
        Value::Array(a) => json!(a.len()),
        v => v,
    }
}

fn queue_name(v: Option<&str>) -> Result<String, Response> {
    match v {
        Some(q) if !q.is_empty() && q.len() <= QUEUE_MAX => Ok(q.to_string()),
        _ => Err(invalid(format!(
            "invalid `queue`: must be a queue name of 1 to {QUEUE_MAX} bytes"
        ))),
    }
}

fn dead_limit(v: Option<&Value>, default: usize) -> Result<usize, Response> {
    match v {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=DEAD_KEPT).contains(n))
            .ok_or_else(|| {
                invalid(format!(
                    "invalid `limit`: must be an integer from 1 to {DEAD_KEPT}"
                ))
            }),
    }
}

/// `queue` (required) and `limit` (1 to [`DEAD_KEPT`], [`DEAD_DEFAULT`]
/// when absent) from `/api/dead`'s query; other parameters are ignored, as
/// `/api/runs` ignores them.
fn dead_query(q: &[(String, String)]) -> Result<(String, usize), Response> {
    let mut queue = None;
    let mut limit = DEAD_DEFAULT;
    for (k, v) in q {
        match k.as_str() {
            "queue" => queue = Some(v.as_str()),
            "limit" => {
                // Not a number: `false`, which `dead_limit` refuses.
                let n = v.parse::<u64>().map_or(Value::Bool(false), Value::from);
                limit = dead_limit(Some(&n), DEAD_DEFAULT)?;
            }
            _ => {}
        }
    }
    Ok((queue_name(queue)?, limit))
}

/// `POST /api/dead/requeue`: `{"queue", "ids"?: [...], "limit"?}`. Puts
/// the queue's dead letters back on it, oldest first — only those whose id
/// is in `ids` when given, at most `limit` (all it keeps when absent).
async fn requeue_dead(inner: &Inner, b: Map<String, Value>) -> Response {
    match requeue_checked(inner, b).await {
        Ok(r) | Err(r) => r,
    }
}

async fn requeue_checked(inner: &Inner, b: Map<String, Value>) -> Result<Response, Response> {
    unknown_fields(&b, &["queue", "ids", "limit"])?;
    let queue = queue_name(b.get("queue").and_then(Value::as_str))?;
    let bad_ids = || {
        invalid(format!(
            "invalid `ids`: must be a list of at most {IDS_MAX} run ids of 1 to {ID_MAX} bytes"
        ))
    };
    let ids: Vec<String> = match b.get("ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) if a.len() <= IDS_MAX => a
            .iter()
            .map(|v| match v {
                Value::String(s) if !s.is_empty() && s.len() <= ID_MAX => Ok(s.clone()),
                _ => Err(bad_ids()),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad_ids()),
    };
    if matches!(b.get("ids"), Some(Value::Array(a)) if a.is_empty()) {
        return Err(invalid(
            "invalid `ids`: an empty list names nothing; leave it out to re-queue all",
        ));
    }
    let limit = dead_limit(b.get("limit"), DEAD_KEPT)?;
    let n = inner
        .app
        .broker()
        .requeue_dead(&queue, &ids, limit)
        .await
        .map_err(broker_error)?;
    Ok(Response::json(
        200,
        &json!({ "queue": queue, "requeued": n, "ids": ids }),
    ))
}

/// `POST /api/dead/purge`: `{"queue"}`. Drops every dead letter the queue
/// keeps, for good.
async fn purge_dead(inner: &Inner, b: Map<String, Value>) -> Response {
    if let Err(r) = unknown_fields(&b, &["queue"]) {
        return r;
    }
    let queue = match queue_name(b.get("queue").and_then(Value::as_str)) {
        Ok(q) => q,
        Err(r) => return r,
    };
    match inner.app.broker().purge_dead(&queue).await {
        Ok(n) => Response::json(200, &json!({ "queue": queue, "purged": n })),
        Err(e) => broker_error(e),
    }
}
