//! What an AMQP broker is built with: the URL (`amqp://`, `pyamqp://`,
//! `amqps://`) read as kombu reads it, and the options Celery's AMQP
//! topology depends on.
//!
//! The URL rules are kombu's, so one URL means the same vhost to a Celery
//! app and a headway one: the vhost is the path after the host with one
//! leading `/` dropped and percent-decoded (`/%2F` and `//` are the vhost
//! `/`), and an empty path is `/`. A missing user or password is kombu's
//! `guest`. The password never leaves this file unredacted: the URL is
//! shown (errors, `Debug`, logs) only through [`AmqpUrl`]'s `Display`.

use std::fmt;
use std::time::Duration;

/// A parsed AMQP URL.
#[derive(Clone, PartialEq, Eq)]
pub struct AmqpUrl {
    /// `amqps://`: TLS.
    pub tls: bool,
    /// The scheme as written, lower-case (`amqp`, `pyamqp`, `amqps`).
    pub scheme: String,
    pub user: String,
    pub password: String,
    pub host: String,
    pub port: u16,
    /// The virtual host, decoded (`/` for the default).
    pub vhost: String,
    /// `?heartbeat=<s>`: the heartbeat asked of the server (its own when
    /// absent).
    pub heartbeat: Option<u16>,
    /// `?max_priority=<n>` (1-255): queues are declared with
    /// `x-max-priority` n, as Celery's `task_queue_max_priority` does.
    pub max_priority: Option<u8>,
}

impl fmt::Debug for AmqpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AmqpUrl({self})")
    }
}

/// Percent-decodes `s`; `None` for a `%` not followed by two hex digits or
/// bytes that are not UTF-8.
fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Percent-encodes what a vhost may hold that a URL path may not (`/`,
/// `%`, `?`, `#`, `@`, spaces), for showing it.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '/' | '%' | '?' | '#' | '@' | ' ' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

impl AmqpUrl {
    /// Reads `text`, or says what is wrong with it (the text redacted).
    pub fn parse(text: &str) -> Result<AmqpUrl, String> {
        let shown = super::super::target::redact(text);
        let bad = |why: &str| format!("invalid `url` {shown:?}: {why}");
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| bad("not an amqp:// URL"))?;
        let scheme = scheme.to_ascii_lowercase();
        let tls = match scheme.as_str() {
            "amqp" | "pyamqp" => false,
            "amqps" => true,
            _ => return Err(bad("the scheme is not amqp://, pyamqp:// or amqps://")),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            None => ("guest".to_string(), "guest".to_string()),
            Some(u) => {
                let (user, pass) = u.split_once(':').unwrap_or((u, ""));
                let user =
                    decode(user).ok_or_else(|| bad("the user is not percent-encoded UTF-8"))?;
                let pass =
                    decode(pass).ok_or_else(|| bad("the password is not percent-encoded UTF-8"))?;
                (
                    if user.is_empty() {
                        "guest".into()
                    } else {
                        user
                    },
                    if pass.is_empty() {
                        "guest".into()
                    } else {
                        pass
                    },
                )
            }
        };
        let default_port = if tls { 5671 } else { 5672 };
        let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
            // [v6]:port
            let (h, after) = h.split_once(']').ok_or_else(|| bad("an unclosed `[`"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p
                    .parse()
                    .map_err(|_| bad("the port is not a number 1-65535"))?,
                None => default_port,
            };
            (h.to_string(), port)
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_string(),
                    p.parse::<u16>()
                        .ok()
                        .filter(|&p| p > 0)
                        .ok_or_else(|| bad("the port is not a number 1-65535"))?,
                ),
                None => (hostport.to_string(), default_port),
            }
        };
        let host = if host.is_empty() {
            "localhost".to_string()
        } else {
            host
        };
        let vhost = decode(path.strip_prefix('/').unwrap_or(path))
            .ok_or_else(|| bad("the vhost is not percent-encoded UTF-8"))?;
        let vhost = if vhost.is_empty() {
            "/".to_string()
        } else {
            vhost
        };
        let mut heartbeat = None;
        let mut max_priority = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "heartbeat" => {
                    heartbeat = Some(
                        v.parse::<u16>()
                            .map_err(|_| bad("`heartbeat` is not a number of seconds 0-65535"))?,
                    )
                }
                "max_priority" => {
                    max_priority = Some(
                        v.parse::<u8>()
                            .ok()
                            .filter(|&p| p > 0)
                            .ok_or_else(|| bad("`max_priority` is not a number 1-255"))?,
                    )
                }
                // kombu's other options (ssl settings, timeouts) are not
                // read; refusing them would refuse Celery's own URLs.
                _ => {}
            }
        }
        Ok(AmqpUrl {
            tls,
            scheme,
            user,
            password,
            host,
            port,
            vhost,
            heartbeat,
            max_priority,
        })
    }

    /// The URI lapin dials.
    pub(super) fn uri(&self) -> lapin::uri::AMQPUri {
        let mut u = lapin::uri::AMQPUri {
            scheme: if self.tls {
                lapin::uri::AMQPScheme::AMQPS
            } else {
                lapin::uri::AMQPScheme::AMQP
            },
            vhost: self.vhost.clone(),
            ..Default::default()
        };
        u.authority.host = self.host.clone();
        u.authority.port = self.port;
        u.authority.userinfo.username = self.user.clone();
        u.authority.userinfo.password = self.password.clone();
        u.query.heartbeat = self.heartbeat;
        u.query.connection_timeout = Some(5_000);
        u
    }
}

/// Shown with the password redacted and the vhost encoded:
/// `amqp://guest:***@127.0.0.1:5672/%2F`.
impl fmt::Display for AmqpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        write!(
            f,
            "{}://{}:***@{}:{}/{}",
            self.scheme,
            self.user,
            host,
            self.port,
            encode(&self.vhost)
        )
    }
}

/// What an AMQP broker is built with besides its URL.
#[derive(Debug, Clone)]
pub struct AmqpOptions {
    /// This consumer's node name (`headway@<host>` when `None`): its pidbox
    /// queue is `<node>.celery.pidbox`, as a Celery worker's.
    pub consumer: Option<String>,
    /// The Celery queue headway's `default` queue stands for (Celery's
    /// `task_default_queue`, `celery`).
    pub default_queue: String,
    /// `x-max-priority` of every queue declared (Celery's
    /// `task_queue_max_priority`); `None` declares plain queues, as Celery
    /// does by default. Must match what Celery declares: RabbitMQ refuses a
    /// second declaration with other arguments.
    pub max_priority: Option<u8>,
    /// How long a publish waits for the broker's confirm.
    pub confirm_timeout: Duration,
    /// How long a revoke is remembered (Celery's `LimitedSet` keeps 3 h).
    pub revoke_keep: Duration,
    /// Whether Celery's task events go out from the start (Celery's
    /// `worker_send_task_events`, a worker's `-E`): `false`, as in Celery;
    /// Celery's `enable_events` control turns them on too.
    pub task_events: bool,
    /// Whether a `task-sent` event goes out for each message published
    /// (Celery's `task_send_sent_event`): `false`, as in Celery.
    pub task_send_sent_event: bool,
}

impl Default for AmqpOptions {
    fn default() -> Self {
        AmqpOptions {
            consumer: None,
            default_queue: "celery".into(),
            max_priority: None,
            confirm_timeout: Duration::from_secs(30),
            revoke_keep: Duration::from_secs(3 * 3600),
            task_events: false,
            task_send_sent_event: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kombu_vhost_rules() {
        let u = AmqpUrl::parse("amqp://guest:guest@127.0.0.1:5672/vhost").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.vhost.as_str()),
            ("127.0.0.1", 5672, "vhost")
        );
        for (url, vhost) in [
            ("amqp://h", "/"),
            ("amqp://h/", "/"),
            ("amqp://h//", "/"),
            ("amqp://h/%2F", "/"),
            ("amqp://h/%2f", "/"),
            ("amqp://h/a%2Fb", "a/b"),
        ] {
            assert_eq!(AmqpUrl::parse(url).unwrap().vhost, vhost, "{url}");
        }
        let s = AmqpUrl::parse("amqps://u:p%40ss@h/x").unwrap();
        assert!(s.tls);
        assert_eq!((s.port, s.password.as_str()), (5671, "p@ss"));
        let d = AmqpUrl::parse("pyamqp://h").unwrap();
        assert_eq!((d.user.as_str(), d.password.as_str()), ("guest", "guest"));
    }

    #[test]
    fn shown_without_the_password() {
        let u = AmqpUrl::parse("amqp://user:s3cret@h:1/%2F?heartbeat=10").unwrap();
        assert_eq!(u.to_string(), "amqp://user:***@h:1/%2F");
        assert_eq!(u.heartbeat, Some(10));
        let p = AmqpUrl::parse("amqp://h/?max_priority=10").unwrap();
        assert_eq!(p.max_priority, Some(10));
        assert!(AmqpUrl::parse("amqp://h/?max_priority=0").is_err());
        let e = AmqpUrl::parse("amqp://user:s3cret@h:99999/").unwrap_err();
        assert!(!e.contains("s3cret") && e.contains("port"), "{e}");
        let e = AmqpUrl::parse("amqp://user:s3cret@h/%zz").unwrap_err();
        assert!(!e.contains("s3cret") && e.contains("vhost"), "{e}");
    }
}
