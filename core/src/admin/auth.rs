//! Who may read and who may change: the token, the session cookie, the CSRF
//! value and the origin check.
//!
//! Flower shipped with no authentication and no CSRF protection, and its
//! OAuth check matched emails by an unanchored regex (CVE-2022-30034). So
//! here every secret is compared exactly, in constant time, and a change
//! needs either the `Authorization` header — which a browser never attaches
//! by itself to a cross-site request — or the session cookie *and* the CSRF
//! value from the page *and* an `Origin` (or `Referer`) that is this host or
//! one named in `allowed_origins`.

use subtle::ConstantTimeEq;

use super::Inner;
use super::http::{Request, Response};

/// The session cookie's name.
pub const COOKIE: &str = "headway_admin";

/// The header the page sends its CSRF value in (the name Django, Rails and
/// Angular use, so proxies and WAFs already pass it).
pub const CSRF_HEADER: &str = "X-CSRF-Token";

/// How a request proved it may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Who {
    /// `Authorization: Bearer <token>`: a client that is not a browser page.
    Bearer,
    /// The session cookie a login (`POST /login`) set.
    Session,
}

/// 32 bytes from the OS's CSPRNG as unpadded base64url (43 characters): 256
/// bits, the size OWASP's session guidance sets as comfortably beyond
/// guessing, and safe in a URL, a header and a cookie as is.
pub(crate) fn generate() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the OS random source is available");
    base64url(&b)
}

fn base64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Whether `given` is `secret`, taking the same time wherever they differ.
pub(crate) fn same(given: &str, secret: &str) -> bool {
    given.as_bytes().ct_eq(secret.as_bytes()).into()
}

/// The bearer token, if the request carries one.
fn bearer(req: &Request) -> Option<&str> {
    let v = req.get("authorization")?.trim();
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The value of cookie `name`, from any `Cookie` header.
pub(crate) fn cookie<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.get_all("cookie")
        .flat_map(|h| h.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
}

/// How the request proves it may read, if it does.
pub(crate) fn who(inner: &Inner, req: &Request) -> Option<Who> {
    if let Some(t) = bearer(req)
        && same(t, &inner.token)
    {
        return Some(Who::Bearer);
    }
    session_csrf(inner, req).map(|_| Who::Session)
}

/// The CSRF value of the live session the request's cookie names.
pub(crate) fn session_csrf(inner: &Inner, req: &Request) -> Option<String> {
    let c = cookie(req, COOKIE)?;
    let now = inner.app.now();
    inner
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(c, now)
        .map(|s| s.csrf.clone())
}

/// The 401 every unauthenticated request gets.
pub(crate) fn unauthorized() -> Response {
    Response::error(
        401,
        "unauthorized",
        "this admin needs its token: log in on its page (the token is posted, \
         never put in the URL), or send `Authorization: Bearer <token>`",
    )
    .and("WWW-Authenticate", "Bearer realm=\"headway admin\"")
}

/// Whether a request that may read may also change something; the refusal
/// when not.
pub(crate) fn may_change(inner: &Inner, req: &Request, who: Who) -> Result<(), Response> {
    if inner.read_only {
        return Err(Response::error(
            403,
            "read_only",
            "this admin is read-only: it refuses every change",
        ));
    }
    if who == Who::Bearer {
        return Ok(());
    }
    csrf_and_origin(inner, req)
}

/// What a request made with the session cookie needs besides it: its
/// session's CSRF value in [`CSRF_HEADER`], and an origin of this host or
/// of `allowed_origins`.
pub(crate) fn csrf_and_origin(inner: &Inner, req: &Request) -> Result<(), Response> {
    let csrf = session_csrf(inner, req);
    match (req.get(CSRF_HEADER), csrf) {
        (Some(v), Some(csrf)) if same(v.trim(), &csrf) => {}
        _ => {
            return Err(Response::error(
                403,
                "csrf",
                "a change by the session cookie needs the page's CSRF value in X-CSRF-Token",
            ));
        }
    }
    if !origin_ok(inner, req) {
        return Err(Response::error(
            403,
            "origin",
            "a change by the session cookie must come from this host's page \
             (Origin or Referer), or from an origin in allowed_origins",
        ));
    }
    Ok(())
}

/// Whether the request names an origin (`Origin`, or without one
/// `Referer`) that is neither this host nor one of `allowed_origins`. A
/// missing origin, or `Origin: null` — what a browser sends for a form
/// posted from a page served with `Referrer-Policy: no-referrer`, as every
/// page here is — names none.
pub(crate) fn names_other_origin(inner: &Inner, req: &Request) -> bool {
    let from = req.get("origin").or_else(|| req.get("referer"));
    from.is_some_and(|f| origin_of(f.trim()).is_some()) && !origin_ok(inner, req)
}

/// `scheme://authority` of a URL (lower-cased), or `None` when it has none.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    if scheme.is_empty() || authority.is_empty() {
        return None;
    }
    Some(format!("{scheme}://{authority}").to_ascii_lowercase())
}

/// Whether the request's `Origin` (or, without one, its `Referer`) is this
/// host or exactly one of `allowed_origins`. A request with neither, or with
/// `Origin: null` (sandboxed frames, some redirects), is refused: a browser's
/// `fetch` POST always sends `Origin`.
pub(crate) fn origin_ok(inner: &Inner, req: &Request) -> bool {
    let from = match req.get("origin") {
        Some(o) => o.trim(),
        None => match req.get("referer") {
            Some(r) => r.trim(),
            None => return false,
        },
    };
    let Some(origin) = origin_of(from) else {
        return false;
    };
    if inner.allowed_origins.contains(&origin) {
        return true;
    }
    let Some(host) = req.get("host") else {
        return false;
    };
    let authority = &origin[origin.find("://").map_or(0, |i| i + 3)..];
    authority == host.trim().to_ascii_lowercase()
}

/// An allowed origin as compared: lower-case, without a trailing `/`.
pub(crate) fn normalise_origin(o: &str) -> String {
    o.trim().trim_end_matches('/').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_and_url_safe() {
        let t = generate();
        assert_eq!(t.len(), 43);
        assert!(
            t.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert_ne!(t, generate());
        assert_eq!(base64url(b"foob"), "Zm9vYg");
        assert_eq!(base64url(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn compare_and_parse() {
        assert!(same("abc", "abc"));
        assert!(!same("abd", "abc") && !same("ab", "abc") && !same("", "abc"));
        let r = Request::new("GET", "/")
            .header("Authorization", "bearer  tok ")
            .header("Cookie", "a=1; headway_admin=s3")
            .header("cookie", "b=2");
        assert_eq!(bearer(&r), Some("tok"));
        assert_eq!(cookie(&r, COOKIE), Some("s3"));
        assert_eq!(cookie(&r, "b"), Some("2"));
        assert_eq!(
            origin_of("HTTP://Example.com:8080/x?y").as_deref(),
            Some("http://example.com:8080")
        );
        assert_eq!(origin_of("null"), None);
    }
}
