//! Celery's `link` / `link_error` callbacks: signature dicts a finished run
//! carries, turned into the messages Celery would send for them. Apart from
//! encode and decode because it is neither: it reads signatures and builds
//! new messages from a run's outcome.

use serde_json::{Map, Value};

use super::{CodecError, Sender, bad};
use crate::task::message::{Message, Sig, new_id};

/// Celery `link` / `link_error` callbacks, applied as Celery 5.5 applies
/// them (`celery/app/trace.py` on success, `_call_task_errbacks` in
/// `celery/backends/base.py` on failure for good).
///
/// Each raw signature dict becomes one message: `arg` (the result, or the
/// failed task's id) is prepended to its args unless it is immutable, its
/// `parent_id` is the finished run, its `root_id` that run's root. Several
/// success links, and error links always, go out as a group (a fresh group
/// id, each its index), as Celery's `group(...).apply_async` does. A link's
/// own `link`/`link_error` options become the new message's callbacks. A
/// `celery.chain` link runs its first task with `arg` and carries the rest
/// as its chain. `message_of` turns a signature into a message (queue from
/// its options or the app's routing, `countdown` into an eta). Signatures
/// that cannot be read are answered as errors, one per bad link, and the
/// good ones are still returned.
pub fn apply_links(
    sigs: &[Value],
    arg: &Value,
    parent: &Message,
    grouped: bool,
    message_of: impl Fn(&Sig) -> Message,
) -> (Vec<Message>, Vec<CodecError>) {
    // Queue names are kept as written: a headway queue and its Celery name
    // encode to the same list either way.
    let plain = Sender {
        routes: Default::default(),
        origin: String::new(),
        reply_to: String::new(),
        default_queue: String::new(),
    };
    let group = (grouped && !sigs.is_empty()).then(new_id);
    let root = parent.root_id.clone().unwrap_or_else(|| parent.id.clone());
    let (mut out, mut bad_links) = (Vec::new(), Vec::new());
    for (i, raw) in sigs.iter().enumerate() {
        let (head, tail) = match plain.link_parts(raw) {
            Ok(p) => p,
            Err(e) => {
                bad_links.push(e);
                continue;
            }
        };
        let mut n = message_of(&head);
        if !head.immutable {
            n.args.insert(0, arg.clone());
        }
        n.chain = tail;
        n.root_id = Some(root.clone());
        n.parent_id = Some(parent.id.clone());
        if let Some(g) = &group {
            n.group = Some(g.clone());
            n.group_index = Some(i as u32);
        }
        carry_links(&head.extra, &mut n);
        out.push(n);
    }
    (out, bad_links)
}

/// Moves a signature's `link` / `link_error` options (a dict or a list of
/// them) onto the message it becomes, as Celery's `apply_async(link=…)`
/// puts them in the message's callbacks and errbacks.
pub fn carry_links(extra: &Map<String, Value>, m: &mut Message) {
    let as_list = |k: &str| match extra.get(k) {
        Some(Value::Array(a)) => a.clone(),
        Some(v @ Value::Object(_)) => vec![v.clone()],
        _ => Vec::new(),
    };
    let (cbs, ebs) = (as_list("link"), as_list("link_error"));
    if !cbs.is_empty() || !ebs.is_empty() {
        let c = m.carried_mut();
        c.callbacks = cbs;
        c.errbacks = ebs;
    }
}

impl Sender {
    /// A link's first signature and, for a `celery.chain` link, the rest.
    pub(super) fn link_parts(&self, raw: &Value) -> Result<(Sig, Vec<Sig>), CodecError> {
        let kind = raw.get("subtask_type").and_then(Value::as_str);
        let is_chain = kind == Some("chain")
            || raw.get("task").and_then(Value::as_str) == Some("celery.chain");
        if !is_chain {
            if let Some(k) = kind {
                return Err(bad(format!("a {k:?} link callback is not supported")));
            }
            return Ok((self.decode_sig(raw)?, Vec::new()));
        }
        let tasks = raw
            .get("kwargs")
            .and_then(|k| k.get("tasks"))
            .and_then(Value::as_array)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| bad("a celery.chain link has no tasks"))?;
        let mut sigs = tasks
            .iter()
            .map(|s| self.decode_sig(s))
            .collect::<Result<Vec<_>, _>>()?;
        let head = sigs.remove(0);
        Ok((head, sigs))
    }
}
