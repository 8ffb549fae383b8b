//! Logging in to the admin: the token is posted (never a URL), each login
//! is a session that logging out revokes on the server, the cookie's
//! attributes, short tokens refused at start, and failed logins limited per
//! client address and for everyone (429).

use std::sync::Arc;

use headway_core::admin::{
    Admin, AdminConfig, CSRF_HEADER, LOGIN_FAILS_GLOBAL, LOGIN_FAILS_PER_CLIENT, Reply, Request,
    Response, SESSION_MAX_AGE_S, TOKEN_MIN,
};
use headway_core::task::{App, Refused, VirtualClock};

const T: &str = "s3cret-token-for-tests";
const HOST: &str = "127.0.0.1:5555";
const ORIGIN: &str = "http://127.0.0.1:5555";

fn admin_on(app: &App) -> Admin {
    Admin::new(
        app.clone(),
        AdminConfig {
            token: Some(T.into()),
            ..AdminConfig::default()
        },
    )
    .unwrap()
}

fn clocked() -> (Arc<VirtualClock>, Admin) {
    let clock = VirtualClock::new(1_700_000_000_000);
    let app = App::memory(Some(clock.clone()));
    (clock, admin_on(&app))
}

async fn call(a: &Admin, req: Request) -> Response {
    match a.handle(req).await {
        Reply::Full(r) => r,
        Reply::Stream(..) => panic!("expected a full response"),
    }
}

fn form(token: &str) -> Request {
    Request::new("POST", "/login")
        .header("Host", HOST)
        .header("Origin", ORIGIN)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
}

/// The `name=value` part of a Set-Cookie.
fn pair(r: &Response) -> String {
    let set = r.get("Set-Cookie").expect("a Set-Cookie");
    set.split(';').next().unwrap().to_string()
}

fn attrs(r: &Response) -> Vec<String> {
    r.get("Set-Cookie")
        .unwrap()
        .split(';')
        .skip(1)
        .map(|a| a.trim().to_string())
        .collect()
}

async fn overview_with(a: &Admin, cookie: &str) -> u16 {
    call(
        a,
        Request::new("GET", "/api/overview")
            .header("Host", HOST)
            .header("Cookie", cookie),
    )
    .await
    .status
}

fn csrf_of(html: &[u8]) -> String {
    let html = std::str::from_utf8(html).unwrap();
    let tag = "<meta name=\"headway-csrf\" content=\"";
    let at = html.find(tag).unwrap() + tag.len();
    html[at..at + html[at..].find('"').unwrap()].to_string()
}

async fn page_csrf(a: &Admin, cookie: &str) -> String {
    let r = call(a, Request::new("GET", "/").header("Cookie", cookie)).await;
    assert_eq!(r.status, 200);
    csrf_of(&r.body)
}

fn logout(cookie: &str, csrf: &str) -> Request {
    Request::new("POST", "/logout")
        .header("Host", HOST)
        .header("Origin", ORIGIN)
        .header("Cookie", cookie)
        .header(CSRF_HEADER, csrf)
        .header("Content-Type", "application/json")
        .body("{}")
}

#[tokio::test]
async fn the_cookie_has_path_max_age_and_secure_over_tls() {
    let (_, a) = clocked();
    // Plain HTTP at the root: Path=/, no Secure (a browser would not keep
    // a Secure cookie from an http page).
    let r = call(&a, form(T)).await;
    assert_eq!(r.status, 303);
    assert_eq!(r.get("Location"), Some("/"));
    let at = attrs(&r);
    for want in [
        "Path=/".to_string(),
        format!("Max-Age={SESSION_MAX_AGE_S}"),
        "HttpOnly".into(),
        "SameSite=Strict".into(),
    ] {
        assert!(at.contains(&want), "{want} not in {at:?}");
    }
    assert!(!at.contains(&"Secure".to_string()), "{at:?}");
    // Mounted, over TLS: the mount's path, Secure; the redirect to the
    // mount's page.
    let r = call(&a, form(T).mount("/ops/admin").tls(true)).await;
    assert_eq!(r.get("Location"), Some("/ops/admin/"));
    let at = attrs(&r);
    assert!(at.contains(&"Path=/ops/admin".to_string()), "{at:?}");
    assert!(at.contains(&"Secure".to_string()), "{at:?}");
    // Behind a proxy that terminated TLS.
    let r = call(&a, form(T).header("X-Forwarded-Proto", "https")).await;
    assert!(attrs(&r).contains(&"Secure".to_string()));
    // The login page's form posts below the mount.
    let r = call(&a, Request::new("GET", "/").mount("/ops/admin")).await;
    assert_eq!(r.status, 401);
    let html = String::from_utf8(r.body).unwrap();
    assert!(html.contains("action=\"/ops/admin/login\""), "{html}");
    assert!(html.contains("method=\"post\""));
}

#[tokio::test]
async fn a_query_token_sets_no_session() {
    let (_, a) = clocked();
    let r = call(
        &a,
        Request::new("GET", format!("/?token={T}")).header("Host", HOST),
    )
    .await;
    assert_eq!(r.status, 303);
    assert_eq!(r.get("Location"), Some("/"));
    assert!(r.get("Set-Cookie").is_none(), "{r:?}");
    // Positive control: the same token posted logs in.
    let r = call(&a, form(T)).await;
    assert_eq!(r.status, 303);
    assert_eq!(overview_with(&a, &pair(&r)).await, 200);
}

#[tokio::test]
async fn logout_revokes_the_session_on_the_server() {
    let (_, a) = clocked();
    let one = pair(&call(&a, form(T)).await);
    let two = pair(&call(&a, form(T)).await);
    assert_ne!(one, two, "each login has its own session");
    assert_eq!(overview_with(&a, &one).await, 200);
    let csrf = page_csrf(&a, &one).await;
    assert_ne!(csrf, page_csrf(&a, &two).await, "each session its own CSRF");
    // Logging out needs the session's own CSRF value.
    let r = call(&a, logout(&one, "wrong")).await;
    assert_eq!(r.status, 403);
    assert_eq!(overview_with(&a, &one).await, 200);
    let r = call(&a, logout(&one, &csrf)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(attrs(&r).contains(&"Max-Age=0".to_string()));
    // A kept copy of the cookie is refused from now on; the other session
    // lives.
    assert_eq!(overview_with(&a, &one).await, 401);
    let r = call(&a, Request::new("GET", "/").header("Cookie", one.clone())).await;
    assert_eq!(r.status, 401);
    assert_eq!(overview_with(&a, &two).await, 200);
    // A session's CSRF value does not work with another session.
    let r = call(&a, logout(&two, &csrf)).await;
    assert_eq!(r.status, 403);
}

#[tokio::test]
async fn sessions_end_after_their_max_age() {
    let (clock, a) = clocked();
    let c = pair(&call(&a, form(T)).await);
    clock.advance(SESSION_MAX_AGE_S * 1000 - 1);
    assert_eq!(overview_with(&a, &c).await, 200);
    clock.advance(1);
    assert_eq!(overview_with(&a, &c).await, 401);
}

#[tokio::test]
async fn short_tokens_are_refused_at_start() {
    let app = App::memory(None);
    let short = "x".repeat(TOKEN_MIN - 1);
    match Admin::new(
        app.clone(),
        AdminConfig {
            token: Some(short),
            ..AdminConfig::default()
        },
    ) {
        Err(Refused::Invalid(why)) => {
            assert!(why.contains("`token`") && why.contains("16"), "{why}")
        }
        other => panic!("a 15-character token was taken: {other:?}"),
    }
    // Positive control: 16 characters are enough.
    let ok = Admin::new(
        app,
        AdminConfig {
            token: Some("x".repeat(TOKEN_MIN)),
            ..AdminConfig::default()
        },
    );
    assert!(ok.is_ok());
}

#[tokio::test]
async fn failed_logins_are_limited_per_client_and_for_everyone() {
    let (clock, a) = clocked();
    let per = LOGIN_FAILS_PER_CLIENT as usize;
    for i in 0..per {
        let r = call(&a, form("wrong-token-guess").peer("10.0.0.1")).await;
        assert_eq!(r.status, 401, "failure {i}");
        assert!(r.get("Set-Cookie").is_none());
    }
    // Past the limit, even the right token waits.
    let r = call(&a, form(T).peer("10.0.0.1")).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.get("Retry-After").unwrap().parse::<u64>().unwrap() >= 1);
    assert!(r.get("Set-Cookie").is_none());
    // Another client is not held up by it.
    assert_eq!(call(&a, form(T).peer("10.0.0.2")).await.status, 303);
    // A failure's worth of time later, one more try.
    clock.advance(60_000 / per as i64 + 1);
    assert_eq!(call(&a, form(T).peer("10.0.0.1")).await.status, 303);

    // Many addresses together: the global bucket.
    let (_, b) = clocked();
    let global = LOGIN_FAILS_GLOBAL as usize;
    for i in 0..global {
        let r = call(
            &b,
            form("wrong-token-guess").peer(format!("10.1.{}.{}", i / 256, i % 256)),
        )
        .await;
        assert_eq!(r.status, 401, "failure {i}");
    }
    let r = call(&b, form(T).peer("10.9.9.9")).await;
    assert_eq!(r.status, 429, "{r:?}");
    // JSON logins are answered in JSON.
    let r = call(
        &b,
        Request::new("POST", "/login")
            .header("Content-Type", "application/json")
            .peer("10.9.9.9")
            .body(format!("{{\"token\":\"{T}\"}}")),
    )
    .await;
    assert_eq!(r.status, 429);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["error"], "too_many_logins");
}

#[tokio::test]
async fn a_login_from_another_origin_is_refused() {
    let (_, a) = clocked();
    let r = call(
        &a,
        Request::new("POST", "/login")
            .header("Host", HOST)
            .header("Origin", "https://evil.example")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("token={T}")),
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(r.get("Set-Cookie").is_none());
    // A browser's form under `Referrer-Policy: no-referrer` says
    // `Origin: null`: that names no other origin.
    let r = call(
        &a,
        Request::new("POST", "/login")
            .header("Host", HOST)
            .header("Origin", "null")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("token={T}")),
    )
    .await;
    assert_eq!(r.status, 303);
}
