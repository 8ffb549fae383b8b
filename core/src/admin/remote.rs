//! The admin's view of the app's workers in every process, and the two
//! remote commands it offers: shut a node down, change a task's rate limit.
//!
//! It asks through `task::control`, as `headway inspect` does, so what it
//! lists and what a command does are what the CLIs see. A node's
//! `heartbeat` is when it last answered (the admin's time at the answer):
//! the own layouts keep no heartbeat of their own, and an answer is the
//! proof of life an operator wants. On Celery's layout, which speaks
//! Celery's pidbox and not headway's channel, only this process's workers
//! are listed (Flower and `celery inspect` see every node there).

use serde_json::{Map, Value, json};

use super::Inner;
use super::http::Response;
use crate::task::Refused;
use crate::task::control::{self, TIMEOUT};
use crate::task::remote::{self, Node};

/// The most a command's `node` or `task` may be: 256 bytes.
const NAME_MAX: usize = 256;

fn invalid(why: impl Into<String>) -> Response {
    Response::error(400, "invalid", why.into())
}

/// `GET /api/workers`: `{"at", "nodes": [{node, heartbeat, stats}],
/// "reach": "broker" | "process"}`.
pub(super) async fn workers(inner: &Inner) -> Response {
    let app = &inner.app;
    let (reach, answers) = match control::ask(app, "stats", &json!({}), None, TIMEOUT).await {
        Ok(a) => ("broker", a),
        // No headway channel (Celery's layout): this process only.
        Err(Refused::Invalid(_)) => (
            "process",
            Node::here(app)
                .map(|n| vec![(control::node_name(), remote::stats_json(&n.stats()))])
                .unwrap_or_default(),
        ),
        Err(e) => return Response::error(502, "broker", e.to_string()),
    };
    let now = app.now();
    let nodes: Vec<Value> = answers
        .into_iter()
        .map(|(node, stats)| json!({"node": node, "heartbeat": now, "stats": stats}))
        .collect();
    Response::json(200, &json!({"at": now, "reach": reach, "nodes": nodes}))
}

/// `POST /api/control` `{"command": "shutdown" | "rate_limit", "node",
/// "task", "rate"}`: the command sent to `node` (a node's name, or a
/// worker's); answers what it said. 404 when nobody answered.
pub(super) async fn command(inner: &Inner, b: Map<String, Value>) -> Response {
    if let Some(k) = b
        .keys()
        .find(|k| !["command", "node", "task", "rate"].contains(&k.as_str()))
    {
        return invalid(format!(
            "unknown field `{k}`: expected command, node, task, rate"
        ));
    }
    let text = |name: &str| -> Result<String, Response> {
        match b.get(name) {
            Some(Value::String(s)) if !s.is_empty() && s.len() <= NAME_MAX => Ok(s.clone()),
            _ => Err(invalid(format!(
                "invalid `{name}`: must be a string of 1 to {NAME_MAX} bytes"
            ))),
        }
    };
    let node = match text("node") {
        Ok(n) => n,
        Err(r) => return r,
    };
    let (method, args) = match b.get("command").and_then(Value::as_str) {
        Some("shutdown") => ("shutdown", json!({})),
        Some("rate_limit") => {
            let task = match text("task") {
                Ok(t) => t,
                Err(r) => return r,
            };
            let rate = match b.get("rate") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(r)) => r.clone(),
                Some(_) => return invalid("invalid `rate`: must be like \"10/m\", or empty"),
            };
            ("rate_limit", json!({"task_name": task, "rate_limit": rate}))
        }
        _ => return invalid("invalid `command`: must be \"shutdown\" or \"rate_limit\""),
    };
    if let Err(e) = remote::Command::parse(method, &args) {
        return invalid(e.to_string());
    }
    let dest = [node.clone()];
    let answers = match control::ask(&inner.app, method, &args, Some(&dest), TIMEOUT).await {
        Ok(a) => a,
        // Celery's layout: this process's node, if it is the one named.
        Err(Refused::Invalid(_)) => {
            let req = control::request(method, &args, Some(&dest));
            control::answer(&inner.app, &req).into_iter().collect()
        }
        Err(e) => return Response::error(502, "broker", e.to_string()),
    };
    if answers.is_empty() {
        return Response::error(
            404,
            "no_node",
            format!("no node {node:?} answered within {} s", TIMEOUT.as_secs()),
        );
    }
    let refused = answers.iter().find_map(|(_, v)| v.get("error").cloned());
    if let Some(e) = refused {
        return invalid(e.as_str().unwrap_or("refused").to_string());
    }
    let replies: Map<String, Value> = answers.into_iter().collect();
    Response::json(
        200,
        &json!({"command": method, "node": node, "replies": replies}),
    )
}
