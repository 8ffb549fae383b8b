//! Host bodies stuck past their timeout, at the core's level: threads that
//! take calls from a `HostQueue` the way a binding's runner threads do, one
//! of which never answers until released. The worker keeps running through
//! a replacement thread, and once every allowed thread is stuck it claims
//! nothing and says it is unhealthy, until a stuck call returns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use headway_core::task::{App, HostQueue, Options, Policy, State, WorkerConfig, runners};
use serde_json::{Map, json};

/// Released when set: what stuck calls wait for.
#[derive(Default)]
struct Release(Mutex<bool>, Condvar);

impl Release {
    fn wait(&self) {
        let mut g = self.0.lock().unwrap();
        while !*g {
            g = self.1.wait(g).unwrap();
        }
    }
    fn set(&self) {
        *self.0.lock().unwrap() = true;
        self.1.notify_all();
    }
}

/// A runner thread as a binding's: takes calls, answers them; a `hang` call
/// is stuck until released. Back from an abandoned call it asks whether it
/// is one too many.
fn runner(q: Arc<HostQueue>, release: Arc<Release>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        for c in q.take_blocking(1, Duration::from_millis(20)) {
            let late = if &*c.key == "hang" {
                release.wait();
                q.finish(c.seq, Ok(json!(null)))
            } else {
                q.finish(c.seq, Ok(c.args[0].clone()))
            };
            if late && q.runners().retire() {
                return;
            }
        }
    }
    q.runners().leave();
}

async fn until(what: impl Fn() -> bool, why: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !what() {
        assert!(Instant::now() < deadline, "timed out waiting: {why}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_runner_stuck_stops_claims_until_one_returns() {
    let app = App::memory(None);
    let q = HostQueue::new();
    let timeout = Policy {
        timeout: Some(200),
        ..Policy::default()
    };
    app.register("hang", timeout, q.body("hang")).unwrap();
    app.register("fine", Policy::default(), q.body("fine"))
        .unwrap();

    // One runner, staffed, and a hirer starting what the core asks for.
    let release = Arc::new(Release::default());
    let stop = Arc::new(AtomicBool::new(false));
    q.runners().staff(1);
    let start = {
        let (q, r, s) = (q.clone(), release.clone(), stop.clone());
        move || {
            let (q, r, s) = (q.clone(), r.clone(), s.clone());
            std::thread::spawn(move || runner(q, r, s));
        }
    };
    start();
    let hirer = {
        let (q, s) = (q.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                for _ in 0..q.runners().hire(Duration::from_millis(20)) {
                    start();
                }
            }
        })
    };

    let w = app
        .worker(WorkerConfig {
            concurrency: 1,
            ..WorkerConfig::default()
        })
        .unwrap();
    let w2 = w.clone();
    let run = tokio::spawn(async move { w2.run().await });
    let send = |name: &'static str, arg| {
        let app = app.clone();
        async move {
            app.send(name, vec![arg], Map::new(), Options::default())
                .await
                .unwrap()
        }
    };

    // Positive control: it runs.
    assert_eq!(
        send("fine", json!(1))
            .await
            .get(Some(Duration::from_secs(5)))
            .await
            .unwrap(),
        json!(1)
    );
    assert!(w.health().healthy);

    // One stuck call: replaced, and the next runs on the new thread.
    let h1 = send("hang", json!(0)).await;
    let err = h1.get(Some(Duration::from_secs(5))).await.unwrap_err();
    assert!(err.to_string().contains("TimeoutError"), "{err}");
    assert_eq!(h1.state().await.unwrap(), State::Failure);
    assert_eq!(
        send("fine", json!(2))
            .await
            .get(Some(Duration::from_secs(5)))
            .await
            .unwrap(),
        json!(2)
    );

    // A second: the cap (one per runner) is reached and both threads are
    // stuck. Unhealthy, listed so, and nothing more is claimed.
    let h2 = send("hang", json!(0)).await;
    until(|| !w.health().healthy, "unhealthy").await;
    let hl = w.health();
    assert_eq!((hl.staffed, hl.threads, hl.stuck, hl.cap), (1, 2, 2, 1));
    let listed = runners::workers(&app);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, w.name());
    assert!(!listed[0].runners.healthy);
    // The timed-out run's FAILURE is stored just after its runner is
    // marked stuck, so wait for the result rather than read the state at
    // the instant health turns.
    let err = h2.get(Some(Duration::from_secs(5))).await.unwrap_err();
    assert!(err.to_string().contains("TimeoutError"), "{err}");
    assert_eq!(h2.state().await.unwrap(), State::Failure);

    let h3 = send("fine", json!(3)).await;
    let ready = || async {
        app.inspector().unwrap().queues().await.unwrap()[0]
            .ready
            .values()
            .sum::<u64>()
    };
    let window = Instant::now() + Duration::from_millis(500);
    while Instant::now() < window {
        assert_eq!(ready().await, 1, "claimed while every runner is stuck");
        assert_eq!(h3.state().await.unwrap(), State::Pending);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Released: the stuck calls return late, the worker claims and runs it,
    // and the extra thread retires.
    release.set();
    assert_eq!(
        h3.get(Some(Duration::from_secs(5))).await.unwrap(),
        json!(3)
    );
    until(|| w.health().healthy, "healthy again").await;
    until(
        || w.health().threads == 1 && w.health().stuck == 0,
        "one thread",
    )
    .await;

    w.stop(Duration::from_secs(1));
    run.await.unwrap().unwrap();
    assert!(runners::workers(&app).is_empty(), "unlisted once stopped");
    stop.store(true, Ordering::SeqCst);
    hirer.join().unwrap();
}
