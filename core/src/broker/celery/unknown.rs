//! Tasks this consumer does not run, on a queue it shares with Celery
//! workers: such a message is handed back to the end of its queue for a
//! consumer that runs it — whatever its content type, since a Celery worker
//! may accept pickle where headway never reads it — and each hand-back is
//! counted in the envelope (`x-headway-handbacks`), so a message nobody on
//! the queue runs goes to the dead letters after `max_handbacks` instead of
//! circling for ever. Names are logged once each, truncated and escaped
//! (a name is a producer's text), and the set of names logged is bounded: a
//! flood of distinct names cannot grow this process's memory.

use serde_json::Value;

use super::{CeleryBroker, UnknownTasks};

/// The header counting hand-backs. Celery workers ignore headers they do
/// not know (they become `request.headers`).
pub const HANDBACK_HEADER: &str = "x-headway-handbacks";

/// How many hand-backs a message may have before it is dead-lettered: 100
/// — with several Celery workers on the queue, one that runs it takes it
/// long before; with none, a hundred laps is proof nobody will.
pub const MAX_HANDBACKS: u32 = 100;

/// How many distinct names are logged (and remembered); later ones are
/// handed back unlogged, after one line saying so.
pub const WARNED_MAX: usize = 1024;

/// How much of a name a log line shows.
const NAME_SHOWN: usize = 100;

/// `name` as a log line shows it: at most 100 characters, then `…`, quoted
/// and escaped (control characters, quotes, backslashes), so no name can
/// forge or flood a log line.
pub fn shown(name: &str) -> String {
    let cut: String = name.chars().take(NAME_SHOWN).collect();
    if cut.len() < name.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// The reason a message handed back `times` times is dead-lettered with.
pub fn handed_back_reason(task: &str, times: u32) -> String {
    format!(
        "not registered: task {} handed back \u{d7}{times} and no consumer took it",
        shown(task)
    )
}

/// The task an envelope names in `headers.task`, when the bytes are a JSON
/// object that has one: read from an envelope headway will not decode (a
/// pickle) to learn whether it is another consumer's.
pub(super) fn named_task(raw: &[u8]) -> Option<(String, String)> {
    let v: Value = serde_json::from_slice(raw).ok()?;
    let h = v.get("headers")?;
    let t = h.get("task")?.as_str()?;
    let id = h.get("id").and_then(Value::as_str).unwrap_or_default();
    (!t.is_empty()).then(|| (t.to_string(), id.to_string()))
}

impl CeleryBroker {
    /// Whether `task` (run `id`) is one this consumer hands back (see
    /// [`UnknownTasks`]), logging each such name once (the first
    /// [`WARNED_MAX`] names), the record naming the run.
    pub(super) fn is_foreign(&self, task: &str, id: &str) -> bool {
        if self.opts.unknown_tasks != UnknownTasks::Requeue {
            return false;
        }
        let inner = self
            .facts
            .app
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(std::sync::Weak::upgrade);
        let Some(inner) = inner else {
            return false;
        };
        if (crate::task::App { inner }).has_task(task) {
            return false;
        }
        let mut w = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if w.len() < WARNED_MAX && w.insert(task.to_string()) {
            crate::log::emit(
                crate::log::Level::Warn,
                "headway.celery",
                crate::log::About::worker(&self.facts.node).run(task, id),
                format_args!(
                    "headway celery broker {}: task {} is not registered here; handing it back for another consumer",
                    self.facts.node,
                    shown(task)
                ),
            );
            if w.len() == WARNED_MAX {
                self.log(&format!(
                    "{WARNED_MAX} unregistered task names logged; further ones are handed back unlogged"
                ));
            }
        }
        true
    }

    /// How many unregistered task names this consumer has logged (at most
    /// [`WARNED_MAX`]).
    pub fn unknown_names_logged(&self) -> usize {
        self.warned.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_and_escaped() {
        assert_eq!(shown("add"), "\"add\"");
        assert_eq!(shown("a\nb\"c\\"), r#""a\nb\"c\\""#);
        let long = "x".repeat(5000);
        let s = shown(&long);
        assert!(s.len() < 110 && s.ends_with('…'), "{s}");
        assert!(handed_back_reason("a\nb", 100).contains(r#""a\nb" handed back ×100"#));
        assert_eq!(
            named_task(br#"{"headers": {"task": "t", "id": "i"}}"#),
            Some(("t".into(), "i".into()))
        );
        assert_eq!(named_task(b"\x80\x04"), None);
    }
}
