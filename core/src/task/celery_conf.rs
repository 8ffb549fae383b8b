//! What a Celery app's settings and options come to in headway: the rules
//! `headway.celery` (Celery's API over a headway app) and a served real
//! Celery app (`headway worker -A proj:celery_app`) read alike.
//!
//! Why here: which broker URLs a Celery app may name, how `task_routes`
//! picks a queue, what a `rate_limit` means, which `apply_async`
//! options are taken, passed over or refused, and what `autoretry_for`'s
//! options come to as a retry policy are decisions, and a decision
//! made in a binding could drift from the other place that makes it (the
//! two URL checks did: the shim took `memory://` but not `sentinel://` or
//! RabbitMQ, the served app the other way round, each with its own
//! wording). The binding converts its host's values and asks these.

use serde_json::Value;

use super::specs::BackoffSpec;
use crate::broker::target::redact;

/// Which headway broker a Celery app's `broker_url` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CeleryBroker {
    /// `memory://`: headway's in-process broker (tests).
    Memory,
    /// `redis://`, `rediss://` or `sentinel://`: Celery's Redis layout.
    Redis,
    /// `amqp://`, `amqps://` or `pyamqp://`: RabbitMQ on Celery's topology.
    Amqp,
}

impl CeleryBroker {
    /// Its name as the bindings hand it on: `memory`, `redis` or `amqp`.
    pub fn name(self) -> &'static str {
        match self {
            CeleryBroker::Memory => "memory",
            CeleryBroker::Redis => "redis",
            CeleryBroker::Amqp => "amqp",
        }
    }
}

const REDIS: &[&str] = &["redis://", "rediss://", "sentinel://"];
const AMQP: &[&str] = &["amqp://", "amqps://", "pyamqp://"];

fn starts(url: &str, schemes: &[&str]) -> bool {
    let lower = url.to_ascii_lowercase();
    schemes.iter().any(|s| lower.starts_with(s))
}

/// The broker a Celery app's `broker_url` names, and whether its
/// `result_backend` (None or empty: the broker's own store) is one headway
/// keeps a Celery app's results in beside it: Redis (`redis://`,
/// `rediss://`, `sentinel://`; beside RabbitMQ `redis://`, `rediss://` or
/// `rpc://`). On `memory://` results stay in memory and the backend is not
/// read. The error names the setting, the URL redacted.
pub fn broker(url: &str, backend: Option<&str>) -> Result<CeleryBroker, String> {
    let kind = if starts(url, &["memory://"]) {
        CeleryBroker::Memory
    } else if starts(url, REDIS) {
        CeleryBroker::Redis
    } else if starts(url, AMQP) {
        CeleryBroker::Amqp
    } else {
        return Err(format!(
            "broker_url '{}': headway runs a Celery app on Redis (redis://, rediss:// or \
             sentinel://), RabbitMQ (amqp://) or memory://",
            redact(url)
        ));
    };
    let backend = backend.filter(|b| !b.is_empty() && *b != url);
    match (kind, backend) {
        (CeleryBroker::Redis, Some(b)) if !starts(b, REDIS) => Err(format!(
            "result_backend '{}': beside Redis headway keeps a Celery app's results on Redis \
             (redis://, rediss:// or sentinel://)",
            redact(b)
        )),
        (CeleryBroker::Amqp, Some(b)) if !starts(b, &["redis://", "rediss://", "rpc://"]) => {
            Err(format!(
                "result_backend '{}': beside RabbitMQ headway keeps a Celery app's results on \
                 Redis (redis:// or rediss://) or rpc://",
                redact(b)
            ))
        }
        _ => Ok(kind),
    }
}

/// Whether `name` matches the glob `pattern` as Python's
/// `fnmatch.fnmatchcase` reads it (Celery's `task_routes` keys): `*` any
/// run, `?` one character, `[abc]` / `[a-z]` / `[!abc]` a set; case counts.
pub fn glob(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Backtracking over the last `*` only: linear enough for route keys.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            Some('?') => Some(pi + 1),
            Some('[') => match set(&p, pi, n[ni]) {
                Some((true, next)) => Some(next),
                Some((false, _)) => None,
                // An unclosed `[` is a plain character, as fnmatch's.
                None => (n[ni] == '[').then_some(pi + 1),
            },
            Some(c) => (*c == n[ni]).then_some(pi + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                pi = next;
                ni += 1;
            }
            (None, Some((sp, sn))) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            (None, None) => return false,
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The set starting at `p[at]` (a `[`): whether `c` is in it and where the
/// pattern goes on; None when the set is not closed.
fn set(p: &[char], at: usize, c: char) -> Option<(bool, usize)> {
    let mut i = at + 1;
    let negated = matches!(p.get(i), Some('!'));
    if negated {
        i += 1;
    }
    let start = i;
    let mut hit = false;
    // A `]` first in the set is one of its characters.
    while i < p.len() && (p[i] != ']' || i == start) {
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            hit |= p[i] <= c && c <= p[i + 2];
            i += 3;
        } else {
            hit |= p[i] == c;
            i += 1;
        }
    }
    (i < p.len()).then_some((hit != negated, i + 1))
}

/// The queue Celery sends task `name` to: the task's own `queue` option,
/// else the first `task_routes` glob it matches (in the order written; a
/// route is `{"queue": q}` or the queue's name), else `default_queue`.
/// `routes` is null or a mapping; anything else is refused.
pub fn route(
    name: &str,
    own: Option<&str>,
    routes: &Value,
    default_queue: &str,
) -> Result<String, String> {
    if let Some(q) = own.filter(|q| !q.is_empty()) {
        return Ok(q.to_string());
    }
    let map = match routes {
        Value::Null => return Ok(default_queue.to_string()),
        Value::Object(m) => m,
        _ => {
            return Err(
                "task_routes: headway.celery reads a mapping of glob → {'queue': ...}".into(),
            );
        }
    };
    for (pattern, r) in map {
        if !glob(pattern, name) {
            continue;
        }
        let q = match r {
            Value::Object(o) => o.get("queue").unwrap_or(&Value::Null),
            other => other,
        };
        match q {
            Value::Null | Value::Bool(false) => {}
            Value::String(s) if s.is_empty() => {}
            Value::String(s) => return Ok(s.clone()),
            other => return Ok(other.to_string()),
        }
    }
    Ok(default_queue.to_string())
}

/// Celery's `rate_limit` (`"10/m"`, or a number per second, also as text)
/// as headway's rate text; None for none (null or empty).
pub fn rate_limit(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Number(n) => Some(format!("{n}/s")),
        Value::String(s) if is_decimal(s) => Some(format!("{s}/s")),
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// Digits with at most one `.` (Python's `s.replace(".", "", 1).isdigit()`).
fn is_decimal(s: &str) -> bool {
    let digits = s.replacen('.', "", 1);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

/// What one of Celery's `apply_async` options becomes in a headway send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOption {
    /// Headway's option of the same name (when not None).
    Same,
    /// `routing_key`: the queue, unless `queue` is given too.
    Queue,
    /// `expires`: a number is seconds from now (headway reads an instant),
    /// anything else is as headway reads it.
    Expires,
    /// `link`, `link_error`, `headers`: set on the signature sent.
    Signature,
    /// A wire option the Celery layout sets itself (JSON, the default
    /// exchange, the client's publish retries): passed over.
    Wire,
}

/// How a Celery `apply_async` option `key` is read; one headway does not
/// have is refused naming it.
pub fn send_option(key: &str) -> Result<SendOption, String> {
    Ok(match key {
        "countdown" | "eta" | "queue" | "priority" | "task_id" => SendOption::Same,
        "expires" => SendOption::Expires,
        "routing_key" => SendOption::Queue,
        "link" | "link_error" | "headers" => SendOption::Signature,
        "serializer" | "exchange" | "retry" | "retry_policy" | "ignore_result" => SendOption::Wire,
        _ => {
            return Err(format!(
                "apply_async option '{key}' is not supported by headway.celery"
            ));
        }
    })
}

/// The `@app.task` options `headway.celery` takes (Celery's names).
pub const TASK_OPTIONS: &[&str] = &[
    "name",
    "bind",
    "base",
    "queue",
    "acks_late",
    "ignore_result",
    "time_limit",
    "soft_time_limit",
    "rate_limit",
    "reject_on_worker_lost",
    "autoretry_for",
    "dont_autoretry_for",
    "retry_backoff",
    "retry_backoff_max",
    "retry_jitter",
    "retry_kwargs",
    "max_retries",
    "default_retry_delay",
    "serializer",
    "track_started",
    "typing",
    "shared",
    "trail",
    "store_errors_even_if_ignored",
];

/// Refuses the `@app.task` options among `given` that `headway.celery`
/// does not have, naming them sorted.
pub fn task_options<S: AsRef<str>>(given: &[S]) -> Result<(), String> {
    let mut unknown: Vec<&str> = given
        .iter()
        .map(AsRef::as_ref)
        .filter(|k| !TASK_OPTIONS.contains(k))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort_unstable();
    unknown.dedup();
    let listed: Vec<String> = unknown.iter().map(|k| format!("'{k}'")).collect();
    Err(format!(
        "task options headway.celery does not have: [{}]",
        listed.join(", ")
    ))
}

/// Celery's defaults for the settings headway reads, Celery 5's documented
/// values: what a `headway.celery` app's `conf` holds before its own
/// settings (the default queue is `celery`, results live a day, a worker
/// prefetches four per slot).
pub fn defaults() -> serde_json::Map<String, Value> {
    let v = serde_json::json!({
        "broker_url": null,
        "result_backend": null,
        "task_default_queue": "celery",
        "task_routes": null,
        "task_acks_late": false,
        "task_reject_on_worker_lost": null,
        "task_ignore_result": false,
        "task_time_limit": null,
        "task_soft_time_limit": null,
        "task_default_rate_limit": null,
        "task_default_retry_delay": 180,
        "task_max_retries": 3,
        "worker_prefetch_multiplier": 4,
        "result_expires": 86400,
        "result_backend_transport_options": null,
        "broker_transport_options": null,
        "task_send_sent_event": false,
        "task_queue_max_priority": null,
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("an object literal"),
    }
}

/// Celery's `max_retries=None`: retried for ever (headway's budget is a
/// count, and this one is never reached).
pub const FOREVER: u32 = u32::MAX;

/// Celery's `retry_backoff_max` when not given: 600 s (in ms).
pub const RETRY_BACKOFF_MAX: i64 = 600_000;

/// What a `headway.celery` task's `autoretry_for` comes to in headway's
/// policy (a served Celery app needs none: Celery's own wrapper calls
/// `self.retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoRetry {
    /// The budget: `retry_kwargs`' `max_retries`, else the task's; Celery's
    /// None is [`FOREVER`].
    pub retries: u32,
    /// With `retry_backoff` (True: a factor of 1 s, a number: that many
    /// seconds), doubling to `retry_backoff_max` ([`RETRY_BACKOFF_MAX`]),
    /// jittered unless `retry_jitter` is false; else a fixed wait of
    /// `retry_kwargs`' `countdown`, else the task's `default_retry_delay`.
    pub backoff: BackoffSpec,
}

/// Python's truth of a value as Celery tests an option (`if backoff:`).
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A task's `autoretry_for` as headway's retry policy, read as Celery reads
/// its options. `options`: the task's `@app.task` options read here
/// (`retry_kwargs`, `retry_backoff`, `retry_backoff_max`, `retry_jitter`)
/// with its `max_retries` and `default_retry_delay` (seconds), an option or
/// its class's. Refused, naming task `task`: a `retry_kwargs` key
/// headway.celery does not have, a number that is not one. The backoff's
/// ranges are [`BackoffSpec::build`]'s.
pub fn autoretry(task: &str, options: &Value) -> Result<AutoRetry, String> {
    let task_own = |k: &str| options.get(k).unwrap_or(&Value::Null);
    let secs = |name: &str, v: &Value| match v.as_f64() {
        Some(s) if s.is_finite() => Ok((s * 1000.0).round() as i64),
        _ => Err(format!(
            "task {task}: `{name}` must be a number of seconds, not {v}"
        )),
    };
    let mut kwargs = match options.get("retry_kwargs") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(format!(
                "task {task}: `retry_kwargs` must be a dict, not {other}"
            ));
        }
    };
    let retries = match kwargs
        .remove("max_retries")
        .as_ref()
        .unwrap_or(task_own("max_retries"))
    {
        Value::Null => FOREVER,
        // Celery's int(): a float is truncated.
        v => match v.as_f64() {
            Some(n) if n.is_finite() && n >= 0.0 => n.trunc().min(FOREVER as f64) as u32,
            _ => {
                return Err(format!(
                    "task {task}: `max_retries` must be a whole number, 0 or more, or None (for ever), not {v}"
                ));
            }
        },
    };
    let backoff = match options.get("retry_backoff") {
        Some(b) if truthy(b) => BackoffSpec::Exponential {
            base: Some(match b {
                Value::Bool(true) => 1000,
                factor => secs("retry_backoff", factor)?,
            }),
            cap: Some(match options.get("retry_backoff_max") {
                None | Some(Value::Null) => RETRY_BACKOFF_MAX,
                Some(cap) => secs("retry_backoff_max", cap)?,
            }),
            jitter: Some(options.get("retry_jitter").is_none_or(truthy)),
        },
        _ => BackoffSpec::Fixed {
            delay: match kwargs.remove("countdown") {
                Some(countdown) => secs("countdown", &countdown)?,
                None => secs("default_retry_delay", task_own("default_retry_delay"))?,
            },
        },
    };
    if !kwargs.is_empty() {
        let mut listed: Vec<String> = kwargs.keys().map(|k| format!("'{k}'")).collect();
        listed.sort_unstable();
        return Err(format!(
            "task {task}: retry_kwargs headway.celery does not have: [{}]",
            listed.join(", ")
        ));
    }
    Ok(AutoRetry { retries, backoff })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn celerys_defaults_for_what_headway_reads() {
        let d = defaults();
        assert_eq!(d["task_default_queue"], json!("celery"));
        assert_eq!(d["task_default_retry_delay"], json!(180));
        assert_eq!(d["result_expires"], json!(86400));
        assert_eq!(d["broker_url"], Value::Null);
        assert_eq!(d.len(), 18);
    }

    #[test]
    fn one_rule_for_every_celery_broker_url() {
        assert_eq!(broker("memory://", None), Ok(CeleryBroker::Memory));
        for url in ["redis://h/0", "rediss://h/0", "sentinel://h:26379"] {
            assert_eq!(broker(url, None), Ok(CeleryBroker::Redis), "{url}");
        }
        for url in ["amqp://h//", "amqps://h//", "pyamqp://h//", "AMQP://h//"] {
            assert_eq!(broker(url, Some("")), Ok(CeleryBroker::Amqp), "{url}");
        }
        let e = broker("sqs://u:secret@h", None).unwrap_err();
        assert!(e.starts_with("broker_url 'sqs://u:***@h': "), "{e}");
        assert!(e.contains("sentinel://") && e.contains("amqp://") && e.contains("memory://"));
        // Results beside each broker.
        assert!(broker("redis://a", Some("sentinel://b")).is_ok());
        assert!(broker("redis://a", Some("redis://a")).is_ok());
        assert!(broker("amqp://a", Some("rpc://")).is_ok());
        assert!(
            broker("memory://", Some("db+sqlite://")).is_ok(),
            "not read"
        );
        let e = broker("redis://a", Some("rpc://")).unwrap_err();
        assert!(
            e.starts_with("result_backend 'rpc://': beside Redis"),
            "{e}"
        );
        let e = broker("amqp://a", Some("db://u:pw@h")).unwrap_err();
        assert!(
            e.starts_with("result_backend 'db://u:***@h': beside RabbitMQ"),
            "{e}"
        );
        assert!(broker("amqp://a", Some("sentinel://b")).is_err());
    }

    #[test]
    fn globs_read_as_fnmatchcase() {
        assert!(glob("proj.routed.*", "proj.routed.ping"));
        assert!(!glob("proj.routed.*", "proj.add"));
        assert!(glob("*", ""));
        assert!(glob("a?c", "abc") && !glob("a?c", "ac"));
        assert!(glob("a*b*c", "axxbyyc") && !glob("a*b*c", "axxbyy"));
        assert!(glob("[ab]x", "bx") && !glob("[ab]x", "cx"));
        assert!(glob("[!ab]x", "cx") && !glob("[!ab]x", "ax"));
        assert!(glob("[a-c]", "b") && !glob("[a-c]", "d"));
        assert!(glob("[]]", "]"));
        assert!(glob("[a", "[a"), "an unclosed set is plain");
        assert!(!glob("Proj.*", "proj.x"), "case counts");
        assert!(glob("mix.hw_*", "mix.hw_add"));
    }

    #[test]
    fn routes_own_queue_then_globs_in_order_then_default() {
        let routes = json!({"p.a*": {"queue": "first"}, "p.*": "second", "x.*": {"queue": null}});
        assert_eq!(route("p.ab", None, &routes, "celery").unwrap(), "first");
        assert_eq!(route("p.b", None, &routes, "celery").unwrap(), "second");
        assert_eq!(route("x.y", None, &routes, "celery").unwrap(), "celery");
        assert_eq!(
            route("p.ab", Some("own"), &routes, "celery").unwrap(),
            "own"
        );
        assert_eq!(route("p.ab", Some(""), &Value::Null, "d").unwrap(), "d");
        let e = route("p", None, &json!(["r"]), "d").unwrap_err();
        assert!(
            e.starts_with("task_routes: headway.celery reads a mapping"),
            "{e}"
        );
    }

    #[test]
    fn rate_limits_as_celery_writes_them() {
        assert_eq!(rate_limit(&Value::Null), None);
        assert_eq!(rate_limit(&json!("")), None);
        assert_eq!(rate_limit(&json!(10)).as_deref(), Some("10/s"));
        assert_eq!(rate_limit(&json!(2.5)).as_deref(), Some("2.5/s"));
        assert_eq!(rate_limit(&json!("7")).as_deref(), Some("7/s"));
        assert_eq!(rate_limit(&json!("0.5")).as_deref(), Some("0.5/s"));
        assert_eq!(rate_limit(&json!("10/m")).as_deref(), Some("10/m"));
        assert_eq!(rate_limit(&json!("1.2.3")).as_deref(), Some("1.2.3"));
    }

    #[test]
    fn send_and_task_options() {
        assert_eq!(send_option("eta"), Ok(SendOption::Same));
        assert_eq!(send_option("routing_key"), Ok(SendOption::Queue));
        assert_eq!(send_option("expires"), Ok(SendOption::Expires));
        assert_eq!(send_option("link"), Ok(SendOption::Signature));
        assert_eq!(send_option("serializer"), Ok(SendOption::Wire));
        assert_eq!(
            send_option("shadow").unwrap_err(),
            "apply_async option 'shadow' is not supported by headway.celery"
        );
        assert!(task_options(&["bind", "name", "max_retries"]).is_ok());
        assert_eq!(
            task_options(&["zz", "bind", "aa"]).unwrap_err(),
            "task options headway.celery does not have: ['aa', 'zz']"
        );
    }

    #[test]
    fn autoretry_as_celery_reads_its_options() {
        let auto = |mut o: Value, max: Value| {
            o["max_retries"] = max;
            o["default_retry_delay"] = json!(180);
            autoretry("t", &o)
        };
        // No backoff: a fixed wait, retry_kwargs' countdown over the task's delay.
        let fixed = |ms| BackoffSpec::Fixed { delay: ms };
        assert_eq!(
            auto(json!({}), json!(3)).unwrap(),
            AutoRetry {
                retries: 3,
                backoff: fixed(180_000)
            }
        );
        let rk = json!({"retry_kwargs": {"max_retries": 5, "countdown": 0.5}});
        assert_eq!(
            auto(rk, json!(3)).unwrap(),
            AutoRetry {
                retries: 5,
                backoff: fixed(500)
            }
        );
        // None is for ever, in the task's budget or retry_kwargs'.
        assert_eq!(auto(json!({}), Value::Null).unwrap().retries, FOREVER);
        let rk = json!({"retry_kwargs": {"max_retries": null}});
        assert_eq!(auto(rk, json!(3)).unwrap().retries, FOREVER);
        // retry_backoff: True is a factor of 1 s; the cap 600 s, jittered.
        let exp = |base, cap, jitter| BackoffSpec::Exponential {
            base: Some(base),
            cap: Some(cap),
            jitter: Some(jitter),
        };
        let got = auto(json!({"retry_backoff": true}), json!(3)).unwrap();
        assert_eq!(got.backoff, exp(1000, RETRY_BACKOFF_MAX, true));
        let o = json!({"retry_backoff": 0.05, "retry_backoff_max": 0.2, "retry_jitter": false});
        assert_eq!(auto(o, json!(3)).unwrap().backoff, exp(50, 200, false));
        // A false or zero retry_backoff is none.
        assert_eq!(
            auto(json!({"retry_backoff": 0}), json!(3)).unwrap().backoff,
            fixed(180_000)
        );
        assert_eq!(
            auto(
                json!({"retry_kwargs": {"zz": 1, "aa": 2, "max_retries": 1}}),
                json!(3)
            )
            .unwrap_err(),
            "task t: retry_kwargs headway.celery does not have: ['aa', 'zz']"
        );
        assert!(
            auto(json!({"retry_backoff": "x"}), json!(3))
                .unwrap_err()
                .contains("`retry_backoff`")
        );
    }
}
