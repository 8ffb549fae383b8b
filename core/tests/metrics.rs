//! Prometheus metrics: what a worker settled appears in the text, by task
//! and state, with runtimes; queues and dead letters are read at scrape
//! time; the worker's own port answers `GET /metrics` and nothing else.

use std::io::{Read, Write};
use std::time::Duration;

use headway_core::task::metrics::{render, serve};
use headway_core::task::{App, Failure, Options, Policy, WorkerConfig, body};
use serde_json::{Map, json};

fn value(text: &str, line_start: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(line_start) && l[line_start.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn settled_runs_are_counted_by_task_and_state_and_served() {
    let rt = headway_core::runtime::runtime().unwrap();
    rt.block_on(async {
        let app = App::memory(None);
        app.register("ok", Policy::default(), body(|_, _| async { Ok(json!(1)) }))
            .unwrap();
        app.register(
            "bad",
            Policy::default(),
            body(|_, _| async { Err(Failure::new("ValueError", "no")) }),
        )
        .unwrap();
        // Before any run: no task line, the queue gauges present.
        let before = render(&app).await.unwrap();
        assert_eq!(
            value(
                &before,
                "headway_tasks_total{task=\"ok\",state=\"SUCCESS\"}"
            ),
            None
        );
        let w = app.worker(WorkerConfig::default()).unwrap();
        let running = tokio::spawn({
            let w = w.clone();
            async move { w.run().await }
        });
        let mut hs = Vec::new();
        for _ in 0..3 {
            hs.push(
                app.send("ok", vec![], Map::new(), Options::default())
                    .await
                    .unwrap(),
            );
        }
        let bad = app
            .send("bad", vec![], Map::new(), Options::default())
            .await
            .unwrap();
        for h in &hs {
            h.get(Some(Duration::from_secs(10))).await.unwrap();
        }
        assert!(bad.get(Some(Duration::from_secs(10))).await.is_err());
        let text = render(&app).await.unwrap();
        assert_eq!(
            value(&text, "headway_tasks_total{task=\"ok\",state=\"SUCCESS\"}"),
            Some(3.0),
            "{text}"
        );
        assert_eq!(
            value(&text, "headway_tasks_total{task=\"bad\",state=\"FAILURE\"}"),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            value(&text, "headway_task_runtime_seconds_count{task=\"ok\"}"),
            Some(3.0)
        );
        assert_eq!(
            value(
                &text,
                "headway_task_runtime_seconds_bucket{task=\"ok\",le=\"+Inf\"}"
            ),
            Some(3.0)
        );
        assert!(text.contains("# TYPE headway_task_runtime_seconds histogram"));
        assert_eq!(
            value(&text, "headway_queue_depth{queue=\"default\"}"),
            Some(0.0),
            "{text}"
        );
        assert_eq!(
            value(&text, "headway_dead_letters{queue=\"default\"}"),
            Some(0.0)
        );
        assert!(
            text.contains(&format!(
                "headway_worker_active{{worker=\"{}\"}} 0",
                w.name()
            )),
            "{text}"
        );

        // The worker's own port: /metrics, and nothing else.
        let server = serve(app.clone(), "127.0.0.1", 0).unwrap();
        let addr = server.addr;
        let (ok, missing) =
            tokio::task::spawn_blocking(move || (get(addr, "/metrics"), get(addr, "/")))
                .await
                .unwrap();
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(ok.contains("text/plain; version=0.0.4"));
        assert!(
            ok.contains("headway_tasks_total{task=\"ok\",state=\"SUCCESS\"} 3"),
            "{ok}"
        );
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        server.close();
        w.stop(Duration::from_secs(1));
        running.await.unwrap().unwrap();
    });
}

#[test]
fn a_port_taken_is_a_clear_error() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let e = serve(App::memory(None), "127.0.0.1", port.into())
        .err()
        .expect("refused");
    assert!(
        e.to_string()
            .contains(&format!("cannot serve metrics on 127.0.0.1:{port}")),
        "{e}"
    );
    let e = serve(App::memory(None), "127.0.0.1", 70_000)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("0 to 65535, not 70000"), "{e}");
}
