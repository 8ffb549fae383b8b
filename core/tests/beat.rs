//! Beat and the in-process scheduler on a virtual clock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headway_core::task::{
    App, BoxFuture, Clock, Cron, Every, Failure, Job, Policy, Rhythm, Scheduler, Sig, Tally,
    VirtualClock, WorkerConfig, body,
};
use serde_json::{Value, json};

const START: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_of_beats_in_milliseconds() {
    let clock = VirtualClock::new(START);
    let app = App::memory(Some(clock.clone()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    app.register(
        "tick",
        Policy::default(),
        body(move |ctx, args| {
            s2.lock().unwrap().push((args[0].clone(), ctx.id));
            async { Ok(Value::Null) }
        }),
    )
    .unwrap();
    let beat = app.beat();
    beat.add(
        "minutely",
        Sig::new("tick", vec![json!("m")]),
        Rhythm::Every(Every::new(60_000).unwrap()),
    )
    .unwrap();
    beat.add(
        "quarter",
        Sig::new("tick", vec![json!("q")]),
        Rhythm::Cron(Cron::new("*/15 * * * *", "UTC").unwrap()),
    )
    .unwrap();
    let pending = beat.pending();
    assert_eq!(pending[0], ("quarter".to_string(), START));
    assert_eq!(pending[1], ("minutely".to_string(), START + 60_000));
    beat.run(Some(START + 3_600_000)).await.unwrap();
    assert_eq!(clock.now(), START + 3_600_000);
    let w = app.worker(WorkerConfig::default()).unwrap();
    let w2 = w.clone();
    let h = tokio::spawn(async move { w2.run().await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while seen.lock().unwrap().len() < 65 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    w.stop(Duration::from_secs(1));
    h.await.unwrap().unwrap();
    let got = seen.lock().unwrap().clone();
    let m = got.iter().filter(|(a, _)| a == "m").count();
    let q = got.iter().filter(|(a, _)| a == "q").count();
    assert_eq!((m, q), (60, 5));
}

#[tokio::test]
async fn phase_is_kept_after_a_late_tick() {
    let clock = VirtualClock::new(START);
    let app = App::memory(Some(clock.clone()));
    let beat = app.beat();
    beat.add(
        "e",
        Sig::new("t", vec![]),
        Rhythm::Every(Every::new(1000).unwrap()),
    )
    .unwrap();
    clock.advance(1300);
    let fired = beat.tick().await.unwrap();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].due, START + 1000);
    assert_eq!(beat.pending(), vec![("e".to_string(), START + 2000)]);
    // Several missed slots fire once.
    clock.advance(5000);
    let fired = beat.tick().await.unwrap();
    assert_eq!(fired.len(), 1);
    assert_eq!(beat.pending(), vec![("e".to_string(), START + 7000)]);
    assert!(beat.remove("e"));
    assert!(beat.pending().is_empty());
    assert!(
        beat.add("", Sig::new("t", vec![]), Rhythm::At(START))
            .is_err()
    );
}

struct Count(Arc<AtomicU32>, bool);

impl Job for Count {
    fn fire(&self, _name: &str, _due: i64) -> BoxFuture<'static, Result<(), Failure>> {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        let fail = self.1 && n.is_multiple_of(2);
        Box::pin(async move {
            if fail {
                Err(Failure::new("ValueError", "odd"))
            } else {
                Ok(())
            }
        })
    }
}

#[tokio::test]
async fn scheduler_calls_jobs_and_goes_on_after_failures() {
    let clock = VirtualClock::new(START);
    let s = Scheduler::new(clock.clone());
    let ok = Arc::new(AtomicU32::new(0));
    let bad = Arc::new(AtomicU32::new(0));
    s.add(
        "ok",
        Arc::new(Count(ok.clone(), false)),
        Rhythm::Every(Every::new(1000).unwrap()),
    )
    .unwrap();
    s.add(
        "bad",
        Arc::new(Count(bad.clone(), true)),
        Rhythm::Every(Every::new(2000).unwrap()),
    )
    .unwrap();
    s.add(
        "once",
        Arc::new(Count(Arc::new(AtomicU32::new(0)), false)),
        Rhythm::At(START + 500),
    )
    .unwrap();
    s.run(Some(START + 10_000)).await;
    assert_eq!(ok.load(Ordering::SeqCst), 10);
    assert_eq!(bad.load(Ordering::SeqCst), 5);
    let st = s.stats("bad").unwrap();
    assert_eq!(st.failed.load(Ordering::SeqCst), 3);
    assert_eq!(
        st.last_error.lock().unwrap().as_ref().unwrap().kind,
        "ValueError"
    );
    assert_eq!(
        s.pending()
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["ok", "bad"]
    );
}

struct Slow(Arc<AtomicU32>);

impl Job for Slow {
    fn fire(&self, _name: &str, _due: i64) -> BoxFuture<'static, Result<(), Failure>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_running_job_is_not_started_twice() {
    let clock = VirtualClock::new(START);
    let s = Scheduler::new(clock.clone());
    let n = Arc::new(AtomicU32::new(0));
    s.add(
        "slow",
        Arc::new(Slow(n.clone())),
        Rhythm::Every(Every::new(1000).unwrap()),
    )
    .unwrap();
    clock.advance(1000);
    let s2 = s.clone();
    let first = tokio::spawn(async move { s2.tick().await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    clock.advance(1000);
    let second = s.tick().await;
    assert!(second.is_empty());
    assert_eq!(first.await.unwrap().len(), 1);
    assert_eq!(n.load(Ordering::SeqCst), 1);
    assert_eq!(s.stats("slow").unwrap().skipped.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_body_as_a_job_is_told_its_name_and_when_it_was_due() {
    let clock = VirtualClock::new(START);
    let s = Scheduler::new(clock.clone());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let b = body(move |ctx, args| {
        let s2 = s2.clone();
        async move {
            assert!(args.is_empty());
            s2.lock().unwrap().push((ctx.id, ctx.name, ctx.now));
            if ctx.now == START + 2000 {
                Err(Failure::new("ValueError", "two"))
            } else {
                Ok(json!(null))
            }
        }
    });
    s.add_body("job", b, Rhythm::Every(Every::new(1000).unwrap()))
        .unwrap();
    assert!(
        s.add_body(
            "",
            body(|_, _| async { Ok(json!(null)) }),
            Rhythm::At(START)
        )
        .is_err()
    );
    s.run(Some(START + 3000)).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter()
            .map(|(_, n, at)| (n.as_str(), *at))
            .collect::<Vec<_>>(),
        [
            ("job", START + 1000),
            ("job", START + 2000),
            ("job", START + 3000)
        ]
    );
    assert_eq!(seen[0].0, format!("job@{}", START + 1000));
    assert_eq!(
        s.stats("job").unwrap().tally(),
        Tally {
            fired: 3,
            failed: 1,
            skipped: 0,
            last_error: Some("ValueError: two".into()),
        }
    );
}
