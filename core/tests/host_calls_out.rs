//! The process-wide count of calls out to a host, which decides whether the
//! runtime's thread looks for an answer before it sleeps (`runtime.rs`).
//! Alone in its test binary: the count is the whole process's.

use std::time::Duration;

use headway_core::task::Context;
use headway_core::task::host::{HostQueue, calls_out};
use serde_json::json;

fn ctx() -> Context {
    serde_json::from_value(json!({
        "id": "i", "name": "t", "queue": "q", "retries": 0, "attempt": 1,
        "last": true, "now": 0, "kwargs": {}, "root_id": null, "parent_id": null,
        "soft_time_limit": null, "time_limit": null, "worker": ""
    }))
    .expect("a context")
}

#[tokio::test]
async fn every_way_out_of_the_queue_counts_a_call_down_once() {
    assert_eq!(calls_out(), 0, "nothing out before the first call");
    let q = HostQueue::new();
    let b = q.body("t");
    let spawn = |b: std::sync::Arc<dyn headway_core::task::Body>| {
        tokio::spawn(async move { b.call(ctx(), vec![]).await })
    };
    // Answered one by one, answered together, withdrawn (its caller gave
    // up), and failed by a close: each leaves the count once.
    let answered = spawn(b.clone());
    let together = [spawn(b.clone()), spawn(b.clone())];
    let withdrawn = spawn(b.clone());
    let closed = spawn(b.clone());
    for _ in 0..200 {
        if calls_out() == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(calls_out(), 5, "queued calls are out");

    let calls = q.take(10);
    assert_eq!(calls.len(), 5);
    assert_eq!(calls_out(), 5, "taken, not answered: still out");
    q.finish(calls[0].seq, Ok(json!(1)));
    assert_eq!(answered.await.expect("joined").expect("answered"), json!(1));
    assert_eq!(calls_out(), 4);
    q.finish_many(vec![
        (calls[1].seq, Ok(json!(2))),
        (calls[2].seq, Ok(json!(3))),
    ]);
    for t in together {
        t.await.expect("joined").expect("answered");
    }
    assert_eq!(calls_out(), 2);
    withdrawn.abort();
    let _ = withdrawn.await;
    assert_eq!(calls_out(), 1, "a call whose caller went away is not out");
    q.close();
    assert!(
        closed.await.expect("joined").is_err(),
        "a close fails the call"
    );
    assert_eq!(calls_out(), 0);
    // A late answer to a call already counted down does not count again.
    q.finish(calls[0].seq, Ok(json!(1)));
    assert_eq!(calls_out(), 0);
}
