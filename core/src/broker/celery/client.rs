//! The Celery layout's Redis client, built from the parsed [`RedisUrl`] as
//! headway's own layout builds its own — never from the URL text — so one
//! URL means the same on both layouts: percent-decoded user and password,
//! an ACL username kept, the db number, `rediss://` verified, `tls_ca` as a
//! private root. A client opened from the text would parse it a second
//! time by other rules, and the text (a percent-encoded password in it)
//! could reach an error message.

use super::super::redis::RedisUrl;
use crate::task::state::Refused;

/// A client for `url`, verifying a `rediss://` server against `tls_ca`
/// (PEM roots) when given. Refused, naming what is wrong and never the
/// password: `tls_ca` on a `redis://` URL, or a setting redis-rs refuses.
pub(super) fn client(url: &RedisUrl, tls_ca: Option<&[u8]>) -> Result<redis::Client, Refused> {
    let addr = if url.tls {
        let _ = rustls::crypto::ring::default_provider().install_default();
        redis::ConnectionAddr::TcpTls {
            host: url.host.clone(),
            port: url.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        redis::ConnectionAddr::Tcp(url.host.clone(), url.port)
    };
    let mut settings = redis::RedisConnectionInfo::default().set_db(url.db);
    if let Some(u) = &url.username {
        settings = settings.set_username(u);
    }
    if let Some(p) = &url.password {
        settings = settings.set_password(p);
    }
    let bad = |e: redis::RedisError| {
        Refused::Invalid(format!(
            "invalid `url` {url}: {}",
            scrub(url, &e.to_string())
        ))
    };
    let info = redis::IntoConnectionInfo::into_connection_info(addr)
        .map_err(bad)?
        .set_redis_settings(settings);
    match (tls_ca, url.tls) {
        (Some(pem), true) => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            },
        )
        .map_err(bad),
        (Some(_), false) => Err(Refused::Invalid(
            "invalid `tls_ca`: given for a redis:// URL; use rediss://".into(),
        )),
        (None, _) => redis::Client::open(info).map_err(bad),
    }
}

/// `text` with the password taken out, in every form it could be written
/// in (as it is, and percent-encoded), however short: a one-character
/// password is replaced only where it sits in a URL's userinfo (`:p@`), so
/// an error's other text stays readable.
pub(super) fn scrub(url: &RedisUrl, text: &str) -> String {
    let Some(p) = url.password.as_deref().filter(|p| !p.is_empty()) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubs_every_form_of_the_password() {
        let u = RedisUrl::parse("redis://app:p%40ss@h:1/0").unwrap();
        let s = scrub(&u, "redis://app:p%40ss@h and p@ss and p%40ss");
        assert!(!s.contains("p%40ss") && !s.contains("p@ss"), "{s}");
        let u = RedisUrl::parse("redis://app:Q@h:1/0").unwrap();
        assert_eq!(
            scrub(&u, "redis://app:Q@h: Query"),
            "redis://app:***@h: Query"
        );
        assert!(client(&u, Some(b"pem")).is_err(), "tls_ca needs rediss://");
    }
}
