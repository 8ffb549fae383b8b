//! The lines the `headway` command line prints: one text for Python's CLI
//! and Node's.
//!
//! Each binding used to write its own copy of the worker's banner, the
//! beat's entries, the admin's address and the stop lines, and the copies
//! had drifted: the beat's next run was Python's `datetime.isoformat()`
//! (`2026-12-06T21:00:00+00:00`) in one and JS `Date.toISOString()`
//! (`2026-12-06T21:00:00.000Z`) in the other. A printed line is a rule like
//! a flag's unit ([`super::cli`]), so it is here: a binding gathers the
//! plain values (names, counts, host and port, the beat's due times as
//! epoch milliseconds), asks for the line (as JSON, [`text_json`]) and
//! prints what it gets.
//!
//! Times are RFC 3339 in UTC with milliseconds and a `Z` ([`at`]). A host
//! in a URL with a `:` in it (IPv6) is bracketed ([`url_host`]).

use std::borrow::Cow;

use chrono::{DateTime, SecondsFormat};
use serde::Deserialize;

/// `when` (epoch milliseconds) as the lines print a time: RFC 3339 in UTC
/// with milliseconds and a `Z`, `2026-12-06T21:00:00.000Z` (what JS
/// `toISOString()` prints). `None` outside the years chrono holds.
pub fn at(when: i64) -> Option<String> {
    DateTime::from_timestamp_millis(when).map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// `host` as a URL's authority needs it: an IPv6 address (any host with a
/// `:`) in brackets, `[::1]`; one already bracketed, or a name or IPv4
/// address, as it is.
pub fn url_host(host: &str) -> Cow<'_, str> {
    if host.contains(':') && !host.starts_with('[') {
        Cow::Owned(format!("[{host}]"))
    } else {
        Cow::Borrowed(host)
    }
}

/// The worker's start, three lines: what it runs, its tasks, `ready`.
pub fn worker_ready(
    name: &str,
    app: &str,
    queues: &[String],
    concurrency: u64,
    prefetch: u64,
    pool: &str,
    tasks: &[String],
) -> String {
    let tasks = if tasks.is_empty() {
        "(none)".to_string()
    } else {
        tasks.join(", ")
    };
    format!(
        "headway worker {name}: app {app}, queues {}, concurrency {concurrency}, \
         prefetch {prefetch}, pool {pool}\ntasks: {tasks}\nready",
        queues.join(",")
    )
}

/// The worker's last line.
pub fn worker_stopped(name: &str, settled: u64) -> String {
    format!("headway worker {name}: stopped after settling {settled}")
}

/// Where `--metrics-port` serves (the port bound, when 0 was asked).
pub fn metrics(host: &str, port: u16) -> String {
    format!("metrics: http://{}:{port}/metrics", url_host(host))
}

/// The beat's start: the app and its entry count, each entry's name and
/// next run (`(name, epoch milliseconds)`, soonest first), `ready`. An
/// error names an entry whose time is out of range.
pub fn beat_ready(app: &str, entries: &[(String, i64)]) -> Result<String, String> {
    let mut out = format!("headway beat: app {app}, {} entries\n", entries.len());
    for (name, when) in entries {
        let when = at(*when).ok_or_else(|| {
            format!("the beat's entry {name:?}: {when} ms from the epoch is out of range")
        })?;
        out.push_str(&format!("  {name}: next at {when}\n"));
    }
    out.push_str("ready");
    Ok(out)
}

/// The beat's last line.
pub fn beat_stopped() -> String {
    "headway beat: stopped".to_string()
}

/// The admin's start: its address, and when the token was generated
/// (`generated`), the token and how to choose one. `port` is not checked
/// here: Python's `serve()` prints before uvicorn binds it.
pub fn admin_ready(host: &str, port: u64, read_only: bool, generated: Option<&str>) -> String {
    let mode = if read_only { " (read-only)" } else { "" };
    let mut out = format!(
        "headway admin{mode}: http://{}:{port}/ (log in with the token)",
        url_host(host)
    );
    if let Some(token) = generated {
        out.push_str(&format!(
            "\nheadway admin: generated token {token}\n\
             headway admin: the token was generated; pass --token to choose one"
        ));
    }
    out
}

/// The admin's last line.
pub fn admin_stopped() -> String {
    "headway admin: stopped".to_string()
}

/// What an admin made without a token prints (to stderr) when it is not
/// served by the CLI, which prints [`admin_ready`] instead.
pub fn admin_token(token: &str) -> String {
    format!("headway admin: generated token {token} (type it into the page's login form)")
}

// The fields of each line as a binding sends them. Unknown fields are
// refused, so a binding's misspelt field is an error, not a blank.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerReady {
    name: String,
    app: String,
    queues: Vec<String>,
    concurrency: u64,
    prefetch: u64,
    pool: String,
    tasks: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerStopped {
    name: String,
    settled: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostPort {
    host: String,
    port: u16,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BeatReady {
    app: String,
    entries: Vec<(String, i64)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdminReady {
    host: String,
    port: u64,
    read_only: bool,
    generated: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdminToken {
    token: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Nothing {}

fn fields<'a, T: Deserialize<'a>>(line: &str, json: &'a str) -> Result<T, String> {
    serde_json::from_str(json).map_err(|e| format!("the {line} line's fields: {e}"))
}

/// The line named `line` from its fields as a JSON object, for a binding:
/// `worker_ready` (`name`, `app`, `queues`, `concurrency`, `prefetch`,
/// `pool`, `tasks`), `worker_stopped` (`name`, `settled`), `metrics`
/// (`host`, `port`), `beat_ready` (`app`, `entries`: `[name, epoch ms]`
/// pairs), `beat_stopped`, `admin_ready` (`host`, `port`, `read_only`,
/// `generated`: the token when it was generated, else null),
/// `admin_stopped`, `admin_token` (`token`); `{}` for none. Several lines
/// are joined by `\n`, with none after the last. An error names the line
/// and what was wrong with its fields.
pub fn text_json(line: &str, json: &str) -> Result<String, String> {
    match line {
        "worker_ready" => {
            let f: WorkerReady = fields(line, json)?;
            Ok(worker_ready(
                &f.name,
                &f.app,
                &f.queues,
                f.concurrency,
                f.prefetch,
                &f.pool,
                &f.tasks,
            ))
        }
        "worker_stopped" => {
            let f: WorkerStopped = fields(line, json)?;
            Ok(worker_stopped(&f.name, f.settled))
        }
        "metrics" => {
            let f: HostPort = fields(line, json)?;
            Ok(metrics(&f.host, f.port))
        }
        "beat_ready" => {
            let f: BeatReady = fields(line, json)?;
            beat_ready(&f.app, &f.entries)
        }
        "beat_stopped" => fields::<Nothing>(line, json).map(|_| beat_stopped()),
        "admin_ready" => {
            let f: AdminReady = fields(line, json)?;
            Ok(admin_ready(
                &f.host,
                f.port,
                f.read_only,
                f.generated.as_deref(),
            ))
        }
        "admin_stopped" => fields::<Nothing>(line, json).map(|_| admin_stopped()),
        "admin_token" => {
            let f: AdminToken = fields(line, json)?;
            Ok(admin_token(&f.token))
        }
        _ => Err(format!("no line named {line:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_time_is_rfc3339_utc_with_milliseconds_and_z() {
        // 2026-12-06T21:00:00Z, as toISOString() prints it.
        assert_eq!(at(1_796_590_800_000).unwrap(), "2026-12-06T21:00:00.000Z");
        assert_eq!(at(1_796_590_800_123).unwrap(), "2026-12-06T21:00:00.123Z");
        assert_eq!(at(0).unwrap(), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(i64::MAX), None);
    }

    #[test]
    fn an_ipv6_host_is_bracketed_once() {
        assert_eq!(url_host("::1"), "[::1]");
        assert_eq!(url_host("[::1]"), "[::1]");
        assert_eq!(url_host("127.0.0.1"), "127.0.0.1");
        assert_eq!(url_host("localhost"), "localhost");
    }

    #[test]
    fn the_worker_banner() {
        let text = worker_ready(
            "w1@host",
            "proj:app",
            &strings(&["default", "extra"]),
            4,
            16,
            "threads",
            &strings(&["tiny.add", "tiny.hello"]),
        );
        assert_eq!(
            text,
            "headway worker w1@host: app proj:app, queues default,extra, concurrency 4, \
             prefetch 16, pool threads\n\
             tasks: tiny.add, tiny.hello\n\
             ready"
        );
        let none = worker_ready("w", "a", &strings(&["q"]), 1, 1, "process", &[]);
        assert_eq!(none.lines().nth(1), Some("tasks: (none)"));
    }

    #[test]
    fn the_worker_stop() {
        assert_eq!(
            worker_stopped("w1@host", 2),
            "headway worker w1@host: stopped after settling 2"
        );
    }

    #[test]
    fn the_metrics_address() {
        assert_eq!(
            metrics("127.0.0.1", 9100),
            "metrics: http://127.0.0.1:9100/metrics"
        );
        assert_eq!(metrics("::1", 9100), "metrics: http://[::1]:9100/metrics");
    }

    #[test]
    fn the_beat_banner_and_stop() {
        let entries = vec![
            ("tick".to_string(), 1_796_590_800_000),
            ("tock".to_string(), 1_796_590_801_500),
        ];
        assert_eq!(
            beat_ready("beatapp:app", &entries).unwrap(),
            "headway beat: app beatapp:app, 2 entries\n\
             \x20 tick: next at 2026-12-06T21:00:00.000Z\n\
             \x20 tock: next at 2026-12-06T21:00:01.500Z\n\
             ready"
        );
        assert_eq!(
            beat_ready("a", &[]).unwrap(),
            "headway beat: app a, 0 entries\nready"
        );
        let err = beat_ready("a", &[("far".to_string(), i64::MAX)]).unwrap_err();
        assert!(
            err.contains("\"far\"") && err.contains("out of range"),
            "{err}"
        );
        assert_eq!(beat_stopped(), "headway beat: stopped");
    }

    #[test]
    fn the_admin_address_with_a_given_token() {
        assert_eq!(
            admin_ready("127.0.0.1", 5555, false, None),
            "headway admin: http://127.0.0.1:5555/ (log in with the token)"
        );
        assert_eq!(
            admin_ready("::1", 5555, true, None),
            "headway admin (read-only): http://[::1]:5555/ (log in with the token)"
        );
    }

    #[test]
    fn the_admin_address_with_a_generated_token() {
        assert_eq!(
            admin_ready("0.0.0.0", 80, false, Some("tok")),
            "headway admin: http://0.0.0.0:80/ (log in with the token)\n\
             headway admin: generated token tok\n\
             headway admin: the token was generated; pass --token to choose one"
        );
        assert_eq!(admin_stopped(), "headway admin: stopped");
        assert_eq!(
            admin_token("tok"),
            "headway admin: generated token tok (type it into the page's login form)"
        );
    }

    #[test]
    fn a_binding_asks_by_name_with_json_fields() {
        assert_eq!(
            text_json("beat_ready", r#"{"app": "x", "entries": [["t", 0]]}"#).unwrap(),
            "headway beat: app x, 1 entries\n  t: next at 1970-01-01T00:00:00.000Z\nready"
        );
        assert_eq!(
            text_json(
                "admin_ready",
                r#"{"host": "::1", "port": 1, "read_only": false, "generated": null}"#
            )
            .unwrap(),
            admin_ready("::1", 1, false, None)
        );
        assert_eq!(
            text_json(
                "worker_ready",
                r#"{"name": "w", "app": "a", "queues": ["q"], "concurrency": 1,
                    "prefetch": 2, "pool": "threads", "tasks": []}"#
            )
            .unwrap(),
            worker_ready("w", "a", &strings(&["q"]), 1, 2, "threads", &[])
        );
        assert_eq!(
            text_json("worker_stopped", r#"{"name": "w", "settled": 3}"#).unwrap(),
            worker_stopped("w", 3)
        );
        assert_eq!(
            text_json("metrics", r#"{"host": "h", "port": 9}"#).unwrap(),
            metrics("h", 9)
        );
        assert_eq!(text_json("beat_stopped", "{}").unwrap(), beat_stopped());
        assert_eq!(text_json("admin_stopped", "{}").unwrap(), admin_stopped());
        assert_eq!(
            text_json("admin_token", r#"{"token": "t"}"#).unwrap(),
            admin_token("t")
        );
    }

    #[test]
    fn a_bad_name_or_field_is_named() {
        assert_eq!(
            text_json("banner", "{}").unwrap_err(),
            "no line named \"banner\""
        );
        let err = text_json("worker_stopped", r#"{"name": "w", "setled": 3}"#).unwrap_err();
        assert!(
            err.starts_with("the worker_stopped line's fields: ") && err.contains("setled"),
            "{err}"
        );
        let err = text_json("beat_stopped", r#"{"app": "x"}"#).unwrap_err();
        assert!(err.contains("app"), "{err}");
        let err = text_json("metrics", r#"{"host": "h", "port": 70000}"#).unwrap_err();
        assert!(err.starts_with("the metrics line's fields: "), "{err}");
    }
}
