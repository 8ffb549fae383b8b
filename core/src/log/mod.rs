//! headway's log records: emitted through the `log` facade, handed to the
//! host language's logging by the bindings.
//!
//! The core never prints. Each record has a target naming its part
//! (`headway.worker`, `headway.redis`, `headway.celery`, `headway.beat`,
//! `headway.admin`, `headway.memory`) and, where known, the worker's name,
//! the task's name and the task's id as key-values (`worker`, `task`, `id`),
//! so a structured logger can index them. A Rust program installs the logger
//! it likes (`env_logger`, `tracing-log`, ...); with none, records are
//! dropped, as every library on `log` does.
//!
//! The bindings install [`sink`]'s logger instead of writing their own: the
//! Python binding has records delivered in order on a thread of their own
//! and hands each to `logging` (a core thread never waits for the GIL), the
//! Node binding writes warnings to stderr as they happen, or delivers them to
//! the app's `logger`. The text of a line and of a JSON line, the level
//! names and the default level are decided here, once.
//!
//! Values that came from a message (task names, ids, refusal reasons) go
//! through [`shown`] before they reach a message's text.

mod shown;
pub mod sink;

use std::fmt;

pub use ::log::{Level, LevelFilter};
pub use shown::{SHOWN_MAX, Shown, shown};

/// Who a record is about, where known.
#[derive(Clone, Copy, Default)]
pub struct About<'a> {
    pub worker: Option<&'a str>,
    pub task: Option<&'a str>,
    pub id: Option<&'a str>,
}

impl<'a> About<'a> {
    /// A record about worker `name`.
    pub fn worker(name: &'a str) -> About<'a> {
        About {
            worker: Some(name),
            ..About::default()
        }
    }

    /// The same, about run `id` of task `task` too.
    pub fn run(self, task: &'a str, id: &'a str) -> About<'a> {
        About {
            task: Some(task),
            id: Some(id),
            ..self
        }
    }
}

/// Emits one record through the facade: `args` is its message, `about`
/// its key-values.
pub fn emit(level: Level, target: &str, about: About<'_>, args: fmt::Arguments<'_>) {
    if level > ::log::max_level() {
        return;
    }
    let kvs: Vec<(&str, &str)> = [
        ("worker", about.worker),
        ("task", about.task),
        ("id", about.id),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v?)))
    .collect();
    let kvs = kvs.as_slice();
    ::log::logger().log(
        &::log::Record::builder()
            .level(level)
            .target(target)
            .args(args)
            .key_values(&kvs)
            .build(),
    );
}

/// A warning about nothing in particular (no worker, no run).
pub fn warn(target: &str, args: fmt::Arguments<'_>) {
    emit(Level::Warn, target, About::default(), args);
}
