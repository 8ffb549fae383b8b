//! Celery's task protocol v2 inside kombu's JSON envelope, both ways.
//!
//! A message on a Celery queue is one JSON object (keys in this order):
//! `body` (base64 of the UTF-8 JSON `[args, kwargs, embed]`),
//! `content-encoding` `"utf-8"`, `content-type` `"application/json"`,
//! `headers` (the v2 task headers) and `properties` (`correlation_id`,
//! `reply_to`, `delivery_mode`, `delivery_info {exchange, routing_key}`,
//! `priority`, `body_encoding`, `delivery_tag`). Every piece is written the
//! way Python's `json.dumps` writes it ([`super::pyjson`]), so a capture of
//! a headway message reads like a capture of a Celery one.
//!
//! The mapping onto [`Message`]:
//! - `embed.chain` is the chain's tail **reversed** (Celery pops the next
//!   link off the end); headway keeps it next-first, so it is turned round
//!   both ways.
//! - A chord part that is a single task carries the callback signature in
//!   `embed.chord` and the chord's group id in the `group` header. A chord
//!   part that is a chain carries neither: Celery puts `group_id`,
//!   `group_index` and `chord` in the options of the chain's **last** link,
//!   and headway does the same (a headway worker moves the chord along the
//!   chain link by link, which is the same thing seen from the end).
//! - A chord callback that is itself a chain is a `celery.chain` signature
//!   with the links in `kwargs.tasks`, first link first.
//! - Headers headway does not act on (`shadow`, `timelimit`, `origin`,
//!   `stamps`, custom ones) go to [`Message::headers`] and come back out on
//!   a retry; `link`/`link_error` signatures to `callbacks`/`errbacks`.
//! - The queue headway calls `default` is Celery's `celery` (configurable):
//!   a headway app's default queue and a Celery app's default queue are then
//!   the same list.
//!
//! Split by direction: `encode` writes an envelope (and every signature in
//! it) in Celery's key order, `decode` reads one as a Celery worker would,
//! and `links` applies `link`/`link_error` callbacks, which need both.

mod decode;
pub mod dicts;
mod encode;
mod links;

use std::fmt;

use crate::task::message::new_id;

pub use decode::{Decoded, secs_ms};
pub use encode::{Encoded, unacked_entry};
pub use links::{apply_links, carry_links};

/// Why a message on a Celery queue cannot be read: what a Celery worker
/// logs and drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(pub String);

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("origin", &self.origin)
            .field("reply_to", &self.reply_to)
            .field("default_queue", &self.default_queue)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "undecodable Celery message: {}", self.0)
    }
}

impl std::error::Error for CodecError {}

pub(super) fn bad(why: impl Into<String>) -> CodecError {
    CodecError(why.into())
}

/// The v2 headers in the order Celery writes them. Everything else in a
/// message's headers is carried in [`Message::headers`].
const V2_HEADERS: [&str; 19] = [
    "lang",
    "task",
    "id",
    "shadow",
    "eta",
    "expires",
    "group",
    "group_index",
    "retries",
    "timelimit",
    "root_id",
    "parent_id",
    "argsrepr",
    "kwargsrepr",
    "origin",
    "ignore_result",
    "replaced_task_nesting",
    "stamped_headers",
    "stamps",
];

/// Headers the message model holds itself; never copied into `headers`.
/// The header headway counts lost holders in on Celery's layout (see
/// `CeleryBroker::recover`): not carried onto a retry, which is a new
/// delivery with a count of its own.
pub const LOST_HEADER: &str = "headway_lost";

const MODELLED: [&str; 10] = [
    "lang",
    "task",
    "id",
    "eta",
    "expires",
    "group",
    "group_index",
    "retries",
    "root_id",
    "parent_id",
];

/// Options of a signature the model holds itself.
const SIG_MODELLED: [&str; 11] = [
    "task_id",
    crate::task::message::CONCURRENCY_KEY,
    "queue",
    "eta",
    "countdown",
    "expires",
    "priority",
    "group_id",
    "group_index",
    "chord",
    "immutable",
];

/// Task name → queue (a headway queue name), for chain links whose
/// signature names no queue.
pub type Router = std::sync::Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What an encoder needs besides the message.
#[derive(Clone)]
pub struct Sender {
    /// Which queue a task name goes to when a signature names none (the
    /// app's policies, see [`super::CeleryBroker::route_for`]); `None`
    /// leaves such links to the receiving worker's default routing, as
    /// Celery's own signatures without a `queue` option are.
    pub routes: std::sync::Arc<std::sync::RwLock<Option<Router>>>,
    /// `headers.origin` for messages that carry none: `gen<pid>@<host>`,
    /// Celery's `anon_nodename()`.
    pub origin: String,
    /// `properties.reply_to` and signatures' `reply_to`: Celery's
    /// `app.thread_oid`, a per-app UUID (only RPC result backends read it).
    pub reply_to: String,
    /// The Celery queue headway's `default` queue stands for (`celery`).
    pub default_queue: String,
}

impl Sender {
    /// A sender for this process: origin `gen<pid>@<hostname>` and a fresh
    /// reply-to UUID.
    pub fn this_process(default_queue: &str) -> Sender {
        Sender {
            routes: Default::default(),
            origin: format!("gen{}@{}", std::process::id(), hostname()),
            reply_to: new_id(),
            default_queue: default_queue.to_string(),
        }
    }

    /// The Celery queue name for headway queue `q`.
    pub fn wire_queue<'a>(&'a self, q: &'a str) -> &'a str {
        if q == "default" {
            &self.default_queue
        } else {
            q
        }
    }

    /// The headway queue name for Celery queue `q`.
    pub fn model_queue(&self, q: &str) -> String {
        if q == self.default_queue {
            "default".to_string()
        } else {
            q.to_string()
        }
    }
}

/// This host's name, as Python's `socket.gethostname()` answers it on
/// Linux; `localhost` where it cannot be read.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::super::b64;
    use super::*;
    use crate::task::message::Message;

    fn sender() -> Sender {
        Sender {
            routes: Default::default(),
            origin: "gen4242@host1".into(),
            reply_to: "7c1f9e0a-3b2d-3c4e-8f5a-6d7e8f9a0b1c".into(),
            default_queue: "celery".into(),
        }
    }

    #[test]
    fn add_delay_matches_the_fact_sheet_example() {
        let id = "d3b5f1a2-5c1e-4a8e-9f0b-2a7c6e4d1b90".to_string();
        let m = Message::new(
            id,
            "tasks.add".into(),
            vec![json!(2), json!(3)],
            Map::new(),
            "default".into(),
        );
        let e = sender().encode_tagged(&m, 0, "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d".into());
        let want = concat!(
            r#"{"body": "W1syLCAzXSwge30sIHsiY2FsbGJhY2tzIjogbnVsbCwgImVycmJhY2tzIjogbnVsbCwgImNoYWluIjogbnVsbCwgImNob3JkIjogbnVsbH1d", "#,
            r#""content-encoding": "utf-8", "content-type": "application/json", "#,
            r#""headers": {"lang": "py", "task": "tasks.add", "id": "d3b5f1a2-5c1e-4a8e-9f0b-2a7c6e4d1b90", "shadow": null, "eta": null, "#,
            r#""expires": null, "group": null, "group_index": null, "retries": 0, "timelimit": [null, null], "#,
            r#""root_id": "d3b5f1a2-5c1e-4a8e-9f0b-2a7c6e4d1b90", "parent_id": null, "argsrepr": "(2, 3)", "kwargsrepr": "{}", "#,
            r#""origin": "gen4242@host1", "ignore_result": false, "replaced_task_nesting": 0, "stamped_headers": null, "stamps": {}}, "#,
            r#""properties": {"correlation_id": "d3b5f1a2-5c1e-4a8e-9f0b-2a7c6e4d1b90", "reply_to": "7c1f9e0a-3b2d-3c4e-8f5a-6d7e8f9a0b1c", "#,
            r#""delivery_mode": 2, "delivery_info": {"exchange": "", "routing_key": "celery"}, "priority": 0, "#,
            r#""body_encoding": "base64", "delivery_tag": "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d"}}"#
        );
        assert_eq!(e.json, want);
        let d = sender().decode(e.json.as_bytes()).unwrap();
        assert_eq!(d.message.queue, "default");
        assert_eq!(
            d.tag.as_deref(),
            Some("5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d")
        );
        assert_eq!(d.message.args, vec![json!(2), json!(3)]);
        assert_eq!(
            d.message.root_id.as_deref(),
            Some("d3b5f1a2-5c1e-4a8e-9f0b-2a7c6e4d1b90")
        );
    }

    #[test]
    fn refuses_what_celery_refuses() {
        let s = sender();
        assert!(s.decode(b"nope").is_err());
        assert!(s.decode(br#"{"body": "x", "content-type": "application/x-python-serialize", "properties": {}}"#).is_err());
        assert!(s.decode(br#"{"body": "!!", "content-type": "application/json", "headers": {"task": "t", "id": "i"}, "properties": {"body_encoding": "base64"}}"#).is_err());
        // [args, kwargs] without embed.
        let body = b64::encode(b"[[1], {}]");
        let raw = format!(
            r#"{{"body": "{body}", "content-type": "application/json", "headers": {{"task": "t", "id": "i"}}, "properties": {{"body_encoding": "base64"}}}}"#
        );
        assert!(s.decode(raw.as_bytes()).is_err());
    }
}
