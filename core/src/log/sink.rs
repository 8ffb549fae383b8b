//! Where a binding's records go: the one logger the bindings install.
//!
//! Three ways, chosen by the binding and changeable at any time:
//! - [`to_stderr`]: each record is written to stderr as it is emitted, as a
//!   line or a JSON line (Node's default, and its CLI's);
//! - [`deliver`]: records are handed, in order, to a callback on a thread of
//!   their own (`headway-log`), so the thread that emitted one never waits
//!   on the host (Python's GIL, a JS logger); [`flush`] waits for those
//!   already emitted (at exit);
//! - nothing installed: dropped.
//!
//! The level filter is the facade's own (`log::set_max_level`), set with
//! [`set_level`] from a name parsed by [`parse_level`]; the default is
//! [`DEFAULT_LEVEL`].

use std::sync::mpsc::{self, Sender, SyncSender};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::log::kv::{Key, Source};
use ::log::{Level, LevelFilter, Log, Metadata};
use serde_json::{Map, Value};

/// The level a binding starts at: warnings and errors.
pub const DEFAULT_LEVEL: LevelFilter = LevelFilter::Warn;

/// One record, owned, as a binding hands it on.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub level: Level,
    /// `headway.worker`, `headway.redis`, ...
    pub target: String,
    pub message: String,
    pub worker: Option<String>,
    pub task: Option<String>,
    pub id: Option<String>,
    /// When it was emitted, ms since the Unix epoch.
    pub at_ms: i64,
}

impl Record {
    /// The level's name as Python's `logging` and most tools spell it.
    pub fn level_name(&self) -> &'static str {
        level_name(self.level)
    }

    /// The line in `format`.
    pub fn line(&self, format: Format) -> String {
        Line {
            ts: self.at_ms as f64 / 1000.0,
            level: self.level_name(),
            logger: &self.target,
            message: &self.message,
            worker: self.worker.as_deref(),
            task: self.task.as_deref(),
            id: self.id.as_deref(),
        }
        .format(format)
    }
}

/// A level's name: `DEBUG`, `INFO`, `WARNING`, `ERROR` (`TRACE` as
/// `DEBUG`: the hosts have no lower level).
pub fn level_name(level: Level) -> &'static str {
    match level {
        Level::Error => "ERROR",
        Level::Warn => "WARNING",
        Level::Info => "INFO",
        Level::Debug | Level::Trace => "DEBUG",
    }
}

/// A level filter's name (`OFF` for none).
pub fn filter_name(level: LevelFilter) -> &'static str {
    level.to_level().map_or("OFF", level_name)
}

/// How a line is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The message alone (it names its part, and its worker where there is
    /// one): a library's default, what Python's `logging` prints with no
    /// handler configured.
    Plain,
    /// `[<UTC time> <LEVEL> <logger>] <message>`: the CLIs' default.
    Text,
    /// One JSON object ([`Line::format`]): `--log-format json`.
    Json,
}

/// One log line's parts, whichever language made the record (a Python
/// formatter passes a `logging.LogRecord`'s).
#[derive(Clone, Copy, Debug)]
pub struct Line<'a> {
    /// Seconds since the Unix epoch.
    pub ts: f64,
    /// `DEBUG`, `INFO`, `WARNING`, `ERROR`, ...
    pub level: &'a str,
    /// The logger's name (`headway.worker`, ...).
    pub logger: &'a str,
    pub message: &'a str,
    pub worker: Option<&'a str>,
    pub task: Option<&'a str>,
    pub id: Option<&'a str>,
}

impl Line<'_> {
    /// The line in `format`. JSON: `ts`, `level`, `logger`, `message`, and
    /// `worker`, `task_name`, `task_id` when known (Celery's names for the
    /// last two).
    pub fn format(&self, format: Format) -> String {
        match format {
            Format::Plain => self.message.to_string(),
            Format::Json => {
                let mut m = Map::new();
                m.insert(
                    "ts".into(),
                    Value::from((self.ts * 1000.0).round() / 1000.0),
                );
                m.insert("level".into(), self.level.into());
                m.insert("logger".into(), self.logger.into());
                m.insert("message".into(), self.message.into());
                for (k, v) in [
                    ("worker", self.worker),
                    ("task_name", self.task),
                    ("task_id", self.id),
                ] {
                    if let Some(v) = v {
                        m.insert(k.into(), v.into());
                    }
                }
                Value::Object(m).to_string()
            }
            Format::Text => {
                let at = chrono::DateTime::from_timestamp_millis((self.ts * 1000.0) as i64)
                    .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
                    .unwrap_or_default();
                format!("[{at} {} {}] {}", self.level, self.logger, self.message)
            }
        }
    }
}

/// Parses a `--log-format` value: `text` or `json`.
pub fn parse_format(s: &str) -> Result<Format, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "text" => Ok(Format::Text),
        "json" => Ok(Format::Json),
        _ => Err(format!(
            "the log format must be `text` or `json`, not {:?}",
            super::shown(s)
        )),
    }
}

/// Parses a `--loglevel` value, Celery's names: `debug`, `info`,
/// `warning` (`warn`), `error`, `critical` (as `error`, the highest `log`
/// has), `fatal`; any case.
pub fn parse_level(s: &str) -> Result<LevelFilter, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "debug" => Ok(LevelFilter::Debug),
        "info" => Ok(LevelFilter::Info),
        "warning" | "warn" => Ok(LevelFilter::Warn),
        "error" | "critical" | "fatal" => Ok(LevelFilter::Error),
        _ => Err(format!(
            "the log level must be one of debug, info, warning, error, critical, not {:?}",
            super::shown(s)
        )),
    }
}

/// Sets the level below which records are not made at all.
pub fn set_level(level: LevelFilter) {
    install();
    ::log::set_max_level(level);
}

/// Writes each record to stderr as it is emitted.
pub fn to_stderr(format: Format) {
    install();
    *route() = Route::Stderr(format);
}

/// Hands each record, in order, to `callback` on the `headway-log` thread.
pub fn deliver(callback: impl Fn(Record) + Send + 'static) {
    install();
    let (tx, rx) = mpsc::channel::<Msg>();
    let spawned = std::thread::Builder::new()
        .name("headway-log".into())
        .spawn(move || {
            for m in rx {
                match m {
                    Msg::Record(r) => callback(r),
                    Msg::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
    *route() = match spawned {
        Ok(_) => Route::Thread(Mutex::new(tx)),
        // No thread to be had: stderr rather than nothing.
        Err(_) => Route::Stderr(Format::Plain),
    };
}

/// Waits up to `timeout` for the records emitted before to be delivered;
/// answers whether they were. At once when records are not delivered on a
/// thread.
pub fn flush(timeout: Duration) -> bool {
    let (done, wait) = mpsc::sync_channel(1);
    {
        let r = route();
        let Route::Thread(tx) = &*r else { return true };
        let tx = tx.lock().unwrap_or_else(|e| e.into_inner());
        if tx.send(Msg::Flush(done)).is_err() {
            return false;
        }
    }
    wait.recv_timeout(timeout).is_ok()
}

enum Msg {
    Record(Record),
    Flush(SyncSender<()>),
}

enum Route {
    Dropped,
    Stderr(Format),
    Thread(Mutex<Sender<Msg>>),
}

static ROUTE: OnceLock<RwLock<Route>> = OnceLock::new();

fn routes() -> &'static RwLock<Route> {
    ROUTE.get_or_init(|| RwLock::new(Route::Dropped))
}

fn route() -> std::sync::RwLockWriteGuard<'static, Route> {
    routes().write().unwrap_or_else(|e| e.into_inner())
}

struct Sink;

static SINK: Sink = Sink;

/// Makes [`Sink`] the facade's logger, once; a logger installed before
/// (a Rust program's own) is left in place.
fn install() {
    static ONCE: OnceLock<bool> = OnceLock::new();
    ONCE.get_or_init(|| {
        let ok = ::log::set_logger(&SINK).is_ok();
        if ok {
            ::log::set_max_level(DEFAULT_LEVEL);
        }
        ok
    });
}

fn field(kvs: &dyn Source, key: &str) -> Option<String> {
    kvs.get(Key::from_str(key)).map(|v| v.to_string())
}

impl Log for Sink {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= ::log::max_level()
    }

    fn log(&self, r: &::log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let route = routes().read().unwrap_or_else(|e| e.into_inner());
        if matches!(*route, Route::Dropped) {
            return;
        }
        let kvs = r.key_values();
        let rec = Record {
            level: r.level(),
            target: r.target().to_string(),
            message: r.args().to_string(),
            worker: field(kvs, "worker"),
            task: field(kvs, "task"),
            id: field(kvs, "id"),
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
        };
        match &*route {
            Route::Dropped => {}
            Route::Stderr(f) => eprintln!("{}", rec.line(*f)),
            Route::Thread(tx) => {
                let _ = tx
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .send(Msg::Record(rec));
            }
        }
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_by_celerys_names_and_refuse_others_by_name() {
        assert_eq!(parse_level("DEBUG"), Ok(LevelFilter::Debug));
        assert_eq!(parse_level("warn"), Ok(LevelFilter::Warn));
        assert_eq!(parse_level("critical"), Ok(LevelFilter::Error));
        let e = parse_level("loud").unwrap_err();
        assert!(e.contains("\"loud\"") && e.contains("debug, info"), "{e}");
        assert_eq!(parse_format("JSON"), Ok(Format::Json));
        let t = Line {
            ts: 0.5,
            level: "INFO",
            logger: "headway.beat",
            message: "m",
            worker: None,
            task: None,
            id: None,
        }
        .format(Format::Text);
        assert_eq!(t, "[1970-01-01T00:00:00.500Z INFO headway.beat] m");
        assert!(
            parse_format("xml")
                .unwrap_err()
                .contains("`text` or `json`")
        );
    }

    #[test]
    fn a_json_line_names_its_run_only_when_known() {
        let line = |worker, task, id| Line {
            ts: 1.5,
            level: "WARNING",
            logger: "headway.worker",
            message: "m",
            worker,
            task,
            id,
        };
        let v: Value =
            serde_json::from_str(&line(Some("w"), Some("t"), Some("i")).format(Format::Json))
                .unwrap();
        assert_eq!(v["ts"], 1.5);
        assert_eq!(v["level"], "WARNING");
        assert_eq!(v["logger"], "headway.worker");
        assert_eq!(v["task_name"], "t");
        assert_eq!(v["task_id"], "i");
        let bare: Value =
            serde_json::from_str(&line(None, None, None).format(Format::Json)).unwrap();
        assert!(bare.get("task_id").is_none() && bare.get("worker").is_none());
    }

    #[test]
    fn records_reach_the_callback_in_order_with_their_run() {
        let got = std::sync::Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        deliver(move |r| g.lock().unwrap().push(r));
        set_level(LevelFilter::Info);
        super::super::emit(
            Level::Warn,
            "headway.worker",
            super::super::About::worker("w1").run("t.add", "id-1"),
            format_args!("first"),
        );
        super::super::emit(
            Level::Debug,
            "headway.worker",
            super::super::About::default(),
            format_args!("below the level"),
        );
        super::super::warn("headway.redis", format_args!("second"));
        assert!(flush(Duration::from_secs(5)));
        let got = got.lock().unwrap();
        let ours: Vec<_> = got
            .iter()
            .filter(|r| ["first", "second", "below the level"].contains(&r.message.as_str()))
            .collect();
        assert_eq!(ours.len(), 2, "{ours:?}");
        assert_eq!(ours[0].message, "first");
        assert_eq!(ours[0].worker.as_deref(), Some("w1"));
        assert_eq!(ours[0].task.as_deref(), Some("t.add"));
        assert_eq!(ours[0].id.as_deref(), Some("id-1"));
        assert_eq!(ours[1].message, "second");
        assert_eq!(ours[1].target, "headway.redis");
        assert_eq!(ours[1].id, None);
    }
}
