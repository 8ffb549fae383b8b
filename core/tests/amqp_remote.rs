#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_acks_never_covers_a_message_still_held() {
    let Some(vh) = Vhost::new() else { return };
    let on = Target::url("broker", &vh.url())
        .unwrap()
        .connect(&system())
        .await
        .unwrap();
    let b = on.broker();
    let msgs: Vec<headway_core::task::Message> = (0..5)
        .map(|i| {
            headway_core::task::Message::new(
                format!("m{i}"),
                "tasks.add".into(),
                vec![],
                Map::new(),
                "default".into(),
            )
        })
        .collect();
    b.publish(msgs).await.unwrap();
    let qs = vec!["default".to_string()];
    let mut got = Vec::new();
    while got.len() < 5 {
        got.extend(b.consume(&qs, 5, Duration::from_secs(5)).await.unwrap());
    }
    let unacked = || {
        vh.list("queues", &["name", "messages_unacknowledged"])
            .iter()
            .find(|r| r[0] == "celery")
            .map(|r| r[1].clone())
            .unwrap_or_default()
    };
    let wait_for = |want: &'static str| {
        let unacked = &unacked;
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let now = unacked();
                if now == want {
                    return;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "unacked {now}, want {want}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    wait_for("5").await;
    // The two lowest in a row (one frame, `multiple`) and the fourth: the
    // third and the fifth stay unacked.
    let r = |i: usize| got[i].receipt.clone();
    b.ack(vec![r(1), r(0), r(3)]).await.unwrap();
    wait_for("2").await;
    // The fifth alone, then the third: none is left, and the queue is empty.
    b.ack(vec![r(4)]).await.unwrap();
    wait_for("1").await;
    b.ack(vec![r(2)]).await.unwrap();
    wait_for("0").await;
    let ready = vh.list("queues", &["name", "messages"]);
    assert!(
        ready.iter().any(|r| r[0] == "celery" && r[1] == "0"),
        "{ready:?}"
    );
}
