//! The Redis a shared limit lives in: one reconnecting [`Link`] per URL in
//! the process, shared by every limit on it, and the one way a limit's
//! script is run.
//!
//! Why one link per URL: a process with a hundred limits on one Redis needs
//! one multiplexed connection, not a hundred. The link is the brokers'
//! ([`crate::broker::link`]): it reconnects with a jittered backoff, logs
//! each outage once, and waits through a short one ([`PATIENCE`]) rather
//! than failing a take at the first dropped packet.
//!
//! A retried call may have run once already (the reply, not the script, was
//! lost). For a limit that errs on the safe side: a token taken twice is a
//! request refused that might have passed, never one let through.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use redis::{FromRedisValue, RedisError, Script, Value};

use crate::broker::RedisUrl;
use crate::broker::link::{Link, LinkSetup};
use crate::task::state::Refused;

/// How long a call waits for an unreachable Redis before it refuses: a
/// limit is asked on a request's path, where a caller would rather hear
/// "Redis is down" in two seconds than hang for the broker's ten.
pub const PATIENCE: Duration = Duration::from_secs(2);
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Every key a limit writes starts with this, then its kind (`bucket`,
/// `window`, `gate`) and the caller's key: a bucket and a window given the
/// same key do not collide, and `SCAN headway:limit:*` finds them all.
pub const PREFIX: &str = "headway:limit:";

/// Links by URL text (the password included: two users are two links).
static LINKS: LazyLock<Mutex<HashMap<String, Weak<Link>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// What holds the link a limit's script runs on: its own link by URL, or
/// a Redis broker's (a task's limits ride the broker's connection).
pub(crate) trait Linked: Send + Sync + 'static {
    fn link(&self) -> &Link;
}

impl Linked for Link {
    fn link(&self) -> &Link {
        self
    }
}

/// Where one limit lives: a link and the full key.
#[derive(Clone)]
pub(crate) struct Store {
    link: Arc<dyn Linked>,
    /// Shared with every [`Req`] made on it (a call's key costs no copy).
    key: Arc<str>,
}

impl Store {
    /// The store of `kind`'s `key` on `url`. No I/O: the link dials on
    /// the first call. Refused: a bad URL, an empty key.
    pub(crate) fn new(url: &str, kind: &str, key: &str) -> Result<Store, Refused> {
        if key.is_empty() {
            return Err(Refused::Invalid("invalid `key`: must not be empty".into()));
        }
        Ok(Store {
            link: shared_link(url)?,
            key: format!("{PREFIX}{kind}:{key}").into(),
        })
    }

    /// The store of `kind`'s `key` on a link already made.
    pub(crate) fn on(link: Arc<dyn Linked>, kind: &str, key: &str) -> Store {
        Store {
            link,
            key: format!("{PREFIX}{kind}:{key}").into(),
        }
    }

    /// The full Redis key.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// `script` (whose text is `source`) on this store's key with `args`,
    /// as a [`Req`] for a connection a binding drives ([`super::wire`]).
    pub(crate) fn req(&self, source: &'static str, script: &'static Script, args: &[&str]) -> Req {
        Req {
            source,
            hash: script.get_hash(),
            key: self.key.clone(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// A script's reply that is not what the script answers, or a Redis
    /// error, as the link words it (the URL named, its secrets scrubbed).
    pub(crate) fn refused(&self, e: &RedisError) -> Refused {
        self.link.link().refused(e)
    }

    /// A script's reply as `T`, or the link's refusal of it.
    pub(crate) fn typed<T: FromRedisValue>(&self, v: Value) -> Result<T, Refused> {
        redis::from_redis_value(v).map_err(|e| self.refused(&RedisError::from(e)))
    }

    /// Runs `script` on this store's key with `args` (a `&[&str]`, or a
    /// [`Req`]'s own), through a short outage. A script Redis does not
    /// have yet is loaded (`NOSCRIPT`).
    pub(crate) async fn run<T: FromRedisValue, A: AsRef<str>>(
        &self,
        script: &Script,
        args: &[A],
    ) -> Result<T, Refused> {
        self.link
            .link()
            .patiently(true, |mut c| {
                let mut inv = script.prepare_invoke();
                inv.key(&*self.key);
                for a in args {
                    inv.arg(a.as_ref());
                }
                async move { inv.invoke_async(&mut c).await }
            })
            .await
    }
}

/// A shared limit's URL, parsed: the brokers' rules, less `?wait=`.
pub(crate) fn parse(url: &str) -> Result<RedisUrl, Refused> {
    let parsed = RedisUrl::parse(url)?;
    if parsed.wait.is_some() {
        return Err(Refused::Invalid(format!(
            "invalid `url`: {parsed}: `?wait=` is for a broker's sends, not a shared limit"
        )));
    }
    Ok(parsed)
}

/// One script call, packed by [`super::wire::Wire`]: `EVALSHA` of `hash`,
/// or `EVAL` of `source` once Redis said it has no such script.
pub struct Req {
    pub(crate) source: &'static str,
    pub(crate) hash: &'static str,
    pub(crate) key: Arc<str>,
    pub(crate) args: Vec<String>,
}

fn shared_link(url: &str) -> Result<Arc<Link>, Refused> {
    let mut links = LINKS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(l) = links.get(url).and_then(Weak::upgrade) {
        return Ok(l);
    }
    // The brokers' dialling, with a shorter wait for a reply.
    let setup = LinkSetup::dialling(
        parse(url)?,
        None,
        format!("limit-{}", std::process::id()),
        PATIENCE,
        "headway limit".into(),
    )?;
    let made = Arc::new(Link::new(LinkSetup {
        response_timeout: RESPONSE_TIMEOUT,
        ..setup
    }));
    links.retain(|_, w| w.strong_count() > 0);
    links.insert(url.to_string(), Arc::downgrade(&made));
    Ok(made)
}
