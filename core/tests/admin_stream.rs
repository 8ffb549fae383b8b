//! The live stream's cost: every open stream shares one snapshot per tick,
//! counting stored outcomes is a fixed number of Redis commands (the store
//! keeps a count index per state) rather than a walk of every result, and
//! at most `STREAMS_MAX` streams are open at once (503 past it).

mod support;

use std::sync::Arc;
use std::time::Duration;

use headway_core::admin::{Admin, AdminConfig, Reply, Request, STREAMS_MAX, TICK};
use headway_core::broker::{RedisBroker, RedisOptions};
use headway_core::task::{App, Clock, Outcome, State, SystemClock};
use serde_json::Value;
use support::RedisServer;
use tokio::time::Instant;

const T: &str = "s3cret-token-for-tests";

fn admin(app: &App) -> Admin {
    Admin::new(
        app.clone(),
        AdminConfig {
            token: Some(T.into()),
            ..AdminConfig::default()
        },
    )
    .unwrap()
}

fn stream_req() -> Request {
    Request::new("GET", "/api/stream").header("Authorization", format!("Bearer {T}"))
}

async fn redis_app(server: &RedisServer, result_expires: Duration) -> App {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let b = RedisBroker::connect(
        &server.url(),
        RedisOptions {
            result_expires,
            ..RedisOptions::default()
        },
        clock.clone(),
    )
    .await
    .unwrap();
    App::new(b.seams(), clock)
}

async fn store(app: &App, ids: impl Iterator<Item = String>, state: State) {
    let all: Vec<Outcome> = ids.map(|id| Outcome::new(id, state, 1)).collect();
    for chunk in all.chunks(1000) {
        app.backend().unwrap().store(chunk.to_vec()).await.unwrap();
    }
}

async fn counts(app: &App) -> Vec<(State, u64)> {
    app.inspector()
        .unwrap()
        .counts()
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// `INFO stats`' `total_commands_processed`.
fn commands(server: &RedisServer) -> u64 {
    let info = server.cli(&["INFO", "stats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_commands_processed in {info}"))
}

fn data(frame: &[u8]) -> Value {
    let text = std::str::from_utf8(frame).unwrap();
    assert!(text.contains("event: counts\n"), "{text}");
    let d = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
    serde_json::from_str(d).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_streams_over_ten_thousand_results_cost_redis_a_fixed_rate() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let app = redis_app(&server, Duration::from_secs(3600)).await;
    store(&app, (0..10_000).map(|i| format!("r{i}")), State::Success).await;
    let a = admin(&app);

    let mut streams = Vec::new();
    for _ in 0..STREAMS_MAX {
        match a.handle(stream_req()).await {
            Reply::Stream(h, s) => {
                assert_eq!(h.status, 200);
                streams.push(s);
            }
            Reply::Full(r) => panic!("stream {} refused: {r:?}", streams.len()),
        }
    }
    // Each pumps its frames, as an adapter does; every frame counts all
    // 10 000 results (read from the count index, not a walk).
    let mut pumps = Vec::new();
    for mut s in streams {
        pumps.push(tokio::spawn(async move {
            let mut frames = 0u32;
            let stop = Instant::now() + Duration::from_secs(4);
            while Instant::now() < stop {
                let f = s.next().await.unwrap();
                assert_eq!(data(&f)["counts"]["SUCCESS"], 10_000);
                frames += 1;
            }
            frames
        }));
    }
    // Measure once they are all going: over 3 s, about four ticks.
    tokio::time::sleep(TICK / 2).await;
    let before = commands(&server);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = commands(&server) - before;
    let per_s = used as f64 / t0.elapsed().as_secs_f64();
    let mut total = 0;
    for p in pumps {
        let frames = p.await.unwrap();
        // Positive control: every stream was live throughout.
        assert!(frames >= 4, "a stream sent only {frames} frames");
        total += frames;
    }
    // A snapshot is eight commands (a ZCOUNT or a tally
    // per state, the queue set), shared
    // by every stream and read at most twice a tick: 20 a second at worst.
    // One snapshot per stream is ~80 a second here; walking 10 000 results
    // is thousands.
    assert!(
        per_s < 30.0,
        "{used} Redis commands in 3 s ({per_s:.0}/s) for {STREAMS_MAX} streams \
         ({total} frames) over 10 000 results"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_counts_follow_states_and_expiry() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let app = redis_app(&server, Duration::from_millis(1500)).await;
    store(&app, (0..20).map(|i| format!("a{i}")), State::Started).await;
    store(&app, (0..5).map(|i| format!("b{i}")), State::Failure).await;
    assert_eq!(
        counts(&app).await,
        [(State::Started, 20), (State::Failure, 5)]
    );
    // A run moves on: out of STARTED, into SUCCESS.
    store(&app, (0..15).map(|i| format!("a{i}")), State::Success).await;
    // A final state is never overwritten, nor recounted.
    store(&app, (0..5).map(|i| format!("b{i}")), State::Success).await;
    assert_eq!(
        counts(&app).await,
        [
            (State::Started, 5),
            (State::Success, 15),
            (State::Failure, 5)
        ]
    );
    // Expired results are no longer counted.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !counts(&app).await.is_empty() {
        assert!(Instant::now() < deadline, "{:?}", counts(&app).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And the tallies of touched final states drop their ended buckets
    // when the next store opens a bucket: one left.
    store(&app, std::iter::once("c".to_string()), State::Success).await;
    assert_eq!(server.cli(&["ZCARD", "headway:tally:SUCCESS"]), "1");
    assert_eq!(counts(&app).await, [(State::Success, 1)]);
    // A final state's results are tallied, not indexed one by one.
    assert_eq!(server.cli(&["ZCARD", "headway:count:SUCCESS"]), "0");
}

#[tokio::test]
async fn streams_past_the_cap_are_refused_with_503() {
    let app = App::memory(None);
    let a = admin(&app);
    let mut open = Vec::new();
    for i in 0..STREAMS_MAX {
        // Positive control: every stream under the cap streams.
        match a.handle(stream_req()).await {
            Reply::Stream(h, mut s) => {
                assert_eq!(h.status, 200);
                let f = tokio::time::timeout(Duration::from_secs(2), s.next())
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(data(&f)["counts"]["SUCCESS"], 0, "stream {i}");
                open.push(s);
            }
            Reply::Full(r) => panic!("stream {i} under the cap refused: {r:?}"),
        }
    }
    assert_eq!(a.streams(), STREAMS_MAX);
    for _ in 0..3 {
        let r = match a.handle(stream_req()).await {
            Reply::Full(r) => r,
            Reply::Stream(..) => panic!("a stream past the cap was opened"),
        };
        assert_eq!(r.status, 503);
        assert_eq!(r.get("Retry-After"), Some("2"));
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["error"], "busy");
        assert!(r.get("Content-Security-Policy").is_some());
    }
    // A closed stream frees its place; a HEAD holds none.
    drop(open.pop());
    assert_eq!(a.streams(), STREAMS_MAX - 1);
    let head = a
        .handle(Request::new("HEAD", "/api/stream").header("Authorization", format!("Bearer {T}")))
        .await;
    assert!(matches!(head, Reply::Full(ref r) if r.status == 200));
    assert_eq!(a.streams(), STREAMS_MAX - 1);
    assert!(matches!(a.handle(stream_req()).await, Reply::Stream(..)));
}
