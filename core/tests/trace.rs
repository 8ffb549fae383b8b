//! Tracing in the core: what a traced send puts on its messages reaches the
//! runs' contexts — through a retry and down a chain — only while the app
//! traces (the bindings open the spans; `task::trace` decides the rest).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use headway_core::task::{
    App, Canvas, Options, Policy, RetryBackoff, Sig, Worker, WorkerConfig, body,
};
use serde_json::{Map, Value, json};

const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

type Seen = Arc<Mutex<Vec<(String, u32, Option<Value>)>>>;

/// An app whose tasks note, per run, the carried `traceparent` (None when
/// the run's context has no trace part).
fn app(seen: &Seen) -> App {
    let app = App::memory(None);
    for name in ["first", "second"] {
        let seen = seen.clone();
        let policy = Policy {
            retries: 1,
            backoff: RetryBackoff::fixed(1).unwrap(),
            ..Policy::default()
        };
        app.register(
            name,
            policy,
            body(move |ctx, _| {
                let seen = seen.clone();
                async move {
                    let tp = ctx
                        .trace
                        .as_ref()
                        .map(|t| t.carrier.get("traceparent").cloned().unwrap_or(Value::Null));
                    seen.lock()
                        .unwrap()
                        .push((ctx.name.clone(), ctx.retries, tp));
                    if ctx.name == "first" && ctx.retries == 0 {
                        return Err(headway_core::task::Failure::new("ValueError", "once"));
                    }
                    Ok(json!(1))
                }
            }),
        )
        .unwrap();
    }
    app
}

async fn run_chain(app: &App, trace: Option<Map<String, Value>>) {
    let w = Worker::new(app.clone(), WorkerConfig::default()).unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await.unwrap() });
    let chain = Canvas::Chain(vec![
        Canvas::Sig(Sig::new("first", vec![])),
        Canvas::Sig(Sig::new("second", vec![])),
    ]);
    let hd = app.send_canvas_traced(chain, trace).await.unwrap();
    assert_eq!(
        hd.get(Some(Duration::from_secs(5))).await.unwrap(),
        json!(1)
    );
    w.stop(Duration::from_secs(1));
    h.await.unwrap();
}

fn injected() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("traceparent".into(), json!(PARENT));
    m.insert("baggage".into(), json!("left=out"));
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_send_reaches_every_run_of_its_chain_and_its_retry() {
    let seen = Seen::default();
    let app = app(&seen);
    app.set_tracing(true);
    run_chain(&app, Some(injected())).await;
    let got = seen.lock().unwrap().clone();
    assert_eq!(
        got,
        vec![
            ("first".into(), 0, Some(json!(PARENT))),
            ("first".into(), 1, Some(json!(PARENT))),
            ("second".into(), 0, Some(json!(PARENT))),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_that_does_not_trace_gives_its_runs_no_trace_part() {
    // The positive control is the test above: the same chain, traced.
    let seen = Seen::default();
    let app = app(&seen);
    assert!(!app.tracing());
    run_chain(&app, Some(injected())).await;
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|(_, _, tp)| tp.is_none()), "{got:?}");
    // A traced app with an untraced send: a trace part, nothing carried.
    let seen = Seen::default();
    let app = self::app(&seen);
    app.set_tracing(true);
    run_chain(&app, None).await;
    let got = seen.lock().unwrap().clone();
    assert!(
        got.iter().all(|(_, _, tp)| tp == &Some(Value::Null)),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_send_span_fixes_the_id_it_names() {
    let app = App::memory(None);
    let mut o = Options::default();
    let span = app.send_span("elsewhere", &mut o);
    let id = o.id.clone().unwrap();
    assert_eq!(span.name, "apply_async/elsewhere");
    assert!(
        span.attributes
            .contains(&("messaging.message.id", json!(id)))
    );
    assert!(
        span.attributes
            .contains(&("messaging.destination", json!("default")))
    );
    let mut given = Options {
        id: Some("fixed".into()),
        queue: Some("q".into()),
        ..Options::default()
    };
    let span = app.send_span("elsewhere", &mut given);
    assert_eq!(given.id.as_deref(), Some("fixed"));
    assert!(
        span.attributes
            .contains(&("messaging.destination", json!("q")))
    );
}
