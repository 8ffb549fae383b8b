//! Remote control on headway's own layouts: `headway inspect ...` and
//! `headway control ...` (both CLIs), asking every process where a worker
//! of the app runs and gathering their answers.
//!
//! What a node answers is `task::remote`'s, as on Celery's layout; this
//! file is the asking side and the wire: a command goes out as one JSON
//! request through the broker ([`crate::task::Broker::control`]: on the own
//! Redis layout a PUBLISH on `P:control` that every process under the
//! prefix hears, each pushing its answer onto the request's reply list; on
//! the memory broker, which only this process reaches, its apps answer at
//! once). Celery's layout has Celery's own channel (kombu's pidbox, which
//! `celery inspect` speaks and headway workers answer), so there an ask is
//! refused naming it. The CLIs only parse argv and print: the command
//! words, their arguments, the timeout, the gathering and the printed text
//! are decided here, once for Python and Node.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::App;
use super::remote::{self, Command, Node};
use super::spec::OnControl;
use super::state::Refused;

/// How long an ask waits for answers when not told: 1 s, Celery's
/// `inspect` default.
pub const TIMEOUT: Duration = Duration::from_secs(1);

/// The longest an ask may wait: 5 minutes.
pub const TIMEOUT_MAX: Duration = Duration::from_secs(300);

/// The `inspect` words, each the Celery command it asks.
pub const INSPECT: &[(&str, &str)] = &[
    ("ping", "ping"),
    ("active", "active"),
    ("reserved", "reserved"),
    ("scheduled", "scheduled"),
    ("stats", "stats"),
    ("registered", "registered"),
    ("active-queues", "active_queues"),
];

/// The `control` words, the Celery command each sends, and its arguments
/// in order (`?`: optional).
pub const CONTROL: &[(&str, &str, &[&str])] = &[
    ("shutdown", "shutdown", &[]),
    ("rate-limit", "rate_limit", &["task_name", "rate_limit"]),
    ("time-limit", "time_limit", &["task_name", "soft", "hard?"]),
    ("pool-grow", "pool_grow", &["n?"]),
    ("pool-shrink", "pool_shrink", &["n?"]),
    ("add-consumer", "add_consumer", &["queue"]),
    ("cancel-consumer", "cancel_consumer", &["queue"]),
    ("heartbeat", "heartbeat", &[]),
];

fn usage(kind: &str) -> String {
    match kind {
        "inspect" => format!(
            "expected one of: {}",
            INSPECT
                .iter()
                .map(|(w, _)| *w)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => format!(
            "expected one of: {}",
            CONTROL
                .iter()
                .map(|(w, _, args)| {
                    let mut s = w.to_string();
                    for a in *args {
                        match a.strip_suffix('?') {
                            Some(a) => s.push_str(&format!(" [{}]", a.to_uppercase())),
                            None => s.push_str(&format!(" {}", a.to_uppercase())),
                        }
                    }
                    s
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A command as a CLI gives it: `kind` `inspect` or `control`, `what` its
/// word (Celery's `rate_limit` is taken for `rate-limit` too), `words` its
/// arguments. Answers the method and its arguments, checked as a node
/// would check them.
pub fn from_cli(kind: &str, what: &str, words: &[String]) -> Result<(String, Value), Refused> {
    let what = what.replace('_', "-");
    let bad = |why: String| Refused::Invalid(format!("{kind} {what}: {why}"));
    let (method, names): (&str, &[&str]) = match kind {
        "inspect" => match INSPECT.iter().find(|(w, _)| *w == what) {
            Some((_, m)) => (m, &[]),
            None => return Err(bad(format!("unknown; {}", usage(kind)))),
        },
        "control" => match CONTROL.iter().find(|(w, _, _)| *w == what) {
            Some((_, m, a)) => (m, a),
            None => return Err(bad(format!("unknown; {}", usage(kind)))),
        },
        _ => {
            return Err(Refused::Invalid(format!(
                "unknown command kind {kind:?}: expected inspect or control"
            )));
        }
    };
    let needed = names.iter().filter(|n| !n.ends_with('?')).count();
    if words.len() < needed || words.len() > names.len() {
        return Err(bad(format!(
            "takes {}; got {} argument(s)",
            if names.is_empty() {
                "no arguments".to_string()
            } else {
                names
                    .iter()
                    .map(|n| n.trim_end_matches('?').to_uppercase())
                    .collect::<Vec<_>>()
                    .join(" ")
            },
            words.len()
        )));
    }
    let mut args = serde_json::Map::new();
    for (n, w) in names.iter().zip(words) {
        args.insert(n.trim_end_matches('?').to_string(), json!(w));
    }
    let args = Value::Object(args);
    // Checked here as a node checks it, so a bad argument is refused before
    // anything is sent.
    Command::parse(method, &args).map_err(|e| bad(e.to_string()))?;
    Ok((method.to_string(), args))
}

/// A timeout from seconds as a CLI gives them (`None`: [`TIMEOUT`]).
pub fn timeout(secs: Option<f64>) -> Result<Duration, Refused> {
    match secs {
        None => Ok(TIMEOUT),
        Some(s) if s.is_finite() && s > 0.0 && s <= TIMEOUT_MAX.as_secs_f64() => {
            Ok(Duration::from_secs_f64(s))
        }
        Some(s) => Err(Refused::Invalid(format!(
            "invalid `timeout`: {s} seconds; must be above 0 and at most {}",
            TIMEOUT_MAX.as_secs()
        ))),
    }
}

/// This process's node name on the own layouts: `headway.<pid>@<host>`.
pub fn node_name() -> String {
    format!(
        "headway.{}@{}",
        std::process::id(),
        crate::broker::celery::codec::hostname()
    )
}

/// The request a command travels as.
pub fn request(method: &str, arguments: &Value, destination: Option<&[String]>) -> Value {
    json!({
        "method": method,
        "arguments": arguments,
        "destination": destination,
    })
}

/// What this process answers `request` with for `app`: its node name and
/// answer, or `None` when it is no node (no worker of the app runs here)
/// or the request names other nodes. A destination names a node or one of
/// its workers.
pub fn answer(app: &App, request: &Value) -> Option<(String, Value)> {
    let node = Node::here(app)?;
    let name = node_name();
    if let Some(d) = request.get("destination").and_then(Value::as_array) {
        let ours = d
            .iter()
            .filter_map(Value::as_str)
            .any(|n| n == name || node.workers().iter().any(|w| w.name() == n));
        if !ours {
            return None;
        }
    }
    let method = request.get("method").and_then(Value::as_str).unwrap_or("");
    let args = remote::arguments(request.get("arguments"));
    let reply = match Command::parse(method, &args) {
        Ok(c) => remote::reply_json(node.run(&c)),
        Err(e) => remote::refused(&e),
    };
    Some((name, reply))
}

/// Asks every node of `app` (or those `destination` names) `method` and
/// gathers their answers for up to `timeout`: `(node, answer)`, sorted by
/// node. Returns early once every process on the broker answered.
pub async fn ask(
    app: &App,
    method: &str,
    arguments: &Value,
    destination: Option<&[String]>,
    timeout: Duration,
) -> Result<Vec<(String, Value)>, Refused> {
    let req = request(method, arguments, destination);
    let Some(fut) = app.broker().control(req, timeout) else {
        return Err(Refused::Invalid(
            "this broker has no headway control channel; on Celery's layout use Celery's own `celery inspect` / `celery control`, which headway workers answer".into(),
        ));
    };
    let got = fut.await?;
    let mut out: Vec<(String, Value)> = got
        .into_iter()
        .filter_map(|v| {
            let node = v.get("node")?.as_str()?.to_string();
            Some((node, v.get("reply").cloned().unwrap_or(Value::Null)))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The apps on one broker that answer remote commands: what a broker
/// keeps for [`crate::task::Broker::on_control`].
#[derive(Default)]
pub struct Answerers {
    all: Mutex<Vec<OnControl>>,
}

impl Answerers {
    /// Adds `a`.
    pub fn add(&self, a: OnControl) {
        self.all.lock().unwrap_or_else(|e| e.into_inner()).push(a);
    }

    /// Each live app's answer to `request` (`{"node": null}` when none is a
    /// node it is for); apps that are gone are forgotten.
    pub fn answer(&self, request: &Value) -> Vec<Value> {
        let all: Vec<OnControl> = self.all.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut out = Vec::new();
        let mut gone = Vec::new();
        for a in &all {
            match a(request) {
                None => gone.push(a.clone()),
                Some(Some((node, reply))) => out.push(json!({"node": node, "reply": reply})),
                Some(None) => {}
            }
        }
        if !gone.is_empty() {
            self.all
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|h| !gone.iter().any(|g| Arc::ptr_eq(g, h)));
        }
        if out.is_empty() {
            out.push(json!({ "node": null }));
        }
        out
    }
}

/// What a CLI prints and exits with (as JSON `{out, err, code}` for a
/// binding that takes it so).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Printed {
    /// For stdout.
    pub out: String,
    /// For stderr.
    pub err: String,
    /// The exit status: 0, or 1 when no node answered or one refused.
    pub code: i32,
}

/// The answers as a CLI prints them: with `json`, one line
/// `{node: answer, ...}` (Celery's `--json`); else a line per node, then
/// its answer indented. No answer is Celery's "No nodes replied within
/// time constraint" on stderr, status 1; a refusal exits 1 too.
pub fn print(replies: &[(String, Value)], as_json: bool) -> Printed {
    if replies.is_empty() {
        return Printed {
            out: String::new(),
            err: "Error: No nodes replied within time constraint\n".into(),
            code: 1,
        };
    }
    let refused = replies.iter().any(|(_, v)| v.get("error").is_some());
    let out = if as_json {
        let mut m = serde_json::Map::new();
        for (n, v) in replies {
            m.insert(n.clone(), v.clone());
        }
        format!("{}\n", Value::Object(m))
    } else {
        let mut s = String::new();
        for (n, v) in replies {
            s.push_str(&format!("-> {n}: {}\n", summary(v)));
            if let Some(body) = detail(v) {
                for line in body.lines() {
                    s.push_str(&format!("    {line}\n"));
                }
            }
        }
        s.push_str(&format!(
            "\n{} node{} online.\n",
            replies.len(),
            if replies.len() == 1 { "" } else { "s" }
        ));
        s
    };
    Printed {
        out,
        err: String::new(),
        code: i32::from(refused),
    }
}

/// The head line of one answer: OK and its words, or the error.
fn summary(v: &Value) -> String {
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        return format!("ERROR {e}");
    }
    match v {
        Value::Object(m) if m.get("ok").is_some() => match &m["ok"] {
            Value::String(s) => format!("OK {s}"),
            other => format!("OK {other}"),
        },
        Value::Array(a) if a.is_empty() => "OK (empty)".into(),
        Value::Array(a) => format!("OK {} item{}", a.len(), if a.len() == 1 { "" } else { "s" }),
        _ => "OK".into(),
    }
}

/// The body under the head line, pretty JSON; none for a bare `ok`.
fn detail(v: &Value) -> Option<String> {
    match v {
        Value::Object(m) if m.contains_key("ok") || m.contains_key("error") => None,
        Value::Array(a) if a.is_empty() => None,
        Value::Null => None,
        v => serde_json::to_string_pretty(v).ok(),
    }
}

/// `headway inspect|control <what> <words...>`, run: the command read,
/// asked, and what to print. A bad command is refused before anything is
/// sent.
pub async fn cli(
    app: &App,
    kind: &str,
    what: &str,
    words: &[String],
    timeout_secs: Option<f64>,
    destination: Option<&[String]>,
    as_json: bool,
) -> Result<Printed, Refused> {
    let (method, args) = from_cli(kind, what, words)?;
    let t = timeout(timeout_secs)?;
    let replies = ask(app, &method, &args, destination, t).await?;
    Ok(print(&replies, as_json))
}

/// A `headway inspect|control` command as both CLIs hand it over: the
/// JSON the core's own parser wrote for it (`cli::parse_json`), whose
/// `command`, `what`, `words`, `timeout` (s), `destination` and `json` it
/// reads (the other fields are the CLI's). The fields are named here once;
/// a binding passes the text.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct CliAsk {
    pub command: String,
    pub what: String,
    #[serde(default)]
    pub words: Vec<String>,
    #[serde(default)]
    pub timeout: Option<f64>,
    #[serde(default)]
    pub destination: Option<Vec<String>>,
    #[serde(default)]
    pub json: bool,
}

impl CliAsk {
    /// The command in `text`; refused naming what was wrong.
    pub fn parse(text: &str) -> Result<CliAsk, Refused> {
        serde_json::from_str(text)
            .map_err(|e| Refused::Invalid(format!("invalid remote command: {e}")))
    }

    /// Asks it: [`cli`] with this command's words.
    pub async fn run(&self, app: &App) -> Result<Printed, Refused> {
        let to = self.destination.as_deref();
        let (c, w) = (&self.command, &self.what);
        cli(app, c, w, &self.words, self.timeout, to, self.json).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_cli_ask_is_the_parsers_command_and_a_bad_one_is_named() {
        let argv = words(&[
            "control", "-A", "m:app", "revoke", "x", "-d", "n@h", "--json",
        ]);
        let parsed = crate::task::cli::parse_json("python", &argv).unwrap();
        let a = CliAsk::parse(&parsed).unwrap();
        assert_eq!((a.command.as_str(), a.what.as_str()), ("control", "revoke"));
        assert_eq!(a.words, ["x"]);
        assert_eq!(a.destination.as_deref(), Some(&["n@h".to_string()][..]));
        assert!(a.json && a.timeout.is_none());
        let t = CliAsk::parse(r#"{"command":"inspect","what":"ping","timeout":2.5}"#).unwrap();
        assert_eq!(t.timeout, Some(2.5));
        assert!(t.words.is_empty() && t.destination.is_none() && !t.json);
        for bad in [
            r#"{"what":"ping"}"#,
            r#"{"command":"inspect","what":1}"#,
            "[]",
            "{",
        ] {
            match CliAsk::parse(bad) {
                Err(Refused::Invalid(m)) => assert!(m.starts_with("invalid remote command"), "{m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn cli_words_become_celerys_commands() {
        assert_eq!(
            from_cli("control", "rate-limit", &words(&["t", "10/m"])).unwrap(),
            (
                "rate_limit".into(),
                json!({"task_name": "t", "rate_limit": "10/m"})
            )
        );
        assert_eq!(
            from_cli("control", "pool_grow", &[]).unwrap(),
            ("pool_grow".into(), json!({}))
        );
        assert_eq!(
            from_cli("inspect", "active-queues", &[]).unwrap().0,
            "active_queues"
        );
        let e = from_cli("inspect", "nope", &[]).unwrap_err().to_string();
        assert!(
            e.contains("inspect nope: unknown; expected one of: ping"),
            "{e}"
        );
        let e = from_cli("control", "rate-limit", &words(&["t"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("takes TASK_NAME RATE_LIMIT; got 1"), "{e}");
        let e = from_cli("control", "rate-limit", &words(&["t", "fast"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Invalid rate limit string"), "{e}");
        let e = from_cli("control", "pool-shrink", &words(&["-1"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`n` must be a whole number"), "{e}");
        assert!(from_cli("bogus", "ping", &[]).is_err());
        assert!(timeout(Some(0.0)).is_err() && timeout(Some(f64::NAN)).is_err());
        assert_eq!(timeout(None).unwrap(), TIMEOUT);
    }

    #[test]
    fn printed_as_celery_prints() {
        let none = print(&[], false);
        assert_eq!(none.code, 1);
        assert!(none.err.contains("No nodes replied"));
        let r = vec![("n1".to_string(), json!({"ok": "pong"}))];
        let p = print(&r, false);
        assert_eq!(p.out, "-> n1: OK pong\n\n1 node online.\n");
        assert_eq!(p.code, 0);
        assert_eq!(print(&r, true).out, "{\"n1\":{\"ok\":\"pong\"}}\n");
        let bad = vec![("n1".to_string(), json!({"error": "unknown task \"x\""}))];
        let p = print(&bad, false);
        assert_eq!(p.code, 1);
        assert!(p.out.contains("ERROR unknown task"));
        let list = vec![("n1".to_string(), json!([{"id": "a"}]))];
        assert!(print(&list, false).out.contains("OK 1 item\n    [\n"));
    }
}
