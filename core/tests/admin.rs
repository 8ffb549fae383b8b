//! The admin interface, through explicit request values on the memory
//! broker: routes, auth, CSRF and origin checks, validation, escaping, the
//! live stream, sends and revokes that a real worker then acts on, and dead
//! letters a real worker quarantined, listed, re-queued and purged.

use std::sync::Arc;
use std::time::Duration;

use headway_core::admin::{
    Admin, AdminConfig, COOKIE, CSP, CSRF_HEADER, MAX_BODY, Reply, Request, Response,
};
use headway_core::task::{App, Failure, Policy, Refused, State, Worker, WorkerConfig, body};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

const T: &str = "s3cret-token-for-tests";
const HOST: &str = "127.0.0.1:5555";
const ORIGIN: &str = "http://127.0.0.1:5555";

fn app() -> App {
    let app = App::memory(None);
    let p = Policy::default;
    app.register(
        "add",
        p(),
        body(|_, a| async move { Ok(json!(a.iter().filter_map(Value::as_i64).sum::<i64>())) }),
    )
    .unwrap();
    app.register("echo", p(), body(|_, a| async move { Ok(Value::Array(a)) }))
        .unwrap();
    app.register(
        "boom",
        p(),
        body(|_, _| async { Err(Failure::new("ValueError", "<b>no</b> & more")) }),
    )
    .unwrap();
    app
}

fn admin_with(app: &App, cfg: AdminConfig) -> Admin {
    Admin::new(
        app.clone(),
        AdminConfig {
            token: Some(T.into()),
            ..cfg
        },
    )
    .unwrap()
}

fn admin(app: &App) -> Admin {
    admin_with(app, AdminConfig::default())
}

fn get(path: &str) -> Request {
    Request::new("GET", path).header("Host", HOST)
}

fn authed(req: Request) -> Request {
    req.header("Authorization", format!("Bearer {T}"))
}

fn post(path: &str, body: &Value) -> Request {
    Request::new("POST", path)
        .header("Host", HOST)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
}

async fn call(a: &Admin, req: Request) -> Response {
    match a.handle(req).await {
        Reply::Full(r) => r,
        Reply::Stream(..) => panic!("expected a full response"),
    }
}

fn body_json(r: &Response) -> Value {
    serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&r.body)))
}

fn assert_secure(r: &Response) {
    assert_eq!(r.get("Content-Security-Policy"), Some(CSP), "{r:?}");
    assert_eq!(CSP, "default-src 'self'; frame-ancestors 'none'");
    assert_eq!(r.get("X-Content-Type-Options"), Some("nosniff"));
    assert_eq!(r.get("Referrer-Policy"), Some("no-referrer"));
    assert_eq!(r.get("Cache-Control"), Some("no-store"));
}

/// Logs in by posting the token, and answers the cookie header and the
/// CSRF value.
async fn login(a: &Admin) -> (String, String) {
    let r = call(
        a,
        Request::new("POST", "/login")
            .header("Host", HOST)
            .header("Origin", ORIGIN)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("token={T}")),
    )
    .await;
    assert_eq!(r.status, 303);
    let set = r.get("Set-Cookie").unwrap();
    let pair = set.split(';').next().unwrap().to_string();
    let page = call(a, get("/").header("Cookie", pair.clone())).await;
    assert_eq!(page.status, 200);
    let html = String::from_utf8(page.body).unwrap();
    let csrf = meta(&html, "headway-csrf");
    (pair, csrf)
}

fn meta(html: &str, name: &str) -> String {
    let tag = format!("<meta name=\"{name}\" content=\"");
    let at = html.find(&tag).unwrap() + tag.len();
    html[at..at + html[at..].find('"').unwrap()].to_string()
}

fn start(app: &App) -> (Worker, JoinHandle<Result<(), Refused>>) {
    let w = app
        .worker(WorkerConfig {
            name: Some("w1".into()),
            ..WorkerConfig::default()
        })
        .unwrap();
    let w2 = w.clone();
    (w, tokio::spawn(async move { w2.run().await }))
}

async fn stop((w, h): (Worker, JoinHandle<Result<(), Refused>>)) {
    w.stop(Duration::from_secs(1));
    h.await.unwrap().unwrap();
}

/// The row for `id` in `/api/runs`, once its state is `state` (the worker
/// records the event just after storing the outcome the test waited on).
async fn run_row(a: &Admin, id: &str, state: &str) -> Value {
    run_row_where(a, id, state, |row| row["state"] == state).await
}

/// Polls the runs list until run `id`'s row satisfies `ready` (described by
/// `what` in the failure): a row is built from several events, which land
/// one after another, so a test waits for every field it reads.
async fn run_row_where(a: &Admin, id: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = call(a, authed(get("/api/runs"))).await;
        assert_eq!(r.status, 200);
        let v = body_json(&r);
        if let Some(row) = v["runs"].as_array().unwrap().iter().find(|x| x["id"] == id)
            && ready(row)
        {
            return row.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {id} never showed {what}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn send(a: &Admin, task: &str, args: Value) -> String {
    let r = call(
        a,
        authed(post("/api/send", &json!({"task": task, "args": args}))),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    body_json(&r)["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn health_needs_no_token() {
    let a = admin(&app());
    let r = call(&a, get("/health")).await;
    assert_eq!(r.status, 200);
    assert_eq!(body_json(&r), json!({"ok": true}));
    assert_secure(&r);
    let r = call(&a, post("/health", &json!({}))).await;
    assert_eq!(r.status, 405);
    assert_secure(&r);
}

#[tokio::test]
async fn every_other_route_needs_the_token() {
    let a = admin(&app());
    let routes = [
        ("GET", "/app.js"),
        ("GET", "/favicon.ico"),
        ("GET", "/api/overview"),
        ("GET", "/api/runs"),
        ("GET", "/api/runs/abc"),
        ("GET", "/api/failures"),
        ("GET", "/api/stream"),
        ("POST", "/api/send"),
        ("POST", "/api/revoke"),
        ("GET", "/api/dead?queue=default"),
        ("POST", "/api/dead/requeue"),
        ("POST", "/api/dead/purge"),
        ("GET", "/api/audit"),
        ("GET", "/no/such/route"),
    ];
    let wrong: [fn(Request) -> Request; 5] = [
        |r| r,
        |r| r.header("Authorization", "Bearer wrong"),
        |r| r.header("Authorization", format!("Bearer {T}x")),
        |r| r.header("Authorization", format!("Basic {T}")),
        |r| r.header("Cookie", format!("{COOKIE}={T}")),
    ];
    for (m, p) in routes {
        for w in wrong {
            let r = call(&a, w(Request::new(m, p).header("Host", HOST))).await;
            assert_eq!(r.status, 401, "{m} {p}");
            assert_eq!(body_json(&r)["error"], "unauthorized");
            assert!(r.get("WWW-Authenticate").unwrap().starts_with("Bearer"));
            assert_secure(&r);
        }
    }
    // A query token is no credential anywhere.
    let r = call(&a, get(&format!("/api/overview?token={T}"))).await;
    assert_eq!(r.status, 401);
    let r = call(&a, get("/?token=wrong")).await;
    assert_eq!(r.status, 303);
    assert!(r.get("Set-Cookie").is_none());
    // The page without a session is the login form; its style is public.
    for w in wrong {
        let r = call(&a, w(get("/"))).await;
        assert_eq!(r.status, 401);
        assert_eq!(r.get("Content-Type"), Some("text/html; charset=utf-8"));
        assert!(
            String::from_utf8(r.body.clone())
                .unwrap()
                .contains("name=\"token\"")
        );
        assert_secure(&r);
    }
    assert_eq!(call(&a, get("/style.css")).await.status, 200);
}

#[tokio::test]
async fn a_posted_token_becomes_a_session_cookie_and_a_redirect() {
    let a = admin(&app());
    let (cookie, csrf) = login(&a).await;
    assert_eq!(csrf.len(), 43);
    // The cookie holds a session id, not the token itself.
    assert!(cookie.starts_with(&format!("{COOKIE}=")) && !cookie.contains(T));
    for p in ["/", "/app.js", "/style.css", "/api/overview", "/api/runs"] {
        let r = call(&a, get(p).header("Cookie", format!("a=b; {cookie}"))).await;
        assert_eq!(r.status, 200, "{p}");
    }
    // A token with a `+` and a `/` works percent-encoded in a form, or in
    // JSON.
    let plus = Admin::new(
        app(),
        AdminConfig {
            token: Some("a+b/c-0123456789abcdef".into()),
            ..AdminConfig::default()
        },
    )
    .unwrap();
    let form = |b: &str| {
        Request::new("POST", "/login")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(b.to_string())
    };
    assert_eq!(
        call(&plus, form("token=a%2Bb%2Fc-0123456789abcdef"))
            .await
            .status,
        303
    );
    assert_eq!(
        call(&plus, form("x=1&token=a%2Bb/c-0123456789abcdef"))
            .await
            .status,
        303
    );
    let json_login = Request::new("POST", "/login")
        .header("Content-Type", "application/json")
        .body(r#"{"token":"a+b/c-0123456789abcdef"}"#);
    let r = call(&plus, json_login).await;
    assert_eq!(r.status, 200);
    assert!(r.get("Set-Cookie").is_some());
    // A `+` in a form is a space: not the token.
    assert_eq!(
        call(&plus, form("token=a+b/c-0123456789abcdef"))
            .await
            .status,
        401
    );
    assert_eq!(call(&plus, form("token")).await.status, 401);
    // Another admin (a restart) has other sessions.
    let b = admin(&app());
    let r = call(&b, get("/api/overview").header("Cookie", cookie)).await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn page_and_assets() {
    let a = admin(&app());
    let (cookie, _) = login(&a).await;
    let r = call(&a, get("/").header("Cookie", cookie)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.get("Content-Type"), Some("text/html; charset=utf-8"));
    assert_secure(&r);
    let html = String::from_utf8(r.body).unwrap();
    let csrf = meta(&html, "headway-csrf");
    assert_eq!(csrf.len(), 43);
    assert_eq!(meta(&html, "headway-read-only"), "false");
    // No inline script or style: the CSP would refuse them.
    assert_eq!(html.matches("<script").count(), 1);
    assert!(html.contains("<script src=\"app.js\" defer></script>"));
    assert!(!html.contains("<style") && !html.contains(" style=") && !html.contains("onclick"));
    for id in [
        "id=\"counts\"",
        "data-state=\"SUCCESS\"",
        "id=\"send-form\"",
        "id=\"send-task\"",
        "id=\"send-args\"",
        "id=\"send-result\"",
        "id=\"runs\"",
        "id=\"queues\"",
        "id=\"consumers\"",
        "id=\"failures\"",
    ] {
        assert!(html.contains(id), "{id}");
    }
    assert!(!html.contains("http://") && !html.contains("https://"));

    let js = call(&a, authed(get("/app.js"))).await;
    assert_eq!(js.status, 200);
    assert_eq!(
        js.get("Content-Type"),
        Some("text/javascript; charset=utf-8")
    );
    let js = String::from_utf8(js.body).unwrap();
    assert!(
        !js.contains(".innerHTML")
            && !js.contains("outerHTML")
            && !js.contains("insertAdjacentHTML")
    );
    assert!(!js.contains("eval(") && !js.contains("document.write"));
    assert!(js.contains("textContent") && js.contains("X-CSRF-Token"));
    let css = call(&a, authed(get("/style.css"))).await;
    assert_eq!(css.get("Content-Type"), Some("text/css; charset=utf-8"));
    assert!(!String::from_utf8(css.body).unwrap().contains("url("));

    let head = call(&a, authed(Request::new("HEAD", "/"))).await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_secure(&head);
}

#[tokio::test]
async fn cookie_changes_need_csrf_and_origin() {
    let app = app();
    let a = admin_with(
        &app,
        AdminConfig {
            allowed_origins: vec!["https://Ops.example.com/".into()],
            ..AdminConfig::default()
        },
    );
    let (cookie, csrf) = login(&a).await;
    let body = json!({"task": "add", "args": [1, 2]});
    let req = || post("/api/send", &body).header("Cookie", cookie.clone());

    let r = call(&a, req().header("Origin", ORIGIN)).await;
    assert_eq!(
        (r.status, body_json(&r)["error"].clone()),
        (403, json!("csrf"))
    );
    assert_secure(&r);
    let r = call(
        &a,
        req().header("Origin", ORIGIN).header(CSRF_HEADER, "nope"),
    )
    .await;
    assert_eq!(r.status, 403);

    let with = || req().header(CSRF_HEADER, csrf.clone());
    for bad in [
        Some(("Origin", "http://evil.example")),
        Some(("Origin", "http://127.0.0.1:5556")),
        Some(("Origin", "null")),
        Some(("Origin", "https://ops.example.com.evil.com")),
        Some(("Referer", "http://evil.example/x")),
        None,
    ] {
        let r = match bad {
            Some((h, v)) => call(&a, with().header(h, v)).await,
            None => call(&a, with()).await,
        };
        assert_eq!(r.status, 403, "{bad:?}");
        assert_eq!(body_json(&r)["error"], "origin");
    }
    for good in [
        ("Origin", ORIGIN),
        ("Referer", "http://127.0.0.1:5555/?x=1"),
        ("Origin", "https://ops.example.com"),
    ] {
        let r = call(&a, with().header(good.0, good.1)).await;
        assert_eq!(
            r.status,
            200,
            "{good:?}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    // The CSRF value is no credential by itself.
    let r = call(
        &a,
        post("/api/send", &body)
            .header(CSRF_HEADER, csrf.clone())
            .header("Origin", ORIGIN),
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(
        app.inspector().unwrap().queues().await.unwrap()[0].ready[&0],
        3
    );
}

#[tokio::test]
async fn bearer_changes_need_no_csrf() {
    let app = app();
    let a = admin(&app);
    let r = call(
        &a,
        authed(post("/api/send", &json!({"task": "add", "args": [1]})))
            .header("Origin", "http://elsewhere.example"),
    )
    .await;
    assert_eq!(r.status, 200);
    let id = body_json(&r)["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 36);
    let r = call(&a, authed(post("/api/revoke", &json!({"id": id})))).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        body_json(&r),
        json!({"id": id, "revoked": true, "terminate": false})
    );
}

#[tokio::test]
async fn changes_are_post_only_and_reads_get_only() {
    let a = admin(&app());
    for p in ["/api/send", "/api/revoke"] {
        for m in ["GET", "PUT", "DELETE"] {
            let r = call(&a, authed(Request::new(m, p))).await;
            assert_eq!(r.status, 405, "{m} {p}");
            assert_eq!(r.get("Allow"), Some("POST"));
            assert_secure(&r);
        }
    }
    let r = call(&a, authed(post("/api/overview", &json!({})))).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.get("Allow"), Some("GET, HEAD"));
    let r = call(&a, authed(get("/api/nothing"))).await;
    assert_eq!(r.status, 404);
    assert_eq!(body_json(&r)["error"], "not_found");
    assert_secure(&r);
}

#[tokio::test]
async fn read_only_refuses_every_change() {
    let app = app();
    let a = admin_with(
        &app,
        AdminConfig {
            read_only: true,
            ..AdminConfig::default()
        },
    );
    let (cookie, csrf) = login(&a).await;
    let r = call(&a, authed(post("/api/send", &json!({"task": "add"})))).await;
    assert_eq!(r.status, 403);
    assert_eq!(body_json(&r)["error"], "read_only");
    let r = call(&a, authed(post("/api/revoke", &json!({"id": "x"})))).await;
    assert_eq!(r.status, 403);
    let r = call(
        &a,
        post("/api/send", &json!({"task": "add"}))
            .header("Cookie", cookie.clone())
            .header(CSRF_HEADER, csrf)
            .header("Origin", ORIGIN),
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(app.inspector().unwrap().queues().await.unwrap().is_empty());
    let r = call(&a, get("/").header("Cookie", cookie)).await;
    assert_eq!(
        meta(&String::from_utf8(r.body).unwrap(), "headway-read-only"),
        "true"
    );
    let r = call(&a, authed(get("/api/overview"))).await;
    assert_eq!(body_json(&r)["read_only"], true);
}

#[tokio::test]
async fn send_validates() {
    let app = app();
    let a = admin(&app);
    let cases: Vec<(Request, u16, &str)> = vec![
        (
            authed(post("/api/send", &json!({"task": "nope", "args": []}))),
            404,
            "nope",
        ),
        (
            authed(post("/api/send", &json!({"args": []}))),
            400,
            "`task`",
        ),
        (
            authed(post("/api/send", &json!({"task": "add", "args": {"a": 1}}))),
            400,
            "`args`",
        ),
        (
            authed(post("/api/send", &json!({"task": "add", "args": "[1]"}))),
            400,
            "`args`",
        ),
        (
            authed(post("/api/send", &json!({"task": "add", "kwargs": [1]}))),
            400,
            "`kwargs`",
        ),
        (
            authed(post("/api/send", &json!({"task": "add", "countdown": -1}))),
            400,
            "`countdown`",
        ),
        (
            authed(post("/api/send", &json!({"task": "add", "priority": 12}))),
            400,
            "`priority`",
        ),
        (
            authed(post("/api/send", &json!({"task": "add", "queue": ""}))),
            400,
            "`queue`",
        ),
        (
            authed(post("/api/send", &json!({"task": "add", "taks": 1}))),
            400,
            "`taks`",
        ),
        (authed(post("/api/send", &json!([1, 2]))), 400, "object"),
        (
            authed(Request::new("POST", "/api/send").body(b"{not json".to_vec())),
            400,
            "not JSON",
        ),
        (
            authed(
                Request::new("POST", "/api/send")
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .body(b"task=add".to_vec()),
            ),
            415,
            "application/json",
        ),
        (
            authed(post(
                "/api/send",
                &json!({"task": "add", "args": ["x".repeat(MAX_BODY)]}),
            )),
            413,
            "65536",
        ),
        (
            authed(post("/api/send", &json!({"task": "add"})).header("Content-Length", "70000")),
            413,
            "bytes",
        ),
        (authed(post("/api/revoke", &json!({"id": ""}))), 400, "`id`"),
        (
            authed(post("/api/revoke", &json!({"id": "x", "terminate": "yes"}))),
            400,
            "`terminate`",
        ),
    ];
    for (req, status, says) in cases {
        let r = call(&a, req).await;
        assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
        let v = body_json(&r);
        assert!(v["reason"].as_str().unwrap().contains(says), "{v}");
        assert_secure(&r);
    }
    assert!(app.inspector().unwrap().queues().await.unwrap().is_empty());
    // A smaller cap is the adapter's to read.
    let small = admin_with(
        &app,
        AdminConfig {
            max_body: 16,
            ..AdminConfig::default()
        },
    );
    assert_eq!(small.max_body(), 16);
    let r = call(
        &small,
        authed(post(
            "/api/send",
            &json!({"task": "add", "args": [1, 2, 3]}),
        )),
    )
    .await;
    assert_eq!(r.status, 413);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_run_is_listed_then_run_by_a_worker() {
    let app = app();
    let a = admin(&app);
    let r = call(
        &a,
        authed(post(
            "/api/send",
            &json!({"task": "add", "args": [2, 3], "kwargs": {}, "queue": "default", "priority": 1}),
        )),
    )
    .await;
    let v = body_json(&r);
    assert_eq!(v["task"], "add");
    assert_eq!(v["queue"], "default");
    let id = v["id"].as_str().unwrap().to_string();

    // Listed before any worker has it, and counted on its queue.
    let row = run_row(&a, &id, "PENDING").await;
    assert_eq!(row["args"], "[2,3]");
    assert_eq!(row["final"], false);
    let o = body_json(&call(&a, authed(get("/api/overview"))).await);
    assert_eq!(o["queues"][0]["name"], "default");
    assert_eq!(o["queues"][0]["ready"], 1);
    assert_eq!(o["queues"][0]["ready_by_priority"], json!({"1": 1}));
    assert_eq!(o["task_names"], json!(["add", "boom", "echo"]));
    assert_eq!(o["counts"]["SUCCESS"], 0);
    let one = body_json(&call(&a, authed(get(&format!("/api/runs/{id}")))).await);
    assert_eq!(
        (one["state"].clone(), one["stored"].clone()),
        (json!("PENDING"), json!(false))
    );

    let w = start(&app);
    assert_eq!(
        app.handle(&id)
            .get(Some(Duration::from_secs(5)))
            .await
            .unwrap(),
        json!(5)
    );
    // SUCCESS and the worker's name come from different events: wait for
    // both rather than read a worker field a later event fills in.
    let row = run_row_where(&a, &id, "SUCCESS with its worker", |row| {
        row["state"] == "SUCCESS" && row["worker"].as_str().is_some_and(|w| !w.is_empty())
    })
    .await;
    assert_eq!(row["task"], "add");
    assert_eq!(row["worker"], "w1");
    assert_eq!(row["detail"], "5");
    assert_eq!(row["final"], true);

    let one = body_json(&call(&a, authed(get(&format!("/api/runs/{id}")))).await);
    assert_eq!(one["state"], "SUCCESS");
    assert_eq!(one["result"], 5);
    assert_eq!(one["stored"], true);
    assert_eq!(one["events"][0]["state"], "SUCCESS");

    let o = body_json(&call(&a, authed(get("/api/overview"))).await);
    assert_eq!(o["counts"]["SUCCESS"], 1);
    assert_eq!(o["queues"][0]["ready"], 0);
    let add = o["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "add")
        .unwrap();
    assert_eq!(add["counts"]["SUCCESS"], 1);
    assert_eq!(add["registered"], true);

    // Filters.
    let n = |v: Value| v["runs"].as_array().unwrap().len();
    let q = |p: &str| call(&a, authed(get(p)));
    assert_eq!(
        n(body_json(
            &q("/api/runs?state=SUCCESS&task=add&limit=5").await
        )),
        1
    );
    assert_eq!(n(body_json(&q("/api/runs?state=failure").await)), 0);
    assert_eq!(n(body_json(&q("/api/runs?task=echo").await)), 0);
    assert_eq!(q("/api/runs?limit=0").await.status, 400);
    assert_eq!(q("/api/runs?limit=lots").await.status, 400);
    assert_eq!(q("/api/runs?state=DONE").await.status, 400);
    stop(w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_reported_escaped() {
    let app = app();
    let a = admin(&app);
    let id = send(&a, "boom", json!([1])).await;
    let w = start(&app);
    assert!(matches!(
        app.handle(&id).get(Some(Duration::from_secs(5))).await,
        Err(Refused::Failed(_))
    ));
    run_row(&a, &id, "FAILURE").await;
    let r = call(&a, authed(get("/api/failures?limit=5"))).await;
    assert!(!r.body.contains(&b'<') && !r.body.contains(&b'&'));
    let f = body_json(&r);
    assert_eq!(f["failures"][0]["id"], id.as_str());
    assert!(
        f["failures"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("ValueError: <b>no</b> & more")
    );
    let one = body_json(&call(&a, authed(get(&format!("/api/runs/{id}")))).await);
    assert_eq!(one["error"]["kind"], "ValueError");
    assert_eq!(one["error"]["message"], "<b>no</b> & more");
    stop(w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_queued_run_has_the_worker_record_revoked() {
    let app = app();
    let a = admin(&app);
    let (cookie, csrf) = login(&a).await;
    let id = send(&a, "add", json!([1, 1])).await;
    let r = call(
        &a,
        post("/api/revoke", &json!({"id": id}))
            .header("Cookie", cookie)
            .header(CSRF_HEADER, csrf)
            .header("Origin", ORIGIN),
    )
    .await;
    assert_eq!(r.status, 200);
    // Shown as revoked at once, before a worker skips it.
    let row = run_row(&a, &id, "REVOKED").await;
    assert_eq!(
        (row["revoked"].clone(), row["final"].clone()),
        (json!(true), json!(true))
    );
    let one = body_json(&call(&a, authed(get(&format!("/api/runs/{id}")))).await);
    assert_eq!(one["state"], "REVOKED");
    assert_eq!(one["stored_state"], "PENDING");
    let other = send(&a, "add", json!([2])).await;
    run_row(&a, &other, "PENDING").await;

    let w = start(&app);
    assert!(matches!(
        app.handle(&id).get(Some(Duration::from_secs(5))).await,
        Err(Refused::Revoked(_))
    ));
    app.handle(&other)
        .get(Some(Duration::from_secs(5)))
        .await
        .unwrap();
    let one = body_json(&call(&a, authed(get(&format!("/api/runs/{id}")))).await);
    assert_eq!(one["state"], "REVOKED");
    assert_eq!(one["stored_state"], "REVOKED");
    assert_eq!(one["error"]["kind"], "Revoked");
    let row = run_row(&a, &id, "REVOKED").await;
    assert_eq!(row["final"], true);
    let o = body_json(&call(&a, authed(get("/api/overview"))).await);
    assert_eq!(o["counts"]["REVOKED"], 1);
    stop(w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_stops_a_running_run() {
    let app = app();
    let started = Arc::new(Notify::new());
    let s2 = started.clone();
    app.register(
        "slow",
        Policy::default(),
        body(move |_, _| {
            let s = s2.clone();
            async move {
                s.notify_one();
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(json!(null))
            }
        }),
    )
    .unwrap();
    let a = admin(&app);
    let id = send(&a, "slow", json!([])).await;
    let w = start(&app);
    tokio::time::timeout(Duration::from_secs(5), started.notified())
        .await
        .unwrap();
    let r = call(
        &a,
        authed(post("/api/revoke", &json!({"id": id, "terminate": true}))),
    )
    .await;
    assert_eq!(body_json(&r)["terminate"], true);
    assert!(matches!(
        app.handle(&id).get(Some(Duration::from_secs(5))).await,
        Err(Refused::Revoked(_))
    ));
    let one = body_json(&call(&a, authed(get(&format!("/api/runs/{id}")))).await);
    assert_eq!(one["error"]["kind"], "Terminated");
    stop(w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_yields_counts_at_least_once_a_second() {
    let app = app();
    let a = admin(&app);
    send(&a, "add", json!([1])).await;
    let (head, mut stream) = match a.handle(authed(get("/api/stream"))).await {
        Reply::Stream(h, s) => (h, s),
        Reply::Full(r) => panic!("expected a stream: {r:?}"),
    };
    assert_eq!(head.status, 200);
    assert_eq!(
        head.get("Content-Type"),
        Some("text/event-stream; charset=utf-8")
    );
    assert_secure(&head);
    let mut last = tokio::time::Instant::now();
    for i in 0..3 {
        let frame = tokio::time::timeout(Duration::from_millis(1500), stream.next())
            .await
            .expect("a frame within 1.5 s")
            .unwrap();
        assert!(
            last.elapsed() < Duration::from_millis(1100),
            "frame {i} late"
        );
        last = tokio::time::Instant::now();
        let text = String::from_utf8(frame).unwrap();
        assert_eq!(text.starts_with("retry: "), i == 0, "{text}");
        assert!(text.ends_with("\n\n"));
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        assert!(text.contains("event: counts\n"));
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["counts"]["PENDING"], 0);
        assert_eq!(v["queues"][0]["ready"], 1);
    }
    // A stream head by HEAD is just the head.
    let r = a.handle(authed(Request::new("HEAD", "/api/stream"))).await;
    assert!(matches!(r, Reply::Full(ref r) if r.status == 200 && r.body.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xss_payloads_come_back_as_escaped_text() {
    let app = app();
    let a = admin(&app);
    let payload = json!([
        "<script>alert(1)</script>",
        "\"><img src=x onerror=alert(1)>",
        "javascript:alert(1)",
        "a & b"
    ]);
    let id = send(&a, "echo", payload.clone()).await;
    let check = |r: &Response| {
        for bad in [b'<', b'>', b'&'] {
            assert!(
                !r.body.contains(&bad),
                "{}",
                String::from_utf8_lossy(&r.body)
            );
        }
        assert_eq!(
            r.get("Content-Type"),
            Some("application/json; charset=utf-8")
        );
    };
    let r = call(&a, authed(get("/api/runs"))).await;
    check(&r);
    assert!(String::from_utf8_lossy(&r.body).contains("\\u003cscript\\u003e"));
    let w = start(&app);
    assert_eq!(
        app.handle(&id)
            .get(Some(Duration::from_secs(5)))
            .await
            .unwrap(),
        payload
    );
    let row = run_row(&a, &id, "SUCCESS").await;
    let args: Value = serde_json::from_str(row["args"].as_str().unwrap()).unwrap();
    assert_eq!(args, payload);
    let detail: Value = serde_json::from_str(row["detail"].as_str().unwrap()).unwrap();
    assert_eq!(detail, payload);
    for p in ["/api/runs", "/api/overview", "/api/failures"] {
        check(&call(&a, authed(get(p))).await);
    }
    let r = call(&a, authed(get(&format!("/api/runs/{id}")))).await;
    check(&r);
    assert_eq!(body_json(&r)["result"], payload);
    // Names echoed in refusals are escaped too.
    let r = call(
        &a,
        authed(post("/api/send", &json!({"task": "<script>x</script>"}))),
    )
    .await;
    assert_eq!(r.status, 404);
    check(&r);
    let r = call(&a, authed(get("/api/runs/%3Cimg%3E"))).await;
    check(&r);
    assert_eq!(body_json(&r)["id"], "<img>");
    stop(w).await;
}

#[tokio::test]
async fn tokens_are_generated_when_not_given() {
    let app = app();
    for cfg in [
        AdminConfig::default(),
        AdminConfig {
            token: Some(String::new()),
            ..AdminConfig::default()
        },
    ] {
        let a = Admin::new(app.clone(), cfg).unwrap();
        assert!(a.token_generated());
        assert_eq!(a.token().len(), 43);
        let r = call(
            &a,
            get("/api/overview").header("Authorization", format!("Bearer {}", a.token())),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let a = Admin::new(app.clone(), AdminConfig::default()).unwrap();
    let b = Admin::new(app.clone(), AdminConfig::default()).unwrap();
    assert_ne!(a.token(), b.token());
    let c = admin(&app);
    assert!(!c.token_generated());
    assert_eq!(c.token(), T);
    assert_eq!(c.max_body(), MAX_BODY);
    assert!(!c.read_only());
}

#[tokio::test]
async fn an_app_without_an_inspector_reports_empty() {
    use headway_core::broker::MemoryBroker;
    use headway_core::task::{Seams, SystemClock};
    let clock: Arc<dyn headway_core::task::Clock> = Arc::new(SystemClock);
    let b = MemoryBroker::new(clock.clone());
    let app = App::new(
        Seams {
            broker: b,
            backend: None,
            counter: None,
            inspector: None,
        },
        clock,
    );
    let a = admin(&app);
    let o = body_json(&call(&a, authed(get("/api/overview"))).await);
    assert_eq!(o["inspector"], false);
    assert_eq!(o["queues"], json!([]));
    assert_eq!(o["counts"]["SUCCESS"], 0);
    let r = body_json(&call(&a, authed(get("/api/runs/x"))).await);
    assert_eq!(r["state"], State::Pending.name());
}

#[test]
fn futures_are_send_for_the_bindings() {
    fn send<T: Send + 'static>(_: T) {}
    fn sync<T: Send + Sync>(_: &T) {}
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let a = rt.block_on(async { admin(&app()) });
    sync(&a);
    let a2 = a.clone();
    send(async move { a2.handle(Request::new("GET", "/health")).await });
    let mut s = match rt.block_on(a.handle(authed(get("/api/stream")))) {
        Reply::Stream(_, s) => s,
        Reply::Full(r) => panic!("{r:?}"),
    };
    let frame = rt.block_on(s.next()).unwrap();
    assert!(frame.starts_with(b"retry: "));
    send(async move { s.next().await });
}

/// An app on a memory broker the test can push raw bytes onto, as another
/// producer would.
fn app_and_broker() -> (App, Arc<headway_core::broker::MemoryBroker>) {
    use headway_core::broker::MemoryBroker;
    use headway_core::task::{Seams, SystemClock};
    let clock: Arc<dyn headway_core::task::Clock> = Arc::new(SystemClock);
    let b = MemoryBroker::new(clock.clone());
    let app = App::new(
        Seams {
            broker: b.clone(),
            backend: Some(b.clone()),
            counter: Some(b.clone()),
            inspector: Some(b.clone()),
        },
        clock,
    );
    app.register(
        "add",
        Policy::default(),
        body(|_, a| async move { Ok(json!(a.iter().filter_map(Value::as_i64).sum::<i64>())) }),
    )
    .unwrap();
    (app, b)
}

/// `/api/dead?queue=` once it counts `n`.
async fn dead_once(a: &Admin, queue: &str, n: u64) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = call(a, authed(get(&format!("/api/dead?queue={queue}")))).await;
        assert_eq!(r.status, 200, "{r:?}");
        let v = body_json(&r);
        if v["count"] == n {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{queue} never held {n} dead letters: {v}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn ready(overview: &Value, queue: &str) -> u64 {
    overview["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == queue)
        .map_or(0, |q| q["ready"].as_u64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_requeued_purged_and_audited() {
    let (app, b) = app_and_broker();
    let a = admin(&app);
    // What a worker quarantines: a pickle, a message without a task name,
    // bytes that are not JSON (an XSS payload among them), and one good run.
    b.push_raw("default", b"\x80\x04\x95pickle");
    b.push_raw("default", br#"{"id":"d1","queue":"default"}"#);
    b.push_raw("default", b"<script>alert(1)</script>\n\xff");
    let w = start(&app);
    let good = send(&a, "add", json!([1, 2])).await;
    run_row(&a, &good, "SUCCESS").await;
    let v = dead_once(&a, "default", 3).await;
    stop(w).await;
    assert_eq!(v["queue"], "default");
    let letters = v["letters"].as_array().unwrap();
    assert_eq!(letters.len(), 3);
    // Newest first, each with its reason, size and an escaped preview.
    let reasons: Vec<&str> = letters
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    assert!(reasons[0].starts_with("not JSON"), "{reasons:?}");
    assert_eq!(reasons[1], "no task name");
    assert!(reasons[2].starts_with("content type not allowed: a pickle"));
    assert_eq!(letters[1]["id"], "d1");
    assert_eq!(letters[0]["id"], Value::Null);
    assert_eq!(letters[2]["size"], 9);
    assert_eq!(letters[2]["preview"], "\\x80\\x04\\x95pickle");
    assert_eq!(
        letters[0]["preview"], "<script>alert(1)</script>\\n\\xff",
        "shown as text, escaped where not printable"
    );
    assert_eq!(letters[0]["truncated"], false);
    assert!(letters[0]["at"].as_i64().unwrap() > 0);
    let raw = call(&a, authed(get("/api/dead?queue=default"))).await;
    let text = String::from_utf8(raw.body).unwrap();
    assert!(!text.contains("<script>"), "JSON escapes `<`: {text}");
    // `limit` bounds the listing, not the count.
    let one = body_json(&call(&a, authed(get("/api/dead?queue=default&limit=1"))).await);
    assert_eq!(
        (
            one["count"].clone(),
            one["letters"].as_array().unwrap().len()
        ),
        (json!(3), 1)
    );
    // The overview counts each queue's dead letters.
    let o = body_json(&call(&a, authed(get("/api/overview"))).await);
    assert_eq!(o["dead"], json!([{"queue": "default", "count": 3}]));
    assert_eq!(ready(&o, "default"), 0);

    // Requeue one by id: it is back on its queue, as it was.
    let r = call(
        &a,
        authed(post(
            "/api/dead/requeue",
            &json!({"queue": "default", "ids": ["d1"]}),
        )),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        body_json(&r),
        json!({"queue": "default", "requeued": 1, "ids": ["d1"]})
    );
    let r = call(
        &a,
        authed(post(
            "/api/dead/requeue",
            &json!({"queue": "default", "ids": ["nope"]}),
        )),
    )
    .await;
    assert_eq!(body_json(&r)["requeued"], 0);
    dead_once(&a, "default", 2).await;
    let o = body_json(&call(&a, authed(get("/api/overview"))).await);
    assert_eq!(ready(&o, "default"), 1);
    // Requeue all, at most one: the oldest goes back first (the pickle).
    let r = call(
        &a,
        authed(post(
            "/api/dead/requeue",
            &json!({"queue": "default", "limit": 1}),
        )),
    )
    .await;
    assert_eq!(body_json(&r)["requeued"], 1);
    let v = dead_once(&a, "default", 1).await;
    assert!(
        v["letters"][0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("not JSON")
    );
    // Purge drops the rest for good; again, nothing.
    let r = call(
        &a,
        authed(post("/api/dead/purge", &json!({"queue": "default"}))),
    )
    .await;
    assert_eq!(body_json(&r), json!({"queue": "default", "purged": 1}));
    let r = call(
        &a,
        authed(post("/api/dead/purge", &json!({"queue": "default"}))),
    )
    .await;
    assert_eq!(body_json(&r)["purged"], 0);
    dead_once(&a, "default", 0).await;
    let o = body_json(&call(&a, authed(get("/api/overview"))).await);
    assert_eq!(ready(&o, "default"), 2, "both re-queued letters wait again");

    // The audit log: every change made, newest first.
    let log = body_json(&call(&a, authed(get("/api/audit"))).await);
    let actions: Vec<&str> = log["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "dead.purge",
            "dead.purge",
            "dead.requeue",
            "dead.requeue",
            "dead.requeue",
            "send"
        ]
    );
    let first = &log["audit"][0];
    assert_eq!(first["by"], "token");
    assert_eq!(first["outcome"], json!({"queue": "default", "purged": 0}));
    assert!(first["at"].as_i64().unwrap() > 0);
}

#[tokio::test]
async fn dead_letter_routes_validate() {
    let (app, b) = app_and_broker();
    let a = admin(&app);
    b.push_raw("q", b"junk");
    let bad_gets = [
        "/api/dead",
        "/api/dead?queue=",
        "/api/dead?queue=q&limit=0",
        "/api/dead?queue=q&limit=-1",
        "/api/dead?queue=q&limit=x",
        "/api/dead?queue=q&limit=10001",
    ];
    for p in bad_gets {
        let r = call(&a, authed(get(p))).await;
        assert_eq!(r.status, 400, "{p}");
        assert_eq!(body_json(&r)["error"], "invalid", "{p}");
    }
    let long = "q".repeat(257);
    let bad_posts = [
        ("/api/dead/requeue", json!({})),
        ("/api/dead/requeue", json!({"queue": ""})),
        ("/api/dead/requeue", json!({"queue": long})),
        ("/api/dead/requeue", json!({"queue": 5})),
        ("/api/dead/requeue", json!({"queue": "q", "limit": 0})),
        ("/api/dead/requeue", json!({"queue": "q", "limit": -3})),
        ("/api/dead/requeue", json!({"queue": "q", "limit": 1.5})),
        ("/api/dead/requeue", json!({"queue": "q", "limit": "2"})),
        ("/api/dead/requeue", json!({"queue": "q", "ids": "d1"})),
        ("/api/dead/requeue", json!({"queue": "q", "ids": []})),
        ("/api/dead/requeue", json!({"queue": "q", "ids": [1]})),
        ("/api/dead/requeue", json!({"queue": "q", "ids": [""]})),
        ("/api/dead/requeue", json!({"queue": "q", "what": 1})),
        ("/api/dead/purge", json!({})),
        ("/api/dead/purge", json!({"queue": "q", "limit": 1})),
    ];
    for (p, body) in bad_posts {
        let r = call(&a, authed(post(p, &body))).await;
        assert_eq!(r.status, 400, "{p} {body}");
        assert_eq!(body_json(&r)["error"], "invalid", "{p} {body}");
    }
    // Reads are GET, changes POST.
    let r = call(&a, authed(post("/api/dead", &json!({"queue": "q"})))).await;
    assert_eq!(r.status, 405);
    let r = call(&a, authed(get("/api/dead/purge"))).await;
    assert_eq!((r.status, r.get("Allow")), (405, Some("POST")));
    // An unknown queue has none: 0, empty, nothing to do.
    let v = body_json(&call(&a, authed(get("/api/dead?queue=nowhere"))).await);
    assert_eq!(v, json!({"queue": "nowhere", "count": 0, "letters": []}));
    let r = call(
        &a,
        authed(post("/api/dead/requeue", &json!({"queue": "nowhere"}))),
    )
    .await;
    assert_eq!(body_json(&r)["requeued"], 0);
    let r = call(
        &a,
        authed(post("/api/dead/purge", &json!({"queue": "nowhere"}))),
    )
    .await;
    assert_eq!(body_json(&r)["purged"], 0);
    // Refused changes are not audited; made ones are.
    let log = body_json(&call(&a, authed(get("/api/audit"))).await);
    assert_eq!(log["audit"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn dead_letter_changes_need_csrf_origin_and_a_writable_admin() {
    let (app, _b) = app_and_broker();
    let a = admin(&app);
    let (cookie, csrf) = login(&a).await;
    let purge = || post("/api/dead/purge", &json!({"queue": "q"})).header("Cookie", cookie.clone());
    let r = call(&a, purge().header("Origin", ORIGIN)).await;
    assert_eq!(
        (r.status, body_json(&r)["error"].clone()),
        (403, json!("csrf"))
    );
    let r = call(&a, purge().header(CSRF_HEADER, csrf.clone())).await;
    assert_eq!(
        (r.status, body_json(&r)["error"].clone()),
        (403, json!("origin"))
    );
    let r = call(
        &a,
        purge()
            .header(CSRF_HEADER, csrf.clone())
            .header("Origin", "http://evil.example"),
    )
    .await;
    assert_eq!(r.status, 403);
    let r = call(
        &a,
        post("/api/dead/requeue", &json!({"queue": "q"}))
            .header("Cookie", cookie.clone())
            .header(CSRF_HEADER, csrf.clone())
            .header("Origin", ORIGIN),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = call(
        &a,
        purge().header(CSRF_HEADER, csrf).header("Origin", ORIGIN),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let log = body_json(&call(&a, authed(get("/api/audit"))).await);
    assert_eq!(log["audit"][0]["by"], "session");
    assert_eq!(log["audit"][0]["action"], "dead.purge");
    assert_eq!(log["audit"].as_array().unwrap().len(), 2);

    // Read-only: the list answers, every change is refused.
    let ro = admin_with(
        &app,
        AdminConfig {
            read_only: true,
            ..AdminConfig::default()
        },
    );
    assert_eq!(
        call(&ro, authed(get("/api/dead?queue=q"))).await.status,
        200
    );
    for p in ["/api/dead/requeue", "/api/dead/purge"] {
        let r = call(&ro, authed(post(p, &json!({"queue": "q"})))).await;
        assert_eq!(
            (r.status, body_json(&r)["error"].clone()),
            (403, json!("read_only")),
            "{p}"
        );
    }
    let log = body_json(&call(&ro, authed(get("/api/audit"))).await);
    assert_eq!(log["audit"], json!([]));
}

#[test]
fn previews_escape_what_is_not_printable_and_are_bounded() {
    use headway_core::admin::{PREVIEW_MAX, preview};
    assert_eq!(preview(b"{\"a\":1}"), "{\"a\":1}");
    assert_eq!(preview(b"a\\b\t\r\n\x00\x7f"), "a\\\\b\\t\\r\\n\\x00\\x7f");
    assert_eq!(preview("héllo".as_bytes()), "héllo");
    assert_eq!(preview("\u{85}".as_bytes()), "\\u{85}");
    assert_eq!(preview(b"\x80\xff"), "\\x80\\xff");
    let big = vec![b'x'; PREVIEW_MAX + 10];
    let p = preview(&big);
    assert_eq!(p, format!("{}…", "x".repeat(PREVIEW_MAX)));
}

/// `/api/workers` lists the nodes that answer (with when they last did),
/// and `/api/control` changes a task's rate and shuts a node down — by POST,
/// with the login and CSRF rules of every change, and audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_are_listed_and_controlled() {
    let app = app();
    let a = admin(&app);
    // No worker: nothing listed (the positive control follows).
    let r = call(&a, authed(get("/api/workers"))).await;
    assert_eq!(r.status, 200);
    assert_eq!(body_json(&r)["nodes"], json!([]));
    let running = start(&app);
    let h = &running.1;
    let listed = loop {
        let v = body_json(&call(&a, authed(get("/api/workers"))).await);
        if v["nodes"].as_array().is_some_and(|n| n.len() == 1) {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let node = listed["nodes"][0].clone();
    assert!(node["heartbeat"].as_i64().unwrap() >= listed["at"].as_i64().unwrap() - 1);
    assert_eq!(node["stats"]["workers"][0]["name"], "w1", "{node}");
    assert_eq!(listed["reach"], "broker");
    let name = node["node"].as_str().unwrap().to_string();

    // A change needs the CSRF value with a cookie, as every change does.
    let (cookie, csrf) = login(&a).await;
    let rate = json!({"command": "rate_limit", "node": name, "task": "add", "rate": "5/m"});
    let r = call(
        &a,
        post("/api/control", &rate)
            .header("Cookie", cookie.clone())
            .header("Origin", ORIGIN),
    )
    .await;
    assert_eq!(r.status, 403);
    let r = call(
        &a,
        post("/api/control", &rate)
            .header("Cookie", cookie.clone())
            .header("Origin", ORIGIN)
            .header(CSRF_HEADER, csrf.clone()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        body_json(&r)["replies"][&name],
        json!({"ok": "new rate limit set successfully"})
    );
    // GET is no way to change.
    let r = call(&a, authed(get("/api/control"))).await;
    assert_eq!(r.status, 405);
    // Refusals name what was wrong.
    for (bad, why) in [
        (
            json!({"command": "reboot", "node": name}),
            "invalid `command`",
        ),
        (
            json!({"command": "rate_limit", "node": name}),
            "invalid `task`",
        ),
        (
            json!({"command": "rate_limit", "node": name, "task": "nope", "rate": "1/s"}),
            "unknown task",
        ),
        (
            json!({"command": "rate_limit", "node": name, "task": "add", "rate": "x"}),
            "Invalid rate limit string",
        ),
        (
            json!({"command": "shutdown", "node": name, "x": 1}),
            "unknown field `x`",
        ),
    ] {
        let r = call(&a, authed(post("/api/control", &bad))).await;
        assert_eq!(r.status, 400, "{bad}");
        let text = String::from_utf8_lossy(&r.body).to_string();
        assert!(text.contains(why), "{bad}: {text}");
    }
    let r = call(
        &a,
        authed(post(
            "/api/control",
            &json!({"command": "shutdown", "node": "nobody"}),
        )),
    )
    .await;
    assert_eq!(r.status, 404);
    assert!(!h.is_finished(), "a shutdown for another node stopped it");
    // Shut down by its worker's name.
    let r = call(
        &a,
        authed(post(
            "/api/control",
            &json!({"command": "shutdown", "node": "w1"}),
        )),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let (_, h) = running;
    tokio::time::timeout(Duration::from_secs(10), h)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let audit = body_json(&call(&a, authed(get("/api/audit"))).await);
    let actions: Vec<&str> = audit
        .as_array()
        .or_else(|| audit["audit"].as_array())
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert_eq!(
        actions.iter().filter(|a| **a == "control").count(),
        2,
        "{audit}"
    );
}
