//! Celery's Redis result backend: the `celery-task-meta-<id>` value.
//!
//! A stored result is one JSON object, keys in this order: `status`,
//! `result`, `traceback`, `children`, `date_done`, then `group_id` and
//! `parent_id` when set, then `task_id` (Celery's `_get_result_meta` +
//! `_store_result`). `date_done` is an ISO time with `+00:00` for the ready
//! states (SUCCESS, FAILURE, REVOKED) and null otherwise. For FAILURE, RETRY
//! and REVOKED `result` is the exception as
//! `{"exc_type", "exc_message": [args…], "exc_module"}`, and `traceback` a
//! string (null for REVOKED, whose exception is `TaskRevokedError` with the
//! reason `revoked`, `expired` or `terminated`).
//!
//! Reading never imports or resolves anything a result names (CVE-2021-23727):
//! `exc_type`/`exc_module` become the text of a [`Failure`].

use serde_json::{Value, json};

use super::codec::CodecError;
use super::pyjson::{repr_args, write_str, write_value};
use super::typed::{iso, parse_iso};
use crate::task::state::{Failure, Outcome, State};

/// Python's built-in exception names: written with `exc_module: "builtins"`
/// so Celery rebuilds the real class.
const BUILTINS: [&str; 40] = [
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BlockingIOError",
    "BrokenPipeError",
    "BufferError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "EOFError",
    "Exception",
    "FileExistsError",
    "FileNotFoundError",
    "FloatingPointError",
    "ImportError",
    "IndexError",
    "InterruptedError",
    "IsADirectoryError",
    "KeyError",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "NotADirectoryError",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PermissionError",
    "RecursionError",
    "ReferenceError",
    "RuntimeError",
    "StopIteration",
    "SyntaxError",
    "SystemError",
    "TimeoutError",
    "TypeError",
    "UnicodeError",
    "ValueError",
    "ZeroDivisionError",
];

/// The module Celery should look an exception type up in: the failure's own
/// when known, `builtins` for Python's built-in names, and otherwise
/// `celery.exceptions` — where Celery's own (`NotRegistered`, `ChordError`,
/// `TaskRevokedError`) live and where it creates a stand-in class for any
/// other name, so an unknown type still raises as an `Exception`.
pub fn exc_module(f: &Failure) -> String {
    if let Some(m) = &f.module {
        return m.clone();
    }
    if BUILTINS.contains(&f.kind.as_str()) {
        "builtins".into()
    } else {
        "celery.exceptions".into()
    }
}

/// Writes `{"exc_type": …, "exc_message": […], "exc_module": …}`.
pub fn write_exc(out: &mut String, kind: &str, args: &[Value], module: &str) {
    out.push_str("{\"exc_type\": ");
    write_str(out, kind);
    out.push_str(", \"exc_message\": ");
    write_value(out, &Value::Array(args.to_vec()));
    out.push_str(", \"exc_module\": ");
    write_str(out, module);
    out.push('}');
}

/// The `exc_message` args of a headway failure: its message as the one
/// argument, as `raise ValueError("…")` would store it.
pub fn exc_args(f: &Failure) -> Vec<Value> {
    vec![json!(f.message)]
}

/// The reason a REVOKED outcome gives (`TaskRevokedError`'s argument).
fn revoke_reason(f: Option<&Failure>) -> &'static str {
    match f.map(|f| f.kind.as_str()) {
        Some("Expired") => "expired",
        Some("Terminated") => "terminated",
        _ => "revoked",
    }
}

/// The traceback text stored for a failure: its own, or the last line a
/// Python traceback would end with.
pub fn traceback_text(f: &Failure) -> String {
    match &f.traceback {
        Some(t) => t.clone(),
        None => format!("{}: {}\n", f.kind, f.message),
    }
}

/// Writes the encoded `result` of an outcome (the value, or the exception
/// dict), as chord members and metas carry it.
pub fn write_result(out: &mut String, o: &Outcome) {
    match o.state {
        State::Success => write_value(out, o.result.as_ref().unwrap_or(&Value::Null)),
        State::Failure | State::Retry => match &o.error {
            Some(f) => write_exc(out, &f.kind, &exc_args(f), &exc_module(f)),
            None => write_exc(out, "Exception", &[json!("failed")], "builtins"),
        },
        State::Revoked => write_exc(
            out,
            "TaskRevokedError",
            &[json!(revoke_reason(o.error.as_ref()))],
            "celery.exceptions",
        ),
        State::Started => write_value(
            out,
            o.result.as_ref().unwrap_or(
                &json!({"pid": std::process::id(), "hostname": super::codec::hostname()}),
            ),
        ),
        State::Pending | State::Received => out.push_str("null"),
    }
}

/// The meta JSON Celery stores for `o` under `celery-task-meta-<id>`.
pub fn encode_meta(o: &Outcome, group_id: Option<&str>, parent_id: Option<&str>) -> String {
    let mut out = String::with_capacity(160);
    out.push_str("{\"status\": ");
    write_str(&mut out, o.state_name());
    out.push_str(", \"result\": ");
    write_result(&mut out, o);
    out.push_str(", \"traceback\": ");
    match (&o.state, &o.error) {
        (State::Failure | State::Retry, Some(f)) => write_str(&mut out, &traceback_text(f)),
        (State::Failure | State::Retry, None) => write_str(&mut out, "Exception: failed\n"),
        _ => out.push_str("null"),
    }
    // Celery's `children`: each an AsyncResult's `as_tuple()`,
    // `[[id, null], null]`.
    out.push_str(", \"children\": [");
    for (i, c) in o.children.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str("[[");
        write_str(&mut out, c);
        out.push_str(", null], null]");
    }
    out.push_str("], \"date_done\": ");
    if o.state.is_final() {
        write_str(&mut out, &iso(o.at));
    } else {
        out.push_str("null");
    }
    if let Some(g) = group_id {
        out.push_str(", \"group_id\": ");
        write_str(&mut out, g);
    }
    if let Some(p) = parent_id {
        out.push_str(", \"parent_id\": ");
        write_str(&mut out, p);
    }
    out.push_str(", \"task_id\": ");
    write_str(&mut out, &o.id);
    out.push('}');
    out
}

/// A Celery exception dict as a [`Failure`] (never resolved to a class).
pub fn failure_of(exc: &Value, traceback: Option<&str>) -> Failure {
    let kind = exc
        .get("exc_type")
        .and_then(Value::as_str)
        .unwrap_or("Exception")
        .to_string();
    let message = match exc.get("exc_message") {
        Some(Value::Array(a)) if a.len() == 1 => match &a[0] {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        },
        Some(Value::Array(a)) if a.is_empty() => String::new(),
        Some(Value::Array(a)) => repr_args(a),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    };
    Failure {
        kind,
        message,
        traceback: traceback.map(str::to_string),
        module: exc
            .get("exc_module")
            .and_then(Value::as_str)
            .map(str::to_string),
        ask: None,
        lineage: Box::default(),
    }
}

/// Reads a stored meta (written by Celery or by headway) as an [`Outcome`].
/// Celery's own states headway has no name for read as the nearest:
/// REJECTED as FAILURE, IGNORED as PENDING; any other status is a custom
/// state a body recorded (`update_state`): STARTED with that name and the
/// meta as its result (see [`crate::task::progress`]).
pub fn decode_meta(id: &str, raw: &[u8]) -> Result<Outcome, CodecError> {
    let v: Value = serde_json::from_slice(raw)
        .map_err(|e| CodecError(format!("result meta is not JSON: {e}")))?;
    decode_meta_value(id, &v)
}

/// [`decode_meta`] of a parsed value.
pub fn decode_meta_value(id: &str, v: &Value) -> Result<Outcome, CodecError> {
    let status = v
        .get("status")
        .and_then(Value::as_str)
        .ok_or_else(|| CodecError("result meta has no status".into()))?;
    let (state, custom) = match status {
        "REJECTED" => (State::Failure, None),
        "IGNORED" => (State::Pending, None),
        "" => return Err(CodecError("result meta has an empty status".into())),
        s => match State::parse(s) {
            Some(known) => (known, None),
            None => (State::Started, Some(s.to_string())),
        },
    };
    let at = v
        .get("date_done")
        .and_then(Value::as_str)
        .and_then(parse_iso)
        .unwrap_or(0);
    let mut o = Outcome::new(
        v.get("task_id").and_then(Value::as_str).unwrap_or(id),
        state,
        at,
    );
    o.custom = custom;
    let result = v.get("result").cloned().unwrap_or(Value::Null);
    let tb = v.get("traceback").and_then(Value::as_str);
    match state {
        State::Failure | State::Retry | State::Revoked => {
            let mut f = failure_of(&result, tb);
            if status == "REJECTED" && result.is_null() {
                f = Failure::new("Rejected", "rejected");
            }
            o.error = Some(f);
        }
        _ => o.result = Some(result),
    }
    if let Some(r) = v.get("retries").and_then(Value::as_u64) {
        // Saturating: 2^32 retries are not 0.
        o.retries = u32::try_from(r).unwrap_or(u32::MAX);
    }
    o.task = v.get("name").and_then(Value::as_str).map(str::to_string);
    // `[[id, parent], group members]` each; a group's own id is its first.
    o.children = v
        .get("children")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get(0)?.get(0)?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_meta_like_celery() {
        let mut o = Outcome::new("d907925e", State::Success, 1_796_202_272_629);
        o.result = Some(json!(5));
        assert_eq!(
            encode_meta(&o, None, None),
            r#"{"status": "SUCCESS", "result": 5, "traceback": null, "children": [], "date_done": "2026-12-02T09:04:32.629000+00:00", "task_id": "d907925e"}"#
        );
        let back = decode_meta("d907925e", encode_meta(&o, None, None).as_bytes()).unwrap();
        assert_eq!(back, o);
    }

    #[test]
    fn failure_meta_like_celery() {
        let mut o = Outcome::new("x", State::Failure, 1_767_225_600_000);
        o.error = Some(Failure::new("ValueError", "bad"));
        assert_eq!(
            encode_meta(&o, None, Some("p")),
            r#"{"status": "FAILURE", "result": {"exc_type": "ValueError", "exc_message": ["bad"], "exc_module": "builtins"}, "traceback": "ValueError: bad\n", "children": [], "date_done": "2026-01-01T00:00:00+00:00", "parent_id": "p", "task_id": "x"}"#
        );
        let mut r = Outcome::new("y", State::Revoked, 0);
        r.error = Some(Failure::new("Expired", "expired before it ran"));
        assert!(encode_meta(&r, None, None).contains(
            r#""result": {"exc_type": "TaskRevokedError", "exc_message": ["expired"], "exc_module": "celery.exceptions"}, "traceback": null"#
        ));
        let mut n = Outcome::new("z", State::Failure, 0);
        n.error = Some(Failure::new("NotRegistered", "no"));
        assert!(encode_meta(&n, None, None).contains(r#""exc_module": "celery.exceptions""#));
    }

    #[test]
    fn reads_a_celery_failure_without_resolving_it() {
        let raw = br#"{"status": "FAILURE", "result": {"exc_type": "ValueError", "exc_message": ["bad", 7], "exc_module": "builtins"}, "traceback": "Traceback ...\nValueError: ('bad', 7)\n", "children": [], "date_done": "2026-12-02T09:04:32.636999+00:00", "task_id": "847b"}"#;
        let o = decode_meta("847b", raw).unwrap();
        assert_eq!(o.state, State::Failure);
        let f = o.error.unwrap();
        assert_eq!(
            (f.kind.as_str(), f.message.as_str()),
            ("ValueError", "('bad', 7)")
        );
        assert_eq!(f.module.as_deref(), Some("builtins"));
        assert!(f.traceback.unwrap().starts_with("Traceback"));
        let evil = br#"{"status": "FAILURE", "result": {"exc_type": "system", "exc_message": "rm -rf /", "exc_module": "os"}, "traceback": null, "children": [], "date_done": null, "task_id": "e"}"#;
        let o = decode_meta("e", evil).unwrap();
        assert_eq!(o.error.unwrap().kind, "system");
        assert!(decode_meta("q", br#"{"status": ""}"#).is_err());
        assert!(decode_meta("q", br#"{"result": 1}"#).is_err());
    }

    #[test]
    fn a_custom_state_is_stored_as_celery_stores_update_state() {
        // Celery's `store_result(id, meta, "PROGRESS")`: status the name,
        // result the meta, no traceback, no date_done (not a ready state).
        let o = crate::task::progress::outcome("c1", "t", 0, "PROGRESS", json!({"done": 3}), 5)
            .unwrap();
        let raw = encode_meta(&o, None, None);
        assert_eq!(
            raw,
            r#"{"status": "PROGRESS", "result": {"done": 3}, "traceback": null, "children": [], "date_done": null, "task_id": "c1"}"#
        );
        let back = decode_meta("c1", raw.as_bytes()).unwrap();
        assert_eq!(
            (back.state, back.state_name(), back.result.clone()),
            (State::Started, "PROGRESS", Some(json!({"done": 3})))
        );
        // Any status Celery's own states do not name reads as custom.
        let c = decode_meta("q", br#"{"status": "WHAT", "result": [1]}"#).unwrap();
        assert_eq!(
            (c.state_name(), c.result.clone()),
            ("WHAT", Some(json!([1])))
        );
        // A known state reads as itself, with no custom name.
        let s = decode_meta("q", br#"{"status": "STARTED", "result": null}"#).unwrap();
        assert_eq!((s.state, s.custom), (State::Started, None));
    }
}
