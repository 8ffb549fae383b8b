//! Redis connection URLs, parsed by hand so a secret can never leak through
//! a parser's error message, and shown redacted everywhere.
//!
//! `redis://[user[:password]@]host[:port][/db]` and `rediss://…` (TLS,
//! certificate and host name verified); `redis+sentinel://[auth@]h1:p1,h2:p2/<master>[/<db>]`
//! (the primary the sentinels name, port 26379 by default; the credentials
//! and database are the primary's) and `redis+cluster://[auth@]h1:p1,h2:p2[/]`
//! (a Cluster's seed nodes), each with an `s` for TLS. One option may
//! follow: `?wait=N` (with `&wait_timeout=<ms>`), see [`Wait`]. Username and password are
//! percent-decoded, as RFC 3986 userinfo is (a password with `@` or `:` in it
//! is written `%40`, `%3A`). The ACL username is kept, not dropped: Celery
//! once dropped it silently. Display and Debug print
//! `redis://user:***@host:port/db`.

use std::fmt;
use std::time::Duration;

use crate::task::state::Refused;

/// Redis's default port (redis.io, "Redis configuration").
pub const DEFAULT_PORT: u16 = 6379;

/// Sentinel's default port.
const SENTINEL_PORT: u16 = 26379;

/// How a URL reaches its Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One node, `host:port`.
    Single,
    /// The primary the sentinels at `nodes` name for `master`.
    Sentinel {
        master: String,
        nodes: Vec<(String, u16)>,
    },
    /// A Redis Cluster, found from its seed `nodes`.
    Cluster { nodes: Vec<(String, u16)> },
}

/// `?wait=N`: a send is confirmed only once `replicas` replicas have it
/// (Redis `WAIT`), waiting up to `timeout` (`&wait_timeout=<ms>`, 1 s by
/// default) on the connection that wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    pub replicas: u32,
    pub timeout: Duration,
}

/// The most replicas `?wait=` may ask for (more is a typo).
const MAX_WAIT: u32 = 1000;

/// A parsed Redis URL. Its Display and Debug never show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    /// `rediss://`: TLS with verification.
    pub tls: bool,
    /// One node, the sentinels or a Cluster's seeds.
    pub topology: Topology,
    /// The host name or address (IPv6 without brackets): the first node's.
    pub host: String,
    /// The port (6379 when absent; 26379 for a sentinel): the first node's.
    pub port: u16,
    /// The ACL username, percent-decoded.
    pub username: Option<String>,
    /// The password, percent-decoded.
    pub password: Option<String>,
    /// The database number (0 when absent).
    pub db: i64,
    /// `?wait=N`: how many replicas a send waits for.
    pub wait: Option<Wait>,
}

fn bad(why: impl fmt::Display) -> Refused {
    Refused::Invalid(format!("invalid `url`: {why}"))
}

fn decode(part: &str, what: &str) -> Result<String, Refused> {
    let b = part.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                // The bad escape is not quoted: it may be part of a secret.
                .ok_or_else(|| bad(format!("the {what} has a malformed %-escape")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad(format!("the {what} is not UTF-8 once decoded")))
}

/// `?wait=N[&wait_timeout=ms]`.
fn parse_query(q: &str) -> Result<Wait, Refused> {
    let mut replicas = None;
    let mut timeout = Duration::from_secs(1);
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "wait" => {
                replicas = Some(
                    v.parse::<u32>()
                        .ok()
                        .filter(|n| (1..=MAX_WAIT).contains(n))
                        .ok_or_else(|| {
                            bad(format!(
                                "`wait` must be a number of replicas, 1 to {MAX_WAIT}; got {:?}",
                                short(v)
                            ))
                        })?,
                )
            }
            "wait_timeout" => {
                timeout = v
                    .parse::<u64>()
                    .ok()
                    .filter(|ms| (1..=3_600_000).contains(ms))
                    .map(Duration::from_millis)
                    .ok_or_else(|| {
                        bad(format!(
                            "`wait_timeout` must be milliseconds, 1 to 3600000; got {:?}",
                            short(v)
                        ))
                    })?
            }
            other => {
                return Err(bad(format!(
                    "unknown option {:?} (the options are `wait` and `wait_timeout`; \
                     TLS is always verified)",
                    short(other)
                )));
            }
        }
    }
    let replicas = replicas.ok_or_else(|| bad("`wait_timeout` is given without `wait`"))?;
    Ok(Wait { replicas, timeout })
}

/// A value quoted in an error, cut short.
fn short(v: &str) -> &str {
    match v.char_indices().nth(24) {
        Some((i, _)) => &v[..i],
        None => v,
    }
}

/// One `host[:port]` (IPv6 in brackets), `default` when the port is absent.
fn host_port(hostport: &str, default: u16) -> Result<(String, u16), Refused> {
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let end = v6
            .find(']')
            .ok_or_else(|| bad("an IPv6 host needs a closing `]`"))?;
        let after = &v6[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(bad("unexpected text after the IPv6 host")),
        };
        (v6[..end].to_string(), port)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    if host.is_empty() {
        return Err(bad("the host is missing"));
    }
    // A name or an IPv4 address; or an IPv6 address in brackets, with
    // a zone after `%` (RFC 6874). Anything else is refused rather than
    // passed on to a resolver: `redis://a:b:1` is an IPv6 host without
    // brackets.
    let v6 = hostport.starts_with('[');
    let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    let ok = if v6 {
        let (addr, zone) = host.split_once('%').unwrap_or((&host, "x"));
        addr.contains(':')
            && addr
                .chars()
                .all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.'))
            && !zone.is_empty()
            && zone.chars().all(|c| name_char(c) || c == '~')
    } else {
        host.chars().all(name_char)
    };
    if !ok {
        return Err(bad(if !v6 && host.contains(':') {
            "an IPv6 host needs brackets: redis://[::1]:6379"
        } else if v6 {
            "the host in brackets is not an IPv6 address"
        } else {
            "the host has a character a host name or address cannot have"
        }));
    }
    let port = match port {
        None | Some("") => default,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| bad(format!("the port {p:?} is not 1 to 65535")))?,
    };
    Ok((host, port))
}

impl RedisUrl {
    /// Parses `redis://` or `rediss://` URLs (and their `+sentinel`,
    /// `+cluster` forms). Refused with a message naming `url` and what is
    /// wrong, never quoting the userinfo.
    pub fn parse(text: &str) -> Result<RedisUrl, Refused> {
        let (scheme, rest) = text.split_once("://").unwrap_or(("", text));
        let (tls, kind) = match scheme {
            "redis" => (false, 0),
            "rediss" => (true, 0),
            "redis+sentinel" => (false, 1),
            "rediss+sentinel" => (true, 1),
            "redis+cluster" => (false, 2),
            "rediss+cluster" => (true, 2),
            _ => {
                // Only the scheme is quoted; the rest may hold a password.
                return Err(bad(format!(
                    "expected redis://, rediss://, redis+sentinel:// or redis+cluster://, got {:?}",
                    if scheme.len() <= 16 { scheme } else { "?" }
                )));
            }
        };
        if rest.contains('#') {
            return Err(bad("a fragment (`#`) is not supported"));
        }
        // The options follow the hosts: a `?` in the userinfo is not one.
        let after_auth = rest.rfind('@').map_or(0, |at| at + 1);
        let (rest, query) = match rest[after_auth..].find('?') {
            Some(i) => (&rest[..after_auth + i], Some(&rest[after_auth + i + 1..])),
            None => (rest, None),
        };
        let wait = query.map(parse_query).transpose()?;
        let (auth, hostpart) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (hostport, path) = match hostpart.find('/') {
            Some(i) => (&hostpart[..i], &hostpart[i + 1..]),
            None => (hostpart, ""),
        };
        let default_port = if kind == 1 {
            SENTINEL_PORT
        } else {
            DEFAULT_PORT
        };
        let nodes = if kind == 0 {
            vec![host_port(hostport, default_port)?]
        } else {
            hostport
                .split(',')
                .map(|h| host_port(h, default_port))
                .collect::<Result<Vec<_>, _>>()?
        };
        let (db_text, topology) = match kind {
            0 => (path, Topology::Single),
            1 => {
                let (master, db) = path.split_once('/').unwrap_or((path, ""));
                if master.is_empty() {
                    return Err(bad(
                        "a redis+sentinel:// URL names the master after the hosts: \
                         redis+sentinel://h1:26379,h2:26379/mymaster/0",
                    ));
                }
                let master = decode(master, "master name")?;
                (
                    db,
                    Topology::Sentinel {
                        master,
                        nodes: nodes.clone(),
                    },
                )
            }
            _ => {
                if !matches!(path.trim_end_matches('/'), "" | "0") {
                    return Err(bad("a Redis Cluster has database 0 only"));
                }
                (
                    "",
                    Topology::Cluster {
                        nodes: nodes.clone(),
                    },
                )
            }
        };
        let (host, port) = nodes[0].clone();
        let db = match db_text.trim_end_matches('/') {
            "" => 0,
            d => d
                .parse::<i64>()
                .ok()
                .filter(|d| *d >= 0)
                .ok_or_else(|| bad(format!("the database {d:?} is not a number 0 or more")))?,
        };
        let (username, password) = match auth {
            None => (None, None),
            Some(a) => {
                let (u, p) = match a.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (a, None),
                };
                let u = decode(u, "username")?;
                let p = p.map(|p| decode(p, "password")).transpose()?;
                // `redis://secret@host` is a password-only URL, as in
                // redis-cli and redis-rs; `redis://user:@host` has none.
                match p {
                    None if !u.is_empty() => (None, Some(u)),
                    p => ((!u.is_empty()).then_some(u), p.filter(|p| !p.is_empty())),
                }
            }
        };
        Ok(RedisUrl {
            tls,
            topology,
            host,
            port,
            username,
            password,
            db,
            wait,
        })
    }

    /// Celery's Sentinel URL — kombu's `sentinel://[auth@]h1:p1[/db];sentinel://h2:p2;…`
    /// with the master's name given apart (`master_name` of
    /// `broker_transport_options`) — as the `redis+sentinel://` URL it
    /// means: the hosts in order, the first credentials and database
    /// given (they are the primary's). `None` when `text` is not one.
    pub fn from_celery_sentinel(
        text: &str,
        master_name: Option<&str>,
    ) -> Result<Option<String>, Refused> {
        if !text.to_ascii_lowercase().starts_with("sentinel://") {
            return Ok(None);
        }
        let Some(master) = master_name.filter(|m| !m.is_empty()) else {
            return Err(Refused::Invalid(
                "invalid `master_name`: a sentinel:// URL needs the name of the master \
                 the sentinels watch (Celery's broker_transport_options master_name)"
                    .into(),
            ));
        };
        let (mut auth, mut db, mut hosts) = (None, None, Vec::new());
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let Some(rest) = part
                .get(..11)
                .filter(|s| s.eq_ignore_ascii_case("sentinel://"))
                .map(|_| &part[11..])
            else {
                return Err(bad(
                    "each URL of a sentinel:// list starts with sentinel://",
                ));
            };
            let (a, hostpart) = match rest.rfind('@') {
                Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
                None => (None, rest),
            };
            let (h, path) = hostpart.split_once('/').unwrap_or((hostpart, ""));
            if auth.is_none() {
                auth = a;
            }
            if db.is_none() && !path.trim_end_matches('/').is_empty() {
                db = Some(path.trim_end_matches('/'));
            }
            hosts.push(h);
        }
        let mut out = String::from("redis+sentinel://");
        if let Some(a) = auth {
            out.push_str(a);
            out.push('@');
        }
        out.push_str(&hosts.join(","));
        out.push('/');
        for b in master.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out.push('/');
        out.push_str(db.unwrap_or("0"));
        // Checked now, so a bad list is refused where it was given.
        RedisUrl::parse(&out)?;
        Ok(Some(out))
    }

    /// `text` with the password taken out, in every form it could be
    /// written in (as it is, and percent-encoded), however short: what an
    /// error from below passes through before it is shown. A password
    /// shorter than three characters is replaced only where it sits in a
    /// URL's userinfo (`:p@`), so the error's other text stays readable.
    pub fn scrub(&self, text: &str) -> String {
        let Some(p) = self.password.as_deref().filter(|p| !p.is_empty()) else {
            return text.to_string();
        };
        let encoded: String = p
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let mut out = text.to_string();
        for form in [p.to_string(), encoded.clone(), encoded.to_lowercase()] {
            if form.len() >= 3 {
                out = out.replace(&form, "***");
            } else {
                out = out.replace(&format!(":{form}@"), ":***@");
            }
        }
        out
    }
}

/// Writes `s` percent-encoded but for RFC 3986's unreserved characters, so
/// a username with `:`, `@` or `%` in it prints as a URL that parses back.
fn encoded(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            f.write_str(std::str::from_utf8(&[b]).expect("ASCII"))?;
        } else {
            write!(f, "%{b:02X}")?;
        }
    }
    Ok(())
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.tls { "rediss" } else { "redis" })?;
        f.write_str(match self.topology {
            Topology::Single => "://",
            Topology::Sentinel { .. } => "+sentinel://",
            Topology::Cluster { .. } => "+cluster://",
        })?;
        match (&self.username, &self.password) {
            (Some(u), Some(_)) => {
                encoded(f, u)?;
                f.write_str(":***@")?
            }
            // `user@host` would read as a password (redis-cli's rule, and
            // ours): a username alone is written `user:@host`.
            (Some(u), None) => {
                encoded(f, u)?;
                f.write_str(":@")?
            }
            (None, Some(_)) => f.write_str(":***@")?,
            (None, None) => {}
        }
        let one = |f: &mut fmt::Formatter<'_>, (h, p): &(String, u16)| {
            if h.contains(':') {
                write!(f, "[{h}]:{p}")
            } else {
                write!(f, "{h}:{p}")
            }
        };
        match &self.topology {
            Topology::Single => {
                one(f, &(self.host.clone(), self.port))?;
                write!(f, "/{}", self.db)?;
            }
            Topology::Sentinel { master, nodes } => {
                for (i, n) in nodes.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    one(f, n)?;
                }
                f.write_str("/")?;
                encoded(f, master)?;
                write!(f, "/{}", self.db)?;
            }
            Topology::Cluster { nodes } => {
                for (i, n) in nodes.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    one(f, n)?;
                }
                f.write_str("/")?;
            }
        }
        if let Some(w) = self.wait {
            write!(
                f,
                "?wait={}&wait_timeout={}",
                w.replicas,
                w.timeout.as_millis()
            )?;
        }
        Ok(())
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisUrl({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_redacts() {
        let u = RedisUrl::parse("rediss://app:p%40ss%3Aw0rd@cache.example:6380/3").unwrap();
        assert!(u.tls);
        assert_eq!(u.host, "cache.example");
        assert_eq!(u.port, 6380);
        assert_eq!(u.db, 3);
        assert_eq!(u.username.as_deref(), Some("app"));
        assert_eq!(u.password.as_deref(), Some("p@ss:w0rd"));
        assert_eq!(u.to_string(), "rediss://app:***@cache.example:6380/3");
        assert!(!format!("{u:?}").contains("w0rd"));
        assert_eq!(u.scrub("AUTH p@ss:w0rd failed"), "AUTH *** failed");

        let u = RedisUrl::parse("redis://127.0.0.1").unwrap();
        assert_eq!((u.port, u.db, u.tls), (6379, 0, false));
        assert_eq!(u.to_string(), "redis://127.0.0.1:6379/0");
        let u = RedisUrl::parse("redis://:secret@h/").unwrap();
        assert_eq!((u.username, u.password.as_deref()), (None, Some("secret")));
        let u = RedisUrl::parse("redis://secret@h").unwrap();
        assert_eq!(u.password.as_deref(), Some("secret"));
        assert_eq!(u.to_string(), "redis://:***@h:6379/0");
        let u = RedisUrl::parse("redis://[::1]:7000/2").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.db), ("::1", 7000, 2));
        assert_eq!(u.to_string(), "redis://[::1]:7000/2");
        let u = RedisUrl::parse("redis://user:@h").unwrap();
        assert_eq!(
            (u.username.as_deref(), u.password.as_deref()),
            (Some("user"), None)
        );
        assert_eq!(u.to_string(), "redis://user:@h:6379/0");
        assert_eq!(RedisUrl::parse(&u.to_string()).unwrap(), u);
        // A username with URL characters prints encoded, and parses back.
        let u = RedisUrl::parse("redis://a%40b%3Ac:pw@h").unwrap();
        assert_eq!(u.username.as_deref(), Some("a@b:c"));
        assert_eq!(u.to_string(), "redis://a%40b%3Ac:***@h:6379/0");
        let back = RedisUrl::parse(&u.to_string()).unwrap();
        assert_eq!(back.username, u.username);
        let u = RedisUrl::parse("redis://[fe80::1%25eth0]:1").unwrap();
        assert_eq!(u.host, "fe80::1%25eth0");
    }

    #[test]
    fn sentinel_cluster_and_wait() {
        let u =
            RedisUrl::parse("redis+sentinel://:pw@s1,s2:26380,[::1]:26381/my%20master/2?wait=1")
                .unwrap();
        assert_eq!(
            u.topology,
            Topology::Sentinel {
                master: "my master".into(),
                nodes: vec![
                    ("s1".into(), 26379),
                    ("s2".into(), 26380),
                    ("::1".into(), 26381)
                ],
            }
        );
        assert_eq!((u.db, u.password.as_deref()), (2, Some("pw")));
        assert_eq!(
            u.wait,
            Some(Wait {
                replicas: 1,
                timeout: Duration::from_secs(1)
            })
        );
        let shown = u.to_string();
        assert_eq!(
            shown,
            "redis+sentinel://:***@s1:26379,s2:26380,[::1]:26381/my%20master/2?wait=1&wait_timeout=1000"
        );
        let u = RedisUrl::parse("rediss+sentinel://s1/m").unwrap();
        assert!(u.tls);
        assert_eq!(u.db, 0);
        let u = RedisUrl::parse("redis+cluster://a:7000,b:7001/?wait=2&wait_timeout=250").unwrap();
        assert_eq!(
            u.topology,
            Topology::Cluster {
                nodes: vec![("a".into(), 7000), ("b".into(), 7001)]
            }
        );
        assert_eq!(u.wait.unwrap().timeout, Duration::from_millis(250));
        assert_eq!(
            u.to_string(),
            "redis+cluster://a:7000,b:7001/?wait=2&wait_timeout=250"
        );
        assert_eq!(
            RedisUrl::parse("redis://h?wait=3")
                .unwrap()
                .wait
                .unwrap()
                .replicas,
            3
        );
        // A `?` in the password is not the options.
        let u = RedisUrl::parse("redis://:p%3Fw?d@h").unwrap();
        assert_eq!(
            u.password.as_deref(),
            Some("p%3Fw?d".replace("%3F", "?").as_str())
        );
    }

    #[test]
    fn refuses_bad_sentinel_cluster_and_wait() {
        for (url, why) in [
            ("redis+sentinel://s1,s2", "names the master"),
            ("redis+sentinel://s1,s2//0", "names the master"),
            ("redis+sentinel://s1,,s2/m", "host is missing"),
            ("redis+sentinel://s1/m/x", "database \"x\""),
            ("redis+cluster://a:7000/3", "database 0 only"),
            ("redis://h?wait=0", "`wait` must be"),
            ("redis://h?wait=-1", "`wait` must be"),
            ("redis://h?wait=two", "`wait` must be"),
            ("redis://h?wait=1001", "`wait` must be"),
            ("redis://h?wait=1&wait_timeout=0", "`wait_timeout` must be"),
            ("redis://h?wait_timeout=5", "without `wait`"),
            ("redis://h?insecure=1", "unknown option \"insecure\""),
            ("redis://h#x", "fragment"),
            ("sentinel://h", "expected redis://"),
        ] {
            let e = RedisUrl::parse(url).unwrap_err().to_string();
            assert!(
                e.starts_with("invalid `url`") && e.contains(why),
                "{url}: {e}"
            );
        }
    }

    #[test]
    fn celery_sentinel_lists() {
        let got = RedisUrl::from_celery_sentinel(
            "sentinel://:pw@h1:26379/3;sentinel://h2:26380;sentinel://h3",
            Some("mymaster"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(got, "redis+sentinel://:pw@h1:26379,h2:26380,h3/mymaster/3");
        assert!(
            RedisUrl::from_celery_sentinel("redis://h", Some("m"))
                .unwrap()
                .is_none()
        );
        let e = RedisUrl::from_celery_sentinel("sentinel://h1", None).unwrap_err();
        assert!(e.to_string().contains("invalid `master_name`"), "{e}");
        let e = RedisUrl::from_celery_sentinel("sentinel://h1;redis://h2", Some("m")).unwrap_err();
        assert!(e.to_string().contains("starts with sentinel://"), "{e}");
    }

    #[test]
    fn refuses_hosts_that_are_not_hosts() {
        for (url, why) in [
            ("redis://a:b:6379", "brackets"),
            ("redis://[nter2@::1]:700", "brackets"),
            ("redis://c^che.ex<", "cannot have"),
            ("redis://h st", "cannot have"),
            ("redis://[...I%l]:", "not an IPv6"),
            ("redis://[host]:1", "not an IPv6"),
        ] {
            let e = RedisUrl::parse(url).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn refuses_without_echoing_secrets() {
        for bad in [
            "http://u:hunter2@h",
            "redis://u:hunter2@h:99999",
            "redis://u:hunter2@h/x",
            "redis://u:hunter2@",
            "redis://u:hun%zzter2@h",
            "redis://u:hunter2@h?insecure=1",
        ] {
            let e = RedisUrl::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid `url`"), "{e}");
            assert!(!e.contains("hunter2") && !e.contains("hun"), "{e}");
        }
    }
}
