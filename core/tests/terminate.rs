//! `revoke(terminate)` stops a run in whichever process runs it: two apps
//! on one broker — two processes, on the Redis layouts each with its own
//! connections — the worker on one, the terminate from the other. Each
//! scenario runs on every layout (`support::kit`): the in-memory broker
//! (two apps on one broker in one process), headway's own Redis layout
//! (the terminate goes over `P:terminate`) and Celery's (over the pidbox,
//! as Celery's own `revoke(terminate=True)`).

mod support;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headway_core::task::{
    App, Options, Policy, Refused, SIGTERM, State, Worker, WorkerConfig, body,
};
use serde_json::{Map, json};
use support::kit::{Kit, Layout, Opts};

/// The terminates a broker told: (ids, signal), in order.
type Heard = Arc<Mutex<Vec<(Vec<String>, i32)>>>;

/// How long a terminate may take to stop a run in another process.
const STOPS_WITHIN: Duration = Duration::from_secs(2);

fn worker(app: &App) -> (Worker, tokio::task::JoinHandle<()>) {
    let w = Worker::new(
        app.clone(),
        WorkerConfig {
            concurrency: 2,
            ..WorkerConfig::default()
        },
    )
    .unwrap();
    let w2 = w.clone();
    (w, tokio::spawn(async move { w2.run().await.unwrap() }))
}

/// Waits (polling, up to `limit`) for `cond`, failing naming `what`.
async fn until(what: &str, limit: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond().await {
        assert!(Instant::now() < deadline, "never within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_from_another_app_stops_the_run_where_it_goes() {
    for kit in Kit::all(&Layout::ALL).await {
        let name = kit.name();
        // App A runs the worker; app B, on a broker of its own on the same
        // store, sends and terminates.
        let a = kit.app();
        let b = kit.open(Opts::named("b")).await.app();
        let started = Arc::new(AtomicU32::new(0));
        let release = Arc::new(AtomicBool::new(false));
        let (s2, r2) = (started.clone(), release.clone());
        // A long body: it runs until released (60 s at most).
        let slow = body(move |_, _| {
            s2.fetch_add(1, Ordering::SeqCst);
            let release = r2.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !release.load(Ordering::SeqCst) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok(json!("done"))
            }
        });
        a.register("slow", Policy::default(), slow.clone()).unwrap();
        b.register("slow", Policy::default(), slow).unwrap();
        let (w, h) = worker(&a);
        let doomed = b
            .send("slow", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        let spared = b
            .send("slow", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        until(
            &format!("{name}: both run on A"),
            Duration::from_secs(10),
            async || started.load(Ordering::SeqCst) == 2,
        )
        .await;

        let sent = Instant::now();
        doomed.revoke(true).await.unwrap();
        until(
            &format!("{name}: the terminated run is REVOKED"),
            STOPS_WITHIN,
            async || doomed.state().await.unwrap() == State::Revoked,
        )
        .await;
        assert!(
            sent.elapsed() < STOPS_WITHIN,
            "{name}: {:?}",
            sent.elapsed()
        );
        assert!(
            matches!(
                doomed.get(Some(Duration::from_secs(1))).await,
                Err(Refused::Revoked(_))
            ),
            "{name}"
        );
        // Positive control: the run nobody terminated is still going, and
        // finishes with its value once released.
        let now = spared.state().await.unwrap();
        assert!(!now.is_final(), "{name}: the spared run is {now:?}");
        release.store(true, Ordering::SeqCst);
        assert_eq!(
            spared.get(Some(Duration::from_secs(5))).await.unwrap(),
            json!("done"),
            "{name}"
        );
        assert_eq!(spared.state().await.unwrap(), State::Success, "{name}");
        w.stop(Duration::from_secs(1));
        h.await.unwrap();
        eprintln!("{name}: ok");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_carries_its_signal_to_every_app_on_the_broker() {
    for kit in Kit::all(&Layout::ALL).await {
        let name = kit.name();
        // A hearer on A's broker, as an app is (an app adds itself so).
        let a = kit.open(Opts::named("a")).await;
        let heard: Heard = Arc::default();
        let h2 = heard.clone();
        a.broker()
            .on_terminate(Arc::new(move |ids: &[String], signal| {
                h2.lock().unwrap().push((ids.to_vec(), signal));
                true
            }));
        let b = kit.app();
        // A revoke without terminate is not heard; a terminate is, with
        // its signal — SIGTERM unless named.
        b.revoke(&["kept".to_string()], false).await.unwrap();
        b.revoke_with(&["k1".to_string(), "k2".to_string()], true, 9)
            .await
            .unwrap();
        b.revoke(&["t".to_string()], true).await.unwrap();
        until(&format!("{name}: both heard"), STOPS_WITHIN, async || {
            heard.lock().unwrap().len() >= 2
        })
        .await;
        assert_eq!(
            *heard.lock().unwrap(),
            vec![
                (vec!["k1".to_string(), "k2".to_string()], 9),
                (vec!["t".to_string()], SIGTERM)
            ],
            "{name}"
        );
        // A signal out of range is refused, naming it, and nothing is sent.
        let e = b
            .revoke_with(&["x".to_string()], true, 65)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("invalid `signal`"), "{name}: {e}");
        assert!(!b.broker().revoked(&["x".to_string()]).await.unwrap()[0]);
        eprintln!("{name}: ok");
    }
}
