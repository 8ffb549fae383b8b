//! Redis connection URLs, parsed by hand so a secret can never leak through
//! a parser's error message, and shown redacted everywhere.
//!
//! `redis://[user[:password]@]host[:port][/db]` and `rediss://…` (TLS,
//! certificate and host name verified). Username and password are
//! percent-decoded, as RFC 3986 userinfo is (a password with `@` or `:` in it
//! is written `%40`, `%3A`). The ACL username is kept, not dropped: Celery
//! once dropped it silently. Display and Debug print
//! `redis://user:***@host:port/db`.

use std::fmt;

use crate::task::state::Refused;

/// Redis's default port (redis.io, "Redis configuration").
pub const DEFAULT_PORT: u16 = 6379;

/// A parsed Redis URL. Its Display and Debug never show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    /// `rediss://`: TLS with verification.
    pub tls: bool,
    /// The host name or address (IPv6 without brackets).
    pub host: String,
    /// The port (6379 when absent).
    pub port: u16,
    /// The ACL username, percent-decoded.
    pub username: Option<String>,
    /// The password, percent-decoded.
    pub password: Option<String>,
    /// The database number (0 when absent).
    pub db: i64,
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

impl RedisUrl {
    /// Parses `redis://` or `rediss://` URLs. Refused with a message naming
    /// `url` and what is wrong, never quoting the userinfo.
    pub fn parse(text: &str) -> Result<RedisUrl, Refused> {
        let (tls, rest) = if let Some(r) = text.strip_prefix("redis://") {
            (false, r)
        } else if let Some(r) = text.strip_prefix("rediss://") {
            (true, r)
        } else {
            let scheme = text.split_once("://").map_or("", |(s, _)| s);
            // Only the scheme is quoted; the rest may hold a password.
            return Err(bad(format!(
                "expected redis:// or rediss://, got {:?}",
                if scheme.len() <= 16 { scheme } else { "?" }
            )));
        };
        if rest.contains('?') || rest.contains('#') {
            return Err(bad(
                "query and fragment options are not supported (TLS is always verified)",
            ));
        }
        let (auth, hostpart) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (hostport, path) = match hostpart.find('/') {
            Some(i) => (&hostpart[..i], &hostpart[i + 1..]),
            None => (hostpart, ""),
        };
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
            None | Some("") => DEFAULT_PORT,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad(format!("the port {p:?} is not 1 to 65535")))?,
        };
        let db = match path.trim_end_matches('/') {
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
            host,
            port,
            username,
            password,
            db,
        })
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
        f.write_str(if self.tls { "rediss://" } else { "redis://" })?;
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
        if self.host.contains(':') {
            write!(f, "[{}]:{}/{}", self.host, self.port, self.db)
        } else {
            write!(f, "{}:{}/{}", self.host, self.port, self.db)
        }
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
