//! An app from a broker URL: the one place a URL's scheme picks a broker.
//!
//! `memory://` is the in-process broker; `redis://` and `rediss://` are
//! headway's own Redis layout with default options. Celery's layout is never
//! chosen from a bare URL — the same `redis://` URL could mean either — so it
//! is asked for by name (`RedisBroker.celery(url)` in the bindings). Both
//! bindings call this, so `App(broker="redis://…")` means the same in each.

use std::sync::Arc;

use super::app::App;
use super::clock::{Clock, SystemClock};
use super::state::Refused;
use crate::broker::redis::{RedisBroker, RedisOptions};

/// An app on the broker `url` names, reading `clock` (the system clock when
/// `None`).
pub async fn open(url: &str, clock: Option<Arc<dyn Clock>>) -> Result<App, Refused> {
    let clock = clock.unwrap_or_else(|| Arc::new(SystemClock));
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("memory") => Ok(App::memory(Some(clock))),
        Some("redis") | Some("rediss") => {
            let b = RedisBroker::connect(url, RedisOptions::default(), clock.clone()).await?;
            Ok(App::new(b.seams(), clock))
        }
        _ => Err(Refused::Invalid(format!(
            "invalid `broker`: {:?} is not a broker URL (memory://, redis://host:port/db or rediss://)",
            redact(url)
        ))),
    }
}

/// The URL with any password replaced by `***`, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let auth = &url[s + 3..at];
            match auth.split_once(':') {
                Some((user, _)) => format!("{}{}:***{}", &url[..s + 3], user, &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn schemes() {
        assert!(open("memory://", None).await.is_ok());
        match open("amqp://u:secret@h/", None).await {
            Err(Refused::Invalid(m)) => {
                assert!(m.contains("broker") && !m.contains("secret"), "{m}");
            }
            _ => panic!("amqp is not a broker here"),
        }
        assert!(open("nonsense", None).await.is_err());
    }
}
