//! The request and the reply an adapter converts, and the headers every reply
//! carries.
//!
//! The core never touches a socket: a Python ASGI adapter or a Node
//! `(req, res)` adapter turns what its server received into a [`Request`],
//! and writes the [`Reply`] back. So the rules — routes, auth, escaping,
//! headers — are written once and cannot drift between the two languages.

use serde_json::Value;

use super::stream::EventStream;

/// One HTTP request, as an adapter received it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ... (matched case-sensitively, as HTTP methods are).
    pub method: String,
    /// The path below where the admin is mounted, with its query string
    /// (`/api/runs?limit=5`).
    pub path: String,
    /// Every header as received; names are matched case-insensitively.
    pub headers: Vec<(String, String)>,
    /// The body, at most [`super::Admin::max_body`] bytes for the adapter to
    /// read (a longer one is refused with 413 either way).
    pub body: Vec<u8>,
    /// Where the admin is mounted, as the server names it (`/admin`; empty
    /// at the root): the session cookie's `Path`.
    pub mount: String,
    /// Whether the request came over TLS: the session cookie is then
    /// `Secure` (as it is when a proxy says `X-Forwarded-Proto: https`).
    pub tls: bool,
    /// The client's address as the server saw it (never a header a client
    /// could write): what failed logins are limited per.
    pub peer: Option<String>,
}

impl Request {
    /// A request with no headers and no body, for tests and adapters.
    pub fn new(method: impl Into<String>, path: impl Into<String>) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
            mount: String::new(),
            tls: false,
            peer: None,
        }
    }

    /// The same request, as served below `mount` (`/admin`).
    pub fn mount(mut self, mount: impl Into<String>) -> Request {
        self.mount = mount.into();
        self
    }

    /// The same request, as received over TLS or not.
    pub fn tls(mut self, tls: bool) -> Request {
        self.tls = tls;
        self
    }

    /// The same request, from client address `peer`.
    pub fn peer(mut self, peer: impl Into<String>) -> Request {
        self.peer = Some(peer.into());
        self
    }

    /// The same request with one more header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Request {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The same request with a body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// The first value of header `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name`, in order (HTTP/2 splits `Cookie`).
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path without its query.
    pub(crate) fn route(&self) -> &str {
        self.path.split_once('?').map_or(&self.path, |(p, _)| p)
    }

    /// The query's pairs, percent-decoded.
    pub(crate) fn query(&self) -> Vec<(String, String)> {
        match self.path.split_once('?') {
            Some((_, q)) => query_pairs(q),
            None => Vec::new(),
        }
    }
}

/// One complete HTTP response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers to send, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A response with a body of `content_type`.
    pub(crate) fn with(status: u16, content_type: &str, body: Vec<u8>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
        }
    }

    /// A JSON response, escaped by [`safe_json`].
    pub(crate) fn json(status: u16, value: &Value) -> Response {
        Response::with(status, "application/json; charset=utf-8", safe_json(value))
    }

    /// A refusal: `{"error": code, "reason": why}`.
    pub(crate) fn error(status: u16, code: &str, reason: impl Into<String>) -> Response {
        Response::json(
            status,
            &serde_json::json!({ "error": code, "reason": reason.into() }),
        )
    }

    /// The same response with one more header.
    pub(crate) fn and(mut self, name: &str, value: impl Into<String>) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What [`super::Admin::handle`] answers: a whole response, or the head of a
/// server-sent event stream and the stream to pump after it.
pub enum Reply {
    /// Send it and be done.
    Full(Response),
    /// Send the head (`text/event-stream`), then every frame
    /// [`EventStream::next`] gives until the client goes away.
    Stream(Response, EventStream),
}

impl Reply {
    /// The response, or the stream's head.
    pub fn response(&self) -> &Response {
        match self {
            Reply::Full(r) | Reply::Stream(r, _) => r,
        }
    }

    /// The response, or the stream's head, dropping the stream.
    pub fn into_response(self) -> Response {
        match self {
            Reply::Full(r) | Reply::Stream(r, _) => r,
        }
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Full(r) => f.debug_tuple("Full").field(r).finish(),
            Reply::Stream(r, _) => f.debug_tuple("Stream").field(r).finish(),
        }
    }
}

/// The page's policy: scripts, styles and connections from this origin only
/// (so an injected `<script>` or inline handler does not run), and never in
/// a frame (clickjacking).
pub const CSP: &str = "default-src 'self'; frame-ancestors 'none'";

/// Headers every reply carries, errors and the stream included.
///
/// - CSP as [`CSP`]; `X-Frame-Options: DENY` for browsers that predate
///   `frame-ancestors`.
/// - `nosniff`, so a JSON body is never run as a script or page.
/// - `no-referrer`, so the page's URL (which may once have held the token)
///   never leaves in a `Referer`.
/// - `no-store`: reports and the page hold run data and a CSRF value that a
///   shared cache must not keep.
pub(crate) fn secure(headers: &mut Vec<(String, String)>) {
    for (k, v) in [
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-store"),
        ("X-Frame-Options", "DENY"),
    ] {
        headers.retain(|(name, _)| !name.eq_ignore_ascii_case(k));
        headers.push((k.into(), v.into()));
    }
}

/// JSON text in which `<`, `>` and `&` (and the JS line separators U+2028
/// and U+2029) appear only as `\u` escapes.
///
/// Those characters can occur in JSON only inside strings, so replacing them
/// in the serialised text keeps it equal as JSON; and a body that a browser
/// mis-sniffs as HTML, or that a page embeds, then cannot open a tag.
pub fn safe_json(value: &Value) -> Vec<u8> {
    let text = serde_json::to_string(value).expect("a JSON value always serialises");
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.into_bytes()
}

/// `a=1&b=x%20y` as pairs, `+` read as a space (HTML forms' encoding).
pub(crate) fn query_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k, true), decode(v, true))
        })
        .collect()
}

/// Percent-decodes `s` (invalid escapes are kept as written; invalid UTF-8
/// becomes U+FFFD).
pub(crate) fn decode(s: &str, plus: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_escaped_and_equal() {
        let v = json!({"a": "<script>&\u{2028}</script>", "b": [1, "x>y"]});
        let text = String::from_utf8(safe_json(&v)).unwrap();
        assert!(!text.contains('<') && !text.contains('>') && !text.contains('&'));
        assert!(text.contains("\\u003cscript\\u003e"));
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn queries_decode() {
        let q = query_pairs("token=a%2Bb&x=1+2&bad=%zz&end=%4");
        assert_eq!(q[0], ("token".into(), "a+b".into()));
        assert_eq!(q[1], ("x".into(), "1 2".into()));
        assert_eq!(q[2], ("bad".into(), "%zz".into()));
        assert_eq!(q[3], ("end".into(), "%4".into()));
        assert_eq!(decode("%41%42", false), "AB");
    }
}
