//! The one message model every broker carries.
//!
//! It carries what Celery's task protocol v2 carries — id, task name, args
//! list, kwargs object, eta, expires, retries, priority, root and parent ids,
//! group and group index, the chain's tail and the chord's callback — so the
//! Celery codec is a translation of field names, not a redesign, and a message
//! can cross between a headway worker and a Celery worker without losing a
//! part of its canvas.
//!
//! Times are milliseconds since the Unix epoch, as everywhere on the task side.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A fresh task id: a random (v4) UUID in its hyphenated form, as Celery makes
/// them, so ids from either side look alike in a result store.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// One run of one task, as it travels through a broker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// The run's id: also the key its result is stored under. A retry keeps it.
    pub id: String,
    /// The registered name of the task to run.
    pub task: String,
    /// Positional arguments.
    #[serde(default)]
    pub args: Vec<Value>,
    /// Keyword arguments.
    #[serde(default)]
    pub kwargs: Map<String, Value>,
    /// The queue it was published to.
    pub queue: String,
    /// Not to be run before this instant (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta: Option<i64>,
    /// Pointless to run after this instant: revoked as expired instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<i64>,
    /// How many attempts before this one failed.
    #[serde(default)]
    pub retries: u32,
    /// 0 (highest) to 9, as Celery's Redis transport orders its steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// The first run of the canvas this run belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_id: Option<String>,
    /// The run that sent this one (the previous link of a chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The group this run is a part of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Its place in that group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_index: Option<u32>,
    /// The links still to run after this one, next first. (Celery's wire
    /// order is the reverse; its codec turns it round.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<Sig>,
    /// The chord this run (or the last link of its chain) is a part of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chord: Option<Box<Chord>>,
    /// For a chord's callback: the parts whose results, in this order, are
    /// prepended as one list argument when it runs (unless immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<Join>,
    /// What the message carries for another system but headway does not
    /// act on (Celery headers, `link` callbacks), kept through retries and
    /// restores. Boxed, and `None` for messages headway makes, so a message
    /// stays small.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<Box<Carried>>,
}

/// The header a run's concurrency key travels in.
pub const CONCURRENCY_KEY: &str = "headway_concurrency_key";
/// The header counting a run's put-offs at its concurrency key's limit.
pub const DEFERRED: &str = "headway_deferred";

/// Protocol data a message carries unchanged for another system.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Carried {
    /// Headers headway does not act on: Celery's `shadow`, `timelimit`,
    /// `origin`, `stamps`, `replaced_task_nesting` and any custom
    /// `apply_async(headers=…)` entry.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub headers: Map<String, Value>,
    /// Celery `link` signatures (raw signature dicts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callbacks: Vec<Value>,
    /// Celery `link_error` signatures (raw signature dicts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errbacks: Vec<Value>,
}

/// What a chord's callback collects when it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Join {
    /// The parts' ids, in the order the parts were given.
    pub parts: Vec<String>,
    /// An immutable callback is not given the results.
    #[serde(default)]
    pub immutable: bool,
}

/// The chord a part belongs to.
///
/// Every part carries the same key and the same callback, so whichever part
/// finishes last can send the callback by itself — there is no coordinator to
/// lose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chord {
    /// The counter key (the chord's group id).
    pub key: String,
    /// How many parts there are.
    pub size: u32,
    /// The callback's message, its id assigned at send so it can be waited on
    /// before it exists.
    pub callback: Box<Message>,
}

/// A run that has not been published: a node of a canvas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sig {
    /// The task's name.
    pub task: String,
    /// Positional arguments.
    #[serde(default)]
    pub args: Vec<Value>,
    /// Keyword arguments.
    #[serde(default)]
    pub kwargs: Map<String, Value>,
    /// An immutable signature is not given the previous link's result.
    #[serde(default)]
    pub immutable: bool,
    /// The id its run will have; assigned when the canvas is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Where and when it goes.
    #[serde(default)]
    pub options: Options,
    /// Signature options headway carries but does not act on (Celery's
    /// `reply_to`, `link`, `time_limit`, ...), kept so a canvas crossing a
    /// headway worker reaches the next Celery worker whole.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

/// Per-send options: where a run goes and when it may run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// The queue (the task's policy queue when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Not before this instant (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta: Option<i64>,
    /// This long from the send (ms); `eta` wins when both are given, being the
    /// more specific of the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub countdown: Option<i64>,
    /// Revoked as expired if not started by this instant (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<i64>,
    /// 0 (highest) to 9.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// The run's id (a fresh UUID when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The key whose runs its task's `concurrency_limit` counts, across
    /// every worker on the broker ([`Message::concurrency_key`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    /// A send with this key while an earlier one's holds answers the
    /// earlier run instead ([`crate::task::limits`]); a single send's only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedupe_key: Option<String>,
    /// How long the dedupe key holds (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedupe_ttl: Option<i64>,
}

impl Sig {
    /// A signature of `task` with positional `args`.
    pub fn new(task: impl Into<String>, args: Vec<Value>) -> Sig {
        Sig {
            task: task.into(),
            args,
            kwargs: Map::new(),
            immutable: false,
            id: None,
            options: Options::default(),
            extra: Map::new(),
        }
    }

    /// The same signature, immutable.
    pub fn immutable(mut self) -> Sig {
        self.immutable = true;
        self
    }

    /// The same signature with keyword arguments.
    pub fn with_kwargs(mut self, kwargs: Map<String, Value>) -> Sig {
        self.kwargs = kwargs;
        self
    }

    /// The same signature with options.
    pub fn with_options(mut self, options: Options) -> Sig {
        self.options = options;
        self
    }

    /// The same signature with `callback` sent when its run succeeds, given
    /// the result (Celery's `link`): kept in Celery's dict form so a Celery
    /// worker reads it too. Several links are sent as a group.
    pub fn link(mut self, callback: &crate::task::canvas::Canvas) -> Sig {
        crate::broker::celery::codec::dicts::add_link(&mut self, callback, false);
        self
    }

    /// The same signature with `errback` sent when its run fails for good,
    /// given the failed run's id (Celery's `link_error`).
    pub fn link_error(mut self, errback: &crate::task::canvas::Canvas) -> Sig {
        crate::broker::celery::codec::dicts::add_link(&mut self, errback, true);
        self
    }
}

impl Message {
    /// The time limits the message itself sets, in ms: Celery's `timelimit`
    /// header, `[hard, soft]` in seconds (`apply_async(time_limit=…,
    /// soft_time_limit=…)`). As in Celery's worker they win over the task's
    /// own; a null, a non-number or one not above zero is no limit.
    pub fn time_limits(&self) -> (Option<i64>, Option<i64>) {
        let Some(Value::Array(pair)) = self
            .carried
            .as_ref()
            .and_then(|c| c.headers.get("timelimit"))
        else {
            return (None, None);
        };
        let ms = |i: usize| {
            pair.get(i)
                .and_then(Value::as_f64)
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(|s| ((s * 1000.0).ceil() as i64).max(1))
        };
        (ms(0), ms(1))
    }

    /// A bare message: no canvas, no eta, first attempt.
    pub fn new(
        id: String,
        task: String,
        args: Vec<Value>,
        kwargs: Map<String, Value>,
        queue: String,
    ) -> Message {
        Message {
            id,
            task,
            args,
            kwargs,
            queue,
            eta: None,
            expires: None,
            retries: 0,
            priority: None,
            root_id: None,
            parent_id: None,
            group: None,
            group_index: None,
            chain: Vec::new(),
            chord: None,
            join: None,
            carried: None,
        }
    }

    /// What it carries for another system, made on first use.
    pub fn carried_mut(&mut self) -> &mut Carried {
        self.carried.get_or_insert_default()
    }

    /// A carried header, if any.
    pub fn carried_header(&self, key: &str) -> Option<&Value> {
        self.carried.as_ref().and_then(|c| c.headers.get(key))
    }

    /// The run's concurrency key, sent as `concurrency_key`: it travels as
    /// the header [`CONCURRENCY_KEY`], so every layout carries it (Celery's
    /// protocol keeps a custom header through retries and restores) and a
    /// Celery worker that does not know it runs the message unchanged.
    pub fn concurrency_key(&self) -> Option<&str> {
        self.carried_header(CONCURRENCY_KEY).and_then(Value::as_str)
    }

    /// Sets the run's concurrency key.
    pub fn set_concurrency_key(&mut self, key: &str) {
        self.carried_mut()
            .headers
            .insert(CONCURRENCY_KEY.into(), Value::String(key.into()));
    }

    /// How many times the run was put off because its concurrency key was
    /// at its limit ([`DEFERRED`]): what the next wait grows from.
    pub fn deferred(&self) -> u32 {
        self.carried_header(DEFERRED)
            .and_then(Value::as_u64)
            .map_or(0, |n| n.min(u32::MAX as u64) as u32)
    }

    /// Counts one more put-off.
    pub fn set_deferred(&mut self, n: u32) {
        self.carried_mut()
            .headers
            .insert(DEFERRED.into(), Value::from(n));
    }

    /// Encodes the message as headway's own JSON wire form.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a message always serialises")
    }

    /// Decodes headway's own JSON wire form.
    pub fn from_json(bytes: &[u8]) -> Result<Message, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn time_limits_come_from_celerys_timelimit_header() {
        let mut m = super::Message::new(
            "i".into(),
            "t".into(),
            vec![],
            Default::default(),
            "q".into(),
        );
        assert_eq!(m.time_limits(), (None, None));
        for (given, want) in [
            (serde_json::json!([10, 2.5]), (Some(10_000), Some(2_500))),
            (serde_json::json!([null, 3]), (None, Some(3_000))),
            (serde_json::json!([0, -1]), (None, None)),
            (serde_json::json!(["x", 1e-9]), (None, Some(1))),
            (serde_json::json!("nope"), (None, None)),
        ] {
            m.carried_mut().headers.insert("timelimit".into(), given);
            assert_eq!(m.time_limits(), want);
        }
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_and_omits_empty() {
        let mut m = Message::new(
            new_id(),
            "add".into(),
            vec![json!(1)],
            Map::new(),
            "default".into(),
        );
        let text = String::from_utf8(m.to_json()).unwrap();
        assert!(!text.contains("chain"));
        assert!(!text.contains("eta"));
        m.chain.push(Sig::new("mul", vec![json!(2)]).immutable());
        m.eta = Some(5);
        let back = Message::from_json(&m.to_json()).unwrap();
        assert_eq!(back, m);
        assert!(Message::from_json(b"{\"id\":1}").is_err());
    }

    #[test]
    fn ids_are_uuids() {
        let a = new_id();
        assert_eq!(a.len(), 36);
        assert_ne!(a, new_id());
    }
}
