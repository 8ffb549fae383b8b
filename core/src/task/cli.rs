//! The `headway` command line's words: one parser for Python's `headway`
//! and Node's `npx headway`.
//!
//! Each binding used to parse its own argv (argparse in Python, a loop in
//! Node), and the two had drifted: `--grace` was seconds in one and
//! milliseconds in the other, `-P` existed in one only, `-c` had a default
//! of its own in one and the app's in the other. What a flag means, its
//! unit, its default, its range and the error naming it are rules, so they
//! are here; a binding hands its argv over, gets a [`Parsed`] back (as JSON,
//! [`parse_json`]), loads the app its own language's way and starts what
//! was asked.
//!
//! The app is named by `-A/--app` or by the first word that is not a flag
//! (Python's `headway worker -A proj:app` and Node's `headway worker
//! ./app.js` each work in either language's form); with `-A` given, every
//! such word of `inspect` / `control` is the command and its arguments
//! (`headway inspect ping -A proj:app`), without it the first is the app
//! (`headway inspect ./app.js ping`). Times are seconds, as Celery's
//! `--time-limit` is; `--name=value` and `-c4` are read as argparse reads
//! them.

use serde::Serialize;

use crate::log::sink;

/// Which binding asks: the commands it has and how its usage names the app.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    /// `python -m headway`: the app is `-A module:app`.
    Python,
    /// `npx headway`: the app is a module file.
    Node,
}

impl Lang {
    /// `"python"` or `"node"`.
    pub fn parse(s: &str) -> Result<Lang, String> {
        match s {
            "python" => Ok(Lang::Python),
            "node" => Ok(Lang::Node),
            _ => Err(format!("the language must be python or node, not {s:?}")),
        }
    }

    /// The commands this language's CLI has (`demo` is the Python guide's).
    pub fn commands(self) -> &'static [&'static str] {
        match self {
            Lang::Python => &["worker", "beat", "admin", "inspect", "control", "demo"],
            Lang::Node => &["worker", "beat", "admin", "inspect", "control"],
        }
    }

    fn app(self) -> &'static str {
        match self {
            Lang::Python => "-A module:app",
            Lang::Node => "<app.js>",
        }
    }
}

/// What the command line asked for.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Parsed {
    /// `-h` / `--help`: print this on stdout and exit 0.
    Help {
        /// The usage text.
        text: String,
    },
    /// Run a command.
    Run(Box<Command>),
}

/// A command and its options, every value checked. `None` leaves a value
/// to the app's default.
#[derive(Debug, Default, PartialEq, Serialize)]
pub struct Command {
    /// `worker`, `beat`, `admin`, `inspect`, `control` or `demo`.
    pub command: String,
    /// The app as given (`module:app`, or a module file for Node).
    pub app: Option<String>,
    /// `-l/--loglevel`, lower-case (`warning` when not given).
    pub loglevel: String,
    /// `--log-format`: `text` (the default) or `json`.
    pub log_format: String,
    /// `-Q/--queues`, split at commas.
    pub queues: Option<Vec<String>>,
    /// `-c/--concurrency`.
    pub concurrency: Option<u64>,
    /// `--prefetch`.
    pub prefetch: Option<u64>,
    /// `--prefetch-multiplier`.
    pub prefetch_multiplier: Option<u64>,
    /// `--grace`, seconds runs get at a stop.
    pub grace: Option<f64>,
    /// `-P/--pool`: `threads`, `process` or `prefork` (checked by the worker).
    pub pool: Option<String>,
    /// `--max-tasks-per-child`.
    pub max_tasks_per_child: Option<u64>,
    /// `--max-memory-per-child`, KiB.
    pub max_memory_per_child: Option<u64>,
    /// `--time-limit`, seconds.
    pub time_limit: Option<f64>,
    /// `--soft-time-limit`, seconds.
    pub soft_time_limit: Option<f64>,
    /// `--metrics-port` (its range is checked where it is served).
    pub metrics_port: Option<u64>,
    /// `--metrics-host` (`127.0.0.1`).
    pub metrics_host: String,
    /// `-E/--task-events`.
    pub task_events: bool,
    /// `inspect` / `control`: what to ask.
    pub what: Option<String>,
    /// Its arguments.
    pub words: Vec<String>,
    /// `--json`.
    pub json: bool,
    /// `-t/--timeout`, seconds.
    pub timeout: Option<f64>,
    /// `-d/--destination`, split at commas.
    pub destination: Option<Vec<String>>,
    /// `admin --host` (`127.0.0.1`).
    pub host: String,
    /// `admin --port` (5555).
    pub port: u64,
    /// `admin --token` (`$HEADWAY_ADMIN_TOKEN` when not given).
    pub token: Option<String>,
    /// `admin --read-only`.
    pub read_only: bool,
    /// `admin --worker N`: a worker of N beside the admin (0: none).
    pub worker: u64,
    /// `worker`: the worker options given (not `-Q`), named and in the
    /// units the language's `app.worker` takes them (Python's `time_limit`
    /// in seconds, Node's `timeLimit` in ms); one not given is left out,
    /// for the app's own defaults.
    pub worker_options: serde_json::Map<String, serde_json::Value>,
}

impl Command {
    /// [`Command::worker_options`] from the flags read.
    fn worker_options(&self, lang: Lang) -> serde_json::Map<String, serde_json::Value> {
        use serde_json::Value;
        let secs = |s: Option<f64>| match lang {
            Lang::Python => s.map(Value::from),
            Lang::Node => s.map(|s| Value::from((s * 1000.0).round() as u64)),
        };
        let count = |n: Option<u64>| n.map(Value::from);
        let given = [
            ("concurrency", "concurrency", count(self.concurrency)),
            ("prefetch", "prefetch", count(self.prefetch)),
            (
                "prefetch_multiplier",
                "prefetchMultiplier",
                count(self.prefetch_multiplier),
            ),
            ("pool", "pool", self.pool.clone().map(Value::from)),
            (
                "max_tasks_per_child",
                "maxTasksPerChild",
                count(self.max_tasks_per_child),
            ),
            (
                "max_memory_per_child",
                "maxMemoryPerChild",
                count(self.max_memory_per_child),
            ),
            ("time_limit", "timeLimit", secs(self.time_limit)),
            (
                "soft_time_limit",
                "softTimeLimit",
                secs(self.soft_time_limit),
            ),
        ];
        given
            .into_iter()
            .filter_map(|(py, node, v)| {
                let name = if lang == Lang::Python { py } else { node };
                Some((name.to_string(), v?))
            })
            .collect()
    }
}

/// `(short, long, takes a value, commands)`: the flags, and which commands
/// take each (`*` every one). How a value is read is [`set`]'s.
const FLAGS: &[(&str, &str, bool, &str)] = &[
    ("-A", "--app", true, "*"),
    ("-l", "--loglevel", true, "*"),
    ("", "--log-format", true, "*"),
    ("-c", "--concurrency", true, "worker"),
    ("-Q", "--queues", true, "worker"),
    ("", "--prefetch", true, "worker"),
    ("", "--prefetch-multiplier", true, "worker"),
    ("", "--grace", true, "worker admin"),
    ("-P", "--pool", true, "worker"),
    ("", "--max-tasks-per-child", true, "worker"),
    ("", "--max-memory-per-child", true, "worker"),
    ("", "--time-limit", true, "worker"),
    ("", "--soft-time-limit", true, "worker"),
    ("", "--metrics-port", true, "worker"),
    ("", "--metrics-host", true, "worker"),
    ("-E", "--task-events", false, "worker"),
    ("", "--json", false, "inspect control"),
    ("-t", "--timeout", true, "inspect control"),
    ("-d", "--destination", true, "inspect control"),
    ("", "--host", true, "admin"),
    ("", "--port", true, "admin"),
    ("", "--token", true, "admin"),
    ("", "--read-only", false, "admin"),
    ("", "--worker", true, "admin"),
];

/// The usage text for `lang`: every command, or the one named.
pub fn usage(lang: Lang, command: Option<&str>) -> String {
    let app = lang.app();
    let lines: Vec<(&str, String)> = vec![
        (
            "worker",
            format!(
                "headway worker {app} [-c N] [-Q a,b] [--prefetch N] [--prefetch-multiplier M]\n\
                 \x20                     [--grace S] [-P threads|process] [--max-tasks-per-child K]\n\
                 \x20                     [--max-memory-per-child KIB] [--time-limit S] [--soft-time-limit S]\n\
                 \x20                     [--metrics-port P [--metrics-host 127.0.0.1]] [-E/--task-events]"
            ),
        ),
        ("beat", format!("headway beat {app}")),
        (
            "admin",
            format!(
                "headway admin {app} [--host 127.0.0.1] [--port 5555] [--token T] [--read-only]\n\
                 \x20                     [--worker N] [--grace S]"
            ),
        ),
        (
            "inspect",
            format!(
                "headway inspect {app} WHAT [--json] [-t/--timeout S] [-d NODE,...]\n\
                 \x20                     WHAT: ping, active, reserved, scheduled, stats, registered, active-queues"
            ),
        ),
        (
            "control",
            format!(
                "headway control {app} WHAT [ARGS] [--json] [-t/--timeout S] [-d NODE,...]\n\
                 \x20                     WHAT: shutdown, rate-limit TASK RATE, time-limit TASK SOFT [HARD],\n\
                 \x20                     pool-grow [N], pool-shrink [N], add-consumer Q, cancel-consumer Q, heartbeat"
            ),
        ),
        (
            "demo",
            "headway demo                a worker, a retry, a chain, a chord and a beat, on the\n\
             \x20                     memory broker and a virtual clock"
                .to_string(),
        ),
    ];
    let mut out = String::from("usage: ");
    let mut first = true;
    for (name, line) in &lines {
        if !lang.commands().contains(name) || command.is_some_and(|c| c != *name) {
            continue;
        }
        if !first {
            out.push_str("\n       ");
        }
        out.push_str(line);
        first = false;
    }
    out.push_str(
        "\n       any: [-l/--loglevel debug|info|warning|error|critical] [--log-format text|json]\n\
         Times are seconds. Every command but demo needs the app.",
    );
    out
}

/// Reads `argv` (the words after the program's name) for `lang`. An
/// error's text names what was wrong and ends with the usage.
pub fn parse(lang: Lang, argv: &[String]) -> Result<Parsed, String> {
    let help = |c: Option<&str>| {
        Ok(Parsed::Help {
            text: usage(lang, c),
        })
    };
    let Some(first) = argv.first() else {
        return Err(format!("a command is needed\n{}", usage(lang, None)));
    };
    if first == "-h" || first == "--help" {
        return help(None);
    }
    let Some(&command) = lang.commands().iter().find(|c| **c == first.as_str()) else {
        return Err(format!(
            "unknown command {:?}\n{}",
            crate::log::shown(first),
            usage(lang, None)
        ));
    };
    let fail = |m: String| Err(format!("{command}: {m}\n{}", usage(lang, Some(command))));
    let mut c = Command {
        command: command.to_string(),
        loglevel: "warning".into(),
        log_format: "text".into(),
        metrics_host: "127.0.0.1".into(),
        host: "127.0.0.1".into(),
        port: 5555,
        token: std::env::var("HEADWAY_ADMIN_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
        ..Command::default()
    };
    let mut plain: Vec<String> = Vec::new();
    let mut rest = argv[1..].iter();
    let mut only_words = false;
    while let Some(word) = rest.next() {
        if only_words || !word.starts_with('-') || word == "-" {
            plain.push(word.clone());
            continue;
        }
        if word == "--" {
            only_words = true;
            continue;
        }
        if word == "-h" || word == "--help" {
            return help(Some(command));
        }
        // `--name=value`, `-c4`.
        let (name, attached) = match word.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ if !word.starts_with("--") && word.len() > 2 && word.is_char_boundary(2) => {
                (&word[..2], Some(word[2..].into()))
            }
            _ => (word.as_str(), None),
        };
        let Some(&(short, long, takes_value, _)) = FLAGS.iter().find(|f| {
            (f.0 == name || f.1 == name) && (f.3 == "*" || f.3.split(' ').any(|t| t == command))
        }) else {
            return fail(format!("unknown option {:?}", crate::log::shown(word)));
        };
        let flag = if name == short { short } else { long };
        let text = if takes_value {
            match attached.or_else(|| rest.next().cloned()) {
                Some(v) => v,
                None => return fail(format!("{flag} needs a value")),
            }
        } else if attached.is_some() {
            return fail(format!("{flag} takes no value"));
        } else {
            String::new()
        };
        if let Err(m) = set(&mut c, long, flag, text) {
            return fail(m);
        }
    }
    let mut plain = plain.into_iter();
    if c.app.is_none() && command != "demo" {
        c.app = plain.next();
        if c.app.is_none() {
            return fail(format!("the app is missing ({})", lang.app()));
        }
    }
    if command == "inspect" || command == "control" {
        c.what = plain.next();
        if c.what.is_none() {
            return fail(format!("what to {command} is missing"));
        }
        c.words = plain.collect();
    } else if let Some(extra) = plain.next() {
        return fail(format!(
            "unexpected argument {:?}",
            crate::log::shown(&extra)
        ));
    }
    if command == "worker" {
        c.worker_options = c.worker_options(lang);
    }
    Ok(Parsed::Run(Box::new(c)))
}

/// Sets what `long` (given as `flag`) names in `c` from `text`, or says why
/// `text` will not do.
fn set(c: &mut Command, long: &str, flag: &str, text: String) -> Result<(), String> {
    match long {
        "--app" => c.app = Some(text),
        "--loglevel" => {
            sink::parse_level(&text)?;
            c.loglevel = text.trim().to_ascii_lowercase();
        }
        "--log-format" => {
            sink::parse_format(&text)?;
            c.log_format = text.trim().to_ascii_lowercase();
        }
        "--concurrency" => c.concurrency = Some(whole(flag, &text)?),
        "--queues" => {
            let names = list(&text);
            if names.is_empty() {
                return Err(format!("{flag} names no queue"));
            }
            c.queues = Some(names);
        }
        "--prefetch" => c.prefetch = Some(whole(flag, &text)?),
        "--prefetch-multiplier" => c.prefetch_multiplier = Some(whole(flag, &text)?),
        "--grace" => c.grace = Some(seconds(flag, &text)?),
        "--pool" => c.pool = Some(text),
        "--max-tasks-per-child" => c.max_tasks_per_child = Some(whole(flag, &text)?),
        "--max-memory-per-child" => c.max_memory_per_child = Some(whole(flag, &text)?),
        "--time-limit" => c.time_limit = Some(seconds(flag, &text)?),
        "--soft-time-limit" => c.soft_time_limit = Some(seconds(flag, &text)?),
        "--metrics-port" => c.metrics_port = Some(whole(flag, &text)?),
        "--metrics-host" => c.metrics_host = text,
        "--task-events" => c.task_events = true,
        "--json" => c.json = true,
        "--timeout" => c.timeout = Some(seconds(flag, &text)?),
        "--destination" => c.destination = Some(list(&text)).filter(|d| !d.is_empty()),
        "--host" => c.host = text,
        "--port" => c.port = whole(flag, &text)?,
        "--token" => c.token = Some(text).filter(|t| !t.is_empty()),
        "--read-only" => c.read_only = true,
        "--worker" => c.worker = whole(flag, &text)?,
        _ => unreachable!("every flag in FLAGS is set here"),
    }
    Ok(())
}

fn whole(flag: &str, text: &str) -> Result<u64, String> {
    text.trim().parse::<u64>().map_err(|_| {
        format!(
            "{flag} must be a whole number, not {:?}",
            crate::log::shown(text)
        )
    })
}

fn seconds(flag: &str, text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Ok(s),
        _ => Err(format!(
            "{flag} must be a number of seconds, not {:?}",
            crate::log::shown(text)
        )),
    }
}

/// Names split at commas, trimmed, empty ones dropped.
fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// [`parse`] for a binding: `lang` by name, the answer as JSON
/// (`{"kind": "help", "text": ...}` or `{"kind": "run", "command": ...}`);
/// an error is its text.
pub fn parse_json(lang: &str, argv: &[String]) -> Result<String, String> {
    let p = parse(Lang::parse(lang)?, argv)?;
    serde_json::to_string(&p).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn run(lang: Lang, s: &str) -> Command {
        match parse(lang, &words(s)) {
            Ok(Parsed::Run(c)) => *c,
            other => panic!("{s}: {other:?}"),
        }
    }

    fn error(lang: Lang, s: &str) -> String {
        match parse(lang, &words(s)) {
            Err(e) => e,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn a_worker_in_either_form() {
        let py = run(
            Lang::Python,
            "worker -A proj:app -c 2 -Q a,,b --grace 2.5 -P process --time-limit=3 -E",
        );
        assert_eq!(py.app.as_deref(), Some("proj:app"));
        assert_eq!(py.concurrency, Some(2));
        assert_eq!(py.queues, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(py.grace, Some(2.5));
        assert_eq!(py.pool.as_deref(), Some("process"));
        assert_eq!(py.time_limit, Some(3.0));
        assert!(py.task_events);
        assert_eq!(py.prefetch, None, "left to the app");
        let node = run(Lang::Node, "worker ./app.js -c4 --pool process");
        assert_eq!(node.app.as_deref(), Some("./app.js"));
        assert_eq!(node.concurrency, Some(4));
        assert_eq!(node.loglevel, "warning");
        assert_eq!(node.log_format, "text");
        assert_eq!(node.metrics_host, "127.0.0.1");
    }

    #[test]
    fn worker_options_in_each_language() {
        let py = run(
            Lang::Python,
            "worker -A p:app -c 2 --time-limit 1.5 -P process -Q a",
        );
        let want = serde_json::json!({"concurrency": 2, "pool": "process", "time_limit": 1.5});
        assert_eq!(serde_json::Value::Object(py.worker_options), want);
        let node = run(
            Lang::Node,
            "worker a.js --soft-time-limit 0.25 --prefetch-multiplier 3",
        );
        let want = serde_json::json!({"prefetchMultiplier": 3, "softTimeLimit": 250});
        assert_eq!(serde_json::Value::Object(node.worker_options), want);
        assert!(run(Lang::Python, "beat -A p:app").worker_options.is_empty());
    }

    #[test]
    fn inspect_words_follow_the_app_either_way() {
        let a = run(Lang::Python, "inspect ping -A proj:app --json -d w1,w2");
        assert_eq!(
            (a.app.as_deref(), a.what.as_deref()),
            (Some("proj:app"), Some("ping"))
        );
        assert!(a.json);
        assert_eq!(a.destination, Some(vec!["w1".into(), "w2".into()]));
        let b = run(Lang::Node, "control ./app.js rate-limit t 10/s -t 2");
        assert_eq!(b.app.as_deref(), Some("./app.js"));
        assert_eq!(b.what.as_deref(), Some("rate-limit"));
        assert_eq!(b.words, vec!["t".to_string(), "10/s".into()]);
        assert_eq!(b.timeout, Some(2.0));
    }

    #[test]
    fn bad_input_is_named() {
        assert!(
            error(Lang::Python, "worker -A a -c many")
                .contains(r#"-c must be a whole number, not "many""#)
        );
        assert!(error(Lang::Python, "worker -A a -c -1").contains("whole number"));
        assert!(
            error(Lang::Node, "worker a.js --grace soon")
                .contains("--grace must be a number of seconds")
        );
        assert!(error(Lang::Node, "worker a.js --time-limit -1").contains("number of seconds"));
        assert!(error(Lang::Node, "worker a.js --loglevel loud").contains(r#""loud""#));
        assert!(error(Lang::Node, "worker a.js --log-format xml").contains(r#""xml""#));
        assert!(error(Lang::Node, "worker a.js --nope").contains(r#"unknown option "--nope""#));
        assert!(error(Lang::Node, "worker a.js -c").contains("-c needs a value"));
        assert!(error(Lang::Node, "worker").contains("the app is missing (<app.js>)"));
        assert!(error(Lang::Python, "worker").contains("the app is missing (-A module:app)"));
        assert!(error(Lang::Python, "inspect -A a").contains("what to inspect is missing"));
        assert!(error(Lang::Python, "beat -A a extra").contains(r#"unexpected argument "extra""#));
        assert!(error(Lang::Python, "worker -A a --json").contains("unknown option"));
        assert!(error(Lang::Python, "worker -A a -E=1").contains("-E takes no value"));
        assert!(error(Lang::Python, "worker -A a --task-events=1").contains("takes no value"));
        assert!(error(Lang::Node, "demo").contains(r#"unknown command "demo""#));
        assert!(error(Lang::Node, "").contains("a command is needed"));
        assert!(error(Lang::Node, "worker a.js -é").contains("unknown option"));
        assert!(error(Lang::Node, "worker a.js -Q ,").contains("-Q names no queue"));
        // Each error ends with the usage of the command it was about.
        let e = error(Lang::Node, "worker a.js --nope");
        assert!(e.contains("usage: headway worker <app.js>"), "{e}");
        assert!(!e.contains("headway beat"), "{e}");
    }

    #[test]
    fn help_is_the_usage() {
        let Ok(Parsed::Help { text }) = parse(Lang::Python, &words("--help")) else {
            panic!("no help");
        };
        for c in Lang::Python.commands() {
            assert!(text.contains(&format!("headway {c}")), "{c}: {text}");
        }
        let Ok(Parsed::Help { text }) = parse(Lang::Node, &words("worker -h")) else {
            panic!("no help");
        };
        assert!(text.contains("headway worker <app.js>") && !text.contains("headway admin"));
    }

    #[test]
    fn admin_defaults() {
        let a = run(
            Lang::Python,
            "admin -A proj:app --port 0 --read-only --worker 2",
        );
        assert_eq!((a.host.as_str(), a.port, a.worker), ("127.0.0.1", 0, 2));
        assert!(a.read_only);
        let d = run(Lang::Python, "demo");
        assert_eq!(d.app, None);
    }

    #[test]
    fn the_json_names_the_kind() {
        let j = parse_json("node", &words("beat a.js")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["kind"], "run");
        assert_eq!(v["command"], "beat");
        assert_eq!(v["app"], "a.js");
        assert!(
            parse_json("ruby", &[])
                .unwrap_err()
                .contains("python or node")
        );
    }
}
