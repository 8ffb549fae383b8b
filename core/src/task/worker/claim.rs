//! The claim loop: what keeps a worker fed.
//!
//! It claims in batches, refilling a quarter of the prefetch at a time
//! rather than one message per run finished (a claim is a round trip and a
//! script under load), backs off
//! while the broker is away, claims nothing while every runner thread is
//! stuck, and checks a whole batch for revokes in one lookup. Each claimed
//! message then becomes a run of its own (`run`); the loop never waits on
//! one.
//!
//! A claimed batch's runs share one spawned task (a `FuturesUnordered`),
//! not a task each: a task per message cost a spawn, its place in the
//! runtime's task list and a wake-up through the scheduler for every
//! answer it awaited (the early ack's round, the body's call, the store's
//! round), where one batch's answers now wake its one task once (a Node
//! no-op drain on Redis at the defaults: median 46.5k → 53.1k/s, 23.8 →
//! 20.4 µs of CPU a run; on the memory broker send → settled 78-102k →
//! 113-118k/s). The loop counts the runs it holds itself (claimed less
//! done).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::run::process;
use super::writer::{Writer, direct, write_loop};
use super::{Worker, stop, warn};
use crate::flow::{Backoff, Jitter, MILLI};
use crate::task::runners::{self, Gate};
use crate::task::state::Refused;

/// How long one claim waits for a message before the loop looks round.
const POLL: Duration = Duration::from_millis(200);

impl Worker {
    /// Runs until stopped. Resolves once every message it held is settled or
    /// given back.
    pub async fn run(&self) -> Result<(), Refused> {
        let s = &self.shared;
        if s.running.swap(true, Ordering::SeqCst) {
            return Err(Refused::Invalid("this worker is already running".into()));
        }
        if let Some(p) = &s.procs
            && let Err(e) = p.start().await
        {
            s.running.store(false, Ordering::SeqCst);
            return Err(e);
        }
        let mut set: JoinSet<()> = JoinSet::new();
        let mut stopping = s.stopping.subscribe();
        let mut reshaped = s.reshaped.subscribe();
        let (writes_tx, writes_rx) = mpsc::unbounded_channel();
        let (takes_tx, takes_rx) = mpsc::unbounded_channel();
        // Shared by the runs, each holding it (an `Arc`: a copy per run
        // was five reference counts to raise and lower).
        let writer = std::sync::Arc::new(Writer {
            writes: writes_tx,
            takes: takes_tx,
            cancel: s.cancel.subscribe(),
            name: s.name.clone().into(),
            direct: direct(&s.app),
            acks: s.app.broker().acks_at_once().then(|| s.app.clone()),
        });
        let writes = tokio::spawn(write_loop(s.app.clone(), writes_rx, takes_rx));
        let reconnect = Backoff::new(100 * MILLI, 2.0, 10_000 * MILLI, i32::MAX, Jitter::Full)
            .expect("valid backoff");
        let mut failures = 0i32;
        let clock = s.app.clock().clone();
        let gate = s.gate.get_or_init(|| Gate::of(&s.app)).clone();
        s.deck.set_gate(gate.clone());
        let weak = std::sync::Arc::downgrade(&self.shared);
        let load: runners::LoadOf = std::sync::Arc::new(move || {
            weak.upgrade()
                .map_or_else(runners::Load::default, |s| runners::Load {
                    active: s.active_count(),
                    held: s.held() as u64,
                })
        });
        let me = self.clone();
        let stop: runners::StopOf = std::sync::Arc::new(move || {
            me.stop(Duration::from_millis(crate::task::specs::GRACE as u64))
        });
        let mut reach = super::reach::Reach::new(s.reach);
        // What the broker was last told of the prefetch, and for which
        // queues ([`Broker::reach`](crate::task::spec::Broker::reach)).
        let mut told: (Vec<String>, usize) = (Vec::new(), 0);
        let started = std::time::Instant::now();
        let _listed = runners::list(&s.app, &s.name, gate.clone(), load, stop, self.clone());
        loop {
            while set.try_join_next().is_some() {}
            if *stopping.borrow() {
                break;
            }
            if !gate.healthy() {
                warn(&s.name, &gate.health().why().unwrap_or_default());
                tokio::select! {
                    _ = gate.until_healthy() => warn(&s.name, "a runner is free again; claiming again"),
                    _ = stopping.changed() => {}
                }
                continue;
            }
            // The prefetch counts the messages not run yet or running, as
            // Celery's does with its early ack: a run whose body is over
            // frees its place while its result is stored, so the slots are
            // not left waiting on a store's round trip and a claim's (a
            // no-op Redis drain at the defaults kept its four slots busy a
            // quarter of the time when it counted every unsettled run).
            // Twice the prefetch bounds what waits to be stored.
            // Refill in quarters: a claim per run finished would be a round
            // trip (and a claim script) per message under load, and
            // waiting for half the prefetch to empty left the slots idle
            // while the claim was on its way (a no-op Redis drain at the
            // defaults: 32-33k/s in halves, 34-39k/s in quarters, 32-37k/s
            // in eighths). An idle worker claims at once, whatever it holds.
            let floor = s.prefetch.load(Ordering::SeqCst);
            let prefetch = reach.prefetch(
                floor,
                started.elapsed().as_nanos() as u64,
                s.done.load(Ordering::Relaxed),
            );
            let held = s.held();
            let reserved = held.saturating_sub(s.settling.load(Ordering::SeqCst));
            let room = prefetch
                .saturating_sub(reserved)
                .min((2 * prefetch).saturating_sub(held));
            if room == 0 || (reserved > 0 && room < prefetch.div_ceil(4)) {
                tokio::select! {
                    _ = s.freed.notified() => {}
                    _ = stopping.changed() => {}
                    _ = reshaped.changed() => {}
                }
                continue;
            }
            let queues = s.queues();
            if told.0 != queues || super::reach::worth_telling(told.1, prefetch, floor) {
                s.app.broker().reach(&queues, prefetch);
                told = (queues.clone(), prefetch);
            }
            let got = tokio::select! {
                biased;
                _ = stopping.changed() => continue,
                // A claim cut short is handed back, as at a stop.
                _ = gate.until_unhealthy() => continue,
                // New queues or prefetch: claim with them at once.
                _ = reshaped.changed() => continue,
                r = s.app.broker().claim(&queues, room, POLL) => r,
            };
            let batch = match got {
                Ok(b) => {
                    if failures > 0 {
                        warn(&s.name, "broker is back; consuming again");
                        failures = 0;
                    }
                    b
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = reconnect.delay(
                        failures,
                        crate::task::policy::seeded(&s.name, failures as u32),
                        0,
                    );
                    warn(&s.name, &format!("{e}; retrying in {} ms", wait / MILLI));
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_nanos(wait as u64)) => {}
                        _ = stopping.changed() => {}
                    }
                    continue;
                }
            };
            if batch.is_empty() {
                if clock.is_virtual()
                    && set.is_empty()
                    && let Ok(Some(eta)) = s.app.broker().next_eta(&queues).await
                {
                    clock.sleep_until(eta).await;
                }
                continue;
            }
            // Receipt checks the broker did not do in its claim, for the
            // whole batch at once: one revoked lookup, not one per message.
            // Early acks are each run's own, gathered by the writer (so this
            // loop claims again at once).
            let ask: Vec<String> = batch
                .iter()
                .filter(|c| c.revoked.is_none())
                .map(|c| c.delivery.message.id.clone())
                .collect();
            let mut looked = if ask.is_empty() {
                Vec::new()
            } else {
                match s.app.broker().revoked(&ask).await {
                    Ok(r) => r,
                    Err(_) => vec![false; ask.len()],
                }
            }
            .into_iter();
            let mut runs = FuturesUnordered::new();
            for c in batch {
                let rev = match c.revoked {
                    Some(r) => r,
                    None => looked.next().unwrap_or(false),
                };
                s.claimed.fetch_add(1, Ordering::Relaxed);
                let entered = s.enter(&c.delivery);
                let run = process(
                    self.shared.clone(),
                    writer.clone(),
                    Box::new(c.delivery),
                    rev,
                    entered,
                );
                runs.push(AssertUnwindSafe(run).catch_unwind());
            }
            let shared = self.shared.clone();
            set.spawn(async move {
                while let Some(r) = runs.next().await {
                    if r.is_err() {
                        // Its end was never counted: count it, so the
                        // loop's room is not short by one for ever.
                        shared.over();
                        warn(
                            &shared.name,
                            "a run panicked; its message is left to the broker's recovery",
                        );
                    }
                }
            });
        }
        stop::wind_down(s, &mut set).await;
        // What the broker claimed for this worker and it never took (a
        // claim still landing as it stopped) goes back to the queues now.
        if let Err(e) = s.app.broker().stopped(&s.queues()).await {
            warn(
                &s.name,
                &format!(
                    "could not give back unclaimed messages ({e}); the broker's recovery will"
                ),
            );
        }
        // Runners a remote `pool_grow` asked for go with the worker (the
        // host unstaffs what it staffed).
        if s.procs.is_none() {
            let now = s.concurrency.load(Ordering::SeqCst);
            gate.shrink(now.saturating_sub(s.configured));
        }
        // Every run is done: the writer finishes what it holds and ends.
        drop(writer);
        let _ = writes.await;
        if let Some(p) = &s.procs {
            p.close();
        }
        s.running.store(false, Ordering::SeqCst);
        // Unlisted first: the broker's `worker-offline`, where it sends
        // one, says no worker of the app runs here any more.
        drop(_listed);
        s.app.broker().worker_stopped().await;
        Ok(())
    }
}
