//! The specs' defaults, ranges and texts, for each host's spelling.

use super::*;

#[test]
fn an_empty_policy_is_the_default() {
    for host in [Host::Rust, Host::Python, Host::Node] {
        assert_eq!(
            PolicySpec::default().build(host).unwrap(),
            Policy::default()
        );
    }
}

#[test]
fn policy_fields_are_taken_and_checked() {
    let p = PolicySpec {
        queue: Some("mail".into()),
        retries: Some(3.0),
        backoff: Some(BackoffSpec::Fixed { delay: 500 }),
        timeout: Some(2_000),
        acks_late: Some(true),
        ignore_result: Some(true),
        rate: Some(RateSpec::Text("10/m".into())),
        time_limit: Some(5_000),
        soft_time_limit: Some(4_000),
        reject_on_worker_lost: Some(true),
        retry_for: Some(vec!["builtins.ConnectionError".into()]),
        dont_retry_for: None,
        rate_scope: None,
        concurrency_limit: None,
    }
    .build(Host::Python)
    .unwrap();
    assert_eq!(p.retry_for, ["builtins.ConnectionError"]);
    assert_eq!(
        (p.time_limit, p.soft_time_limit, p.reject_on_worker_lost),
        (Some(5_000), Some(4_000), true)
    );
    let e = PolicySpec {
        soft_time_limit: Some(0),
        ..PolicySpec::default()
    }
    .build(Host::Node)
    .unwrap_err();
    assert_eq!(e.arg(), "softTimeLimit");
    assert_eq!(p.queue, "mail");
    assert_eq!(p.retries, 3);
    assert_eq!(p.backoff, RetryBackoff::Fixed { delay: 500 });
    assert_eq!(p.timeout, Some(2_000));
    assert!(p.acks_late && p.ignore_result);
    assert_eq!(p.rate, Some(Rate::new(10, 60_000).unwrap()));

    for bad in [-1.0, 1.5, f64::NAN, f64::INFINITY, 1e12] {
        let e = PolicySpec {
            retries: Some(bad),
            ..PolicySpec::default()
        }
        .build(Host::Node)
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid `retries`: must be a whole number, 0 or more"
        );
    }
    let e = PolicySpec {
        timeout: Some(0),
        ..PolicySpec::default()
    }
    .build(Host::Python)
    .unwrap_err();
    assert_eq!(e.to_string(), "invalid `timeout`: must be positive");
    let e = PolicySpec {
        queue: Some(String::new()),
        ..PolicySpec::default()
    }
    .build(Host::Node)
    .unwrap_err();
    assert_eq!(e.to_string(), "invalid `queue`: must not be empty");
}

#[test]
fn backoffs_fill_in_the_default() {
    let d = BackoffSpec::Exponential {
        base: None,
        cap: None,
        jitter: None,
    };
    assert_eq!(d.build(Host::Node).unwrap(), RetryBackoff::default());
    let half = BackoffSpec::Exponential {
        base: Some(10),
        cap: None,
        jitter: Some(false),
    };
    assert_eq!(
        half.build(Host::Python).unwrap(),
        RetryBackoff::Exponential {
            base: 10,
            cap: 600_000,
            jitter: false
        }
    );
    let e = BackoffSpec::Fixed { delay: -1 }
        .build(Host::Node)
        .unwrap_err();
    assert_eq!(e.arg(), "delay");
    let e = BackoffSpec::Exponential {
        base: None,
        cap: Some(-1),
        jitter: None,
    }
    .build(Host::Python)
    .unwrap_err();
    assert_eq!(e.to_string(), "invalid `cap`: must not be negative");
}

#[test]
fn rates_from_text_or_parts() {
    let r = RateSpec::Parts {
        count: Some(5.0),
        per: Some(1_000),
    };
    assert_eq!(r.build(Host::Python).unwrap(), Rate::new(5, 1_000).unwrap());
    for text in ["x/m", "3/y"] {
        let e = RateSpec::Text(text.into()).build(Host::Node).unwrap_err();
        assert_eq!(e.arg(), "rate");
    }
    let e = RateSpec::Parts {
        count: Some(-1.0),
        per: Some(1_000),
    }
    .build(Host::Node)
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid `rate`: `count` must be a whole number, 0 or more"
    );
    let e = RateSpec::Parts {
        count: Some(1.0),
        per: None,
    }
    .build(Host::Python)
    .unwrap_err();
    assert_eq!(e.to_string(), "invalid `rate`: needs `count` and `per`");
    let e = RateSpec::Parts {
        count: Some(1.0),
        per: Some(i64::MAX),
    }
    .build(Host::Python)
    .unwrap_err();
    assert!(e.why.contains("292 years") && !e.why.contains("ms"), "{e}");
}

#[test]
fn send_options_resolve_relative_instants_once() {
    let mut reads = 0;
    let o = SendSpec {
        eta: Some(When::In(500)),
        countdown: Some(7),
        expires: Some(When::In(1_000)),
        queue: Some("q".into()),
        priority: Some(9.0),
        id: Some("x".into()),
        concurrency_key: None,
        dedupe_key: None,
        dedupe_ttl: None,
    }
    .options(Host::Python, || {
        reads += 1;
        10_000
    })
    .unwrap();
    assert_eq!(reads, 1);
    assert_eq!(o.eta, Some(10_500));
    assert_eq!(o.expires, Some(11_000));
    assert_eq!(o.countdown, Some(7));
    assert_eq!(o.priority, Some(9));
    assert_eq!(
        (o.queue.as_deref(), o.id.as_deref()),
        (Some("q"), Some("x"))
    );

    let mut read = false;
    let o = SendSpec {
        eta: Some(When::At(42)),
        ..SendSpec::default()
    }
    .options(Host::Node, || {
        read = true;
        0
    })
    .unwrap();
    assert_eq!(o.eta, Some(42));
    assert!(!read, "an absolute instant needs no clock");
    assert_eq!(
        SendSpec::default().options(Host::Node, || 0).unwrap(),
        Options::default()
    );
}

#[test]
fn priorities_one_text_in_every_host() {
    for host in [Host::Python, Host::Node] {
        for bad in [-1.0, 2.5, 256.0, f64::NAN] {
            let e = SendSpec {
                priority: Some(bad),
                ..SendSpec::default()
            }
            .options(host, || 0)
            .unwrap_err();
            assert_eq!(e.to_string(), "invalid `priority`: must be 0 to 9");
        }
        let o = Options {
            priority: Some(10),
            ..Options::default()
        };
        assert_eq!(
            check_options(host, &o).unwrap_err().to_string(),
            "invalid `priority`: must be 0 to 9"
        );
        let o = Options {
            queue: Some(String::new()),
            ..Options::default()
        };
        assert_eq!(check_options(host, &o).unwrap_err().arg(), "queue");
    }
}

#[test]
fn names_follow_the_host() {
    assert_eq!(Host::Node.spell("acks_late"), "acksLate");
    assert_eq!(Host::Node.spell("ignore_result"), "ignoreResult");
    assert_eq!(Host::Node.spell("task_id"), "id");
    assert_eq!(Host::Node.spell("evict_every"), "evictEvery");
    assert_eq!(Host::Python.spell("acks_late"), "acks_late");
    assert_eq!(Host::Rust.spell("task_id"), "task_id");
    let e = SpecError::policy(
        Host::Node,
        PolicyError {
            arg: "ignore_result",
            why: "x".into(),
        },
    );
    assert_eq!(e.to_string(), "invalid `ignoreResult`: x");
    let r: Refused = e.into();
    assert_eq!(r.code(), "INVALID");
}

#[test]
fn workers_default_and_check() {
    let c = WorkerSpec::default().build(Host::Node).unwrap();
    let d = WorkerConfig::default();
    assert_eq!(
        (c.queues, c.concurrency, c.prefetch),
        (d.queues, d.concurrency, d.prefetch)
    );
    let c = WorkerSpec {
        queues: Some(vec!["a".into()]),
        concurrency: Some(2.0),
        prefetch: Some(0.0),
        name: Some("w".into()),
        ..WorkerSpec::default()
    }
    .build(Host::Python)
    .unwrap();
    assert_eq!(c.queues, ["a"]);
    assert_eq!((c.concurrency, c.prefetch), (2, Some(0)));
    assert_eq!(c.name.as_deref(), Some("w"));
    for bad in [0.0, -1.0, 1.5] {
        let e = WorkerSpec {
            concurrency: Some(bad),
            ..WorkerSpec::default()
        }
        .build(Host::Node)
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid `concurrency`: must be a whole number, at least 1"
        );
    }
    let e = WorkerSpec {
        prefetch: Some(-1.0),
        ..WorkerSpec::default()
    }
    .build(Host::Python)
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid `prefetch`: must be a whole number, 0 or more"
    );
}

#[test]
fn the_process_pool_is_asked_for_in_the_callers_words() {
    let spec = || WorkerSpec {
        time_limit: Some(1_000),
        ..WorkerSpec::default()
    };
    let node = spec().build(Host::Node).unwrap_err().to_string();
    assert!(node.starts_with("invalid `timeLimit`: "), "{node}");
    assert!(
        node.contains("(pool: 'process')") && node.contains("use `softTimeLimit`"),
        "{node}"
    );
    let python = spec().build(Host::Python).unwrap_err().to_string();
    assert!(python.starts_with("invalid `time_limit`: "), "{python}");
    assert!(
        python.contains("(pool=\"process\")") && python.contains("use `soft_time_limit`"),
        "{python}"
    );
    // A per-child limit too.
    let spec = || WorkerSpec {
        max_tasks_per_child: Some(3.0),
        ..WorkerSpec::default()
    };
    let node = spec().build(Host::Node).unwrap_err().to_string();
    assert_eq!(
        node,
        "invalid `maxTasksPerChild`: applies to the process pool only (pool: 'process')"
    );
    let python = spec().build(Host::Python).unwrap_err().to_string();
    assert!(python.ends_with("(pool=\"process\")"), "{python}");
}

#[test]
fn a_prefetch_multiplier_is_celerys() {
    let spec = |p: Option<f64>, m: f64| WorkerSpec {
        concurrency: Some(3.0),
        prefetch: p,
        prefetch_multiplier: Some(m),
        ..WorkerSpec::default()
    };
    assert_eq!(
        spec(None, 2.0).build(Host::Python).unwrap().prefetch,
        Some(6)
    );
    assert_eq!(
        spec(Some(5.0), 2.0).build(Host::Python).unwrap().prefetch,
        Some(5)
    );
    for bad in [0.0, -1.0, 0.5] {
        let e = spec(None, bad).build(Host::Python).unwrap_err();
        assert!(e.to_string().contains("prefetch_multiplier"), "{e}");
        assert!(
            e.to_string()
                .contains("Celery's 0, no limit, is not supported"),
            "{e}"
        );
    }
}

#[test]
fn limits() {
    assert_eq!(limit(Host::Python, None, 100).unwrap(), 100);
    assert_eq!(limit(Host::Node, Some(3.0), 100).unwrap(), 3);
    assert_eq!(limit(Host::Python, Some(1e300), 0).unwrap(), usize::MAX);
    for bad in [-1.0, 0.5, f64::INFINITY] {
        assert_eq!(
            limit(Host::Node, Some(bad), 0).unwrap_err().to_string(),
            "invalid `limit`: must be a whole number, 0 or more"
        );
    }
}

#[test]
fn names_must_not_be_empty() {
    assert!(name(Host::Node, "t").is_ok());
    assert_eq!(
        name(Host::Python, "").unwrap_err().to_string(),
        "invalid `name`: must not be empty"
    );
}

#[test]
fn task_limits_are_taken_and_checked_in_each_spelling() {
    use crate::task::policy::RateScope;
    let p = PolicySpec {
        rate: Some(RateSpec::Text("100/s".into())),
        rate_scope: Some("global".into()),
        concurrency_limit: Some(3.0),
        ..PolicySpec::default()
    }
    .build(Host::Python)
    .unwrap();
    assert_eq!(p.rate_scope, RateScope::Global);
    assert_eq!(p.concurrency_limit, Some(3));
    for (host, scope, limit) in [
        (Host::Python, "rate_scope", "concurrency_limit"),
        (Host::Node, "rateScope", "concurrencyLimit"),
    ] {
        let e = PolicySpec {
            rate: Some(RateSpec::Text("1/s".into())),
            rate_scope: Some("cluster".into()),
            ..PolicySpec::default()
        }
        .build(host)
        .unwrap_err();
        assert_eq!(e.arg(), scope);
        assert!(e.why.contains("\"worker\" or \"global\""), "{e}");
        let e = PolicySpec {
            rate_scope: Some("global".into()),
            ..PolicySpec::default()
        }
        .build(host)
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("invalid `{scope}`: \"global\" needs a `rate`")
        );
        for bad in [0.0, -1.0, 1.5, f64::NAN] {
            let e = PolicySpec {
                concurrency_limit: Some(bad),
                ..PolicySpec::default()
            }
            .build(host)
            .unwrap_err();
            assert_eq!(e.to_string(), format!("invalid `{limit}`: {AT_LEAST_ONE}"));
        }
    }
    let send = |s: SendSpec, host| s.options(host, || 0);
    let o = send(
        SendSpec {
            concurrency_key: Some("cust-7".into()),
            dedupe_key: Some("k".into()),
            ..SendSpec::default()
        },
        Host::Python,
    )
    .unwrap();
    assert_eq!(o.concurrency_key.as_deref(), Some("cust-7"));
    assert_eq!(o.dedupe_ttl, Some(DEDUPE_TTL), "the default ttl");
    for (host, ttl, key, ckey) in [
        (Host::Python, "dedupe_ttl", "dedupe_key", "concurrency_key"),
        (Host::Node, "dedupeTtl", "dedupeKey", "concurrencyKey"),
    ] {
        let e = send(
            SendSpec {
                dedupe_ttl: Some(1000),
                ..SendSpec::default()
            },
            host,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), format!("invalid `{ttl}`: needs a `{key}`"));
        for bad in [0, -5] {
            let e = send(
                SendSpec {
                    dedupe_key: Some("k".into()),
                    dedupe_ttl: Some(bad),
                    ..SendSpec::default()
                },
                host,
            )
            .unwrap_err();
            assert_eq!(e.to_string(), format!("invalid `{ttl}`: must be positive"));
        }
        for (field, name) in [(0, key), (1, ckey)] {
            let mut s = SendSpec::default();
            if field == 0 {
                s.dedupe_key = Some(String::new());
            } else {
                s.concurrency_key = Some(String::new());
            }
            let e = send(s, host).unwrap_err();
            assert_eq!(e.to_string(), format!("invalid `{name}`: {NOT_EMPTY}"));
        }
    }
}

#[test]
fn worker_queues_are_split_at_commas_and_must_name_one() {
    let built = |q: Vec<&str>| {
        WorkerSpec {
            queues: Some(q.into_iter().map(String::from).collect()),
            ..WorkerSpec::default()
        }
        .build(Host::Python)
    };
    assert_eq!(
        built(vec![" a, b ", "c,,"]).unwrap().queues,
        ["a", "b", "c"]
    );
    for none in [vec![], vec!["", " , "]] {
        let e = built(none).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid `queues`: must name at least one queue"
        );
    }
    let e = WorkerSpec {
        queues: Some(vec![",".into()]),
        ..WorkerSpec::default()
    }
    .build(Host::Node)
    .unwrap_err();
    assert!(e.to_string().contains("queues"), "{e}");
}

#[test]
fn a_send_option_key_is_one_of_nine_as_the_host_spells_it() {
    for k in SEND_OPTIONS {
        assert_eq!(send_option_key(Host::Python, "t", k), Ok(()));
        assert_eq!(
            send_option_key(Host::Node, "t", Host::Node.spell(k)),
            Ok(())
        );
    }
    assert_eq!(
        send_option_key(Host::Python, "t", "typo").unwrap_err(),
        "t: unexpected option 'typo' (expected one of eta, countdown, expires, queue, \
         priority, task_id, concurrency_key, dedupe_key, dedupe_ttl)"
    );
    // Node spells the id `id` and the rest in camelCase, and quotes with `"`.
    assert_eq!(
        send_option_key(Host::Node, "t", "task_id").unwrap_err(),
        "t: unexpected option \"task_id\" (expected one of eta, countdown, expires, queue, \
         priority, id, concurrencyKey, dedupeKey, dedupeTtl)"
    );
}

#[test]
fn a_refused_target_names_its_option_as_the_host_spells_it() {
    use crate::broker::TargetError;
    let e = TargetError::Invalid {
        arg: "visibility_timeout",
        why: "must be positive",
    };
    assert_eq!(
        Host::Node.target_refused(&e),
        "invalid `visibilityTimeout`: must be positive"
    );
    assert_eq!(Host::Python.target_refused(&e), e.to_string());
    let e = TargetError::Invalid {
        arg: "master_name",
        why: "needed",
    };
    assert_eq!(
        Host::Node.target_refused(&e),
        "invalid `masterName`: needed"
    );
    let e = TargetError::Invalid {
        arg: "lease",
        why: "must be positive",
    };
    assert_eq!(
        Host::Node.target_refused(&e),
        "invalid `lease`: must be positive"
    );
    let e = TargetError::Url("bad url".into());
    assert_eq!(Host::Node.target_refused(&e), "bad url");
}

#[test]
fn a_stop_grace_defaults_and_is_never_negative() {
    use std::time::Duration;
    assert_eq!(grace(None), Duration::from_millis(GRACE as u64));
    assert_eq!(grace(Some(1500)), Duration::from_millis(1500));
    assert_eq!(grace(Some(-5)), Duration::ZERO);
}

#[test]
fn a_result_wait_is_for_ever_or_never_negative() {
    use std::time::Duration;
    assert_eq!(wait(None), None);
    assert_eq!(wait(Some(1500)), Some(Duration::from_millis(1500)));
    assert_eq!(wait(Some(-5)), Some(Duration::ZERO));
}

#[test]
fn process_and_prefork_name_the_process_pool() {
    assert!(is_process_pool("process"));
    assert!(is_process_pool("prefork"));
    for other in ["threads", "Process", "solo", ""] {
        assert!(!is_process_pool(other), "{other}");
    }
}
