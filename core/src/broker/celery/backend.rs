//! Celery's Redis result backend behind headway's Backend seam:
//! `celery-task-meta-<id>`, stored with SETEX `result_expires` and
//! PUBLISHed on the key's channel so Celery's `AsyncResult.get()` wakes;
//! final states are never overwritten (`store.lua`). A wait subscribes to
//! that channel and re-reads the key when rung.

use std::time::Duration;

use super::{CeleryBroker, result};
use crate::task::clock::BoxFuture;
use crate::task::spec::Backend;
use crate::task::state::{Outcome, Refused};

/// How many results one store script call writes at most: a round's worth,
/// without one call holding Redis for long.
pub(super) const STORE_CHUNK: usize = 256;

impl CeleryBroker {
    pub(super) async fn fetch_raw(&self, id: &str) -> Result<Option<Vec<u8>>, Refused> {
        let (epoch, mut c) = self.link.conn().await?;
        match redis::cmd("GET")
            .arg(self.meta_key(id))
            .query_async(&mut c)
            .await
        {
            Ok(v) => Ok(v),
            Err(e) => Err(self.link.fail(epoch, &e)),
        }
    }

    pub(super) async fn fetch_outcome(&self, id: &str) -> Result<Option<Outcome>, Refused> {
        match self.fetch_raw(id).await? {
            None => Ok(None),
            Some(raw) => result::decode_meta(id, &raw)
                .map(Some)
                .map_err(|e| Refused::broker(crate::task::BrokerErrorKind::Data, e.to_string())),
        }
    }

    /// Stores `outcomes` (the seam's rule: never over a final state), one
    /// script call per `STORE_CHUNK`, in one pipeline.
    pub(super) async fn store_all(&self, outcomes: &[Outcome]) -> Result<(), Refused> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let ex = self.expires_secs();
        // One pipeline of EVALSHA, one round trip; a Redis that lost the
        // script (a restart) has it loaded again and the pipeline re-run.
        let mut p = redis::pipe();
        for chunk in outcomes.chunks(STORE_CHUNK) {
            let mut c = redis::cmd("EVALSHA");
            c.arg(self.scripts.store.get_hash()).arg(chunk.len());
            for o in chunk {
                c.arg(self.meta_key(&o.id));
            }
            c.arg(ex);
            for o in chunk {
                c.arg(result::encode_meta(o, None, None));
            }
            p.add_command(c).ignore();
        }
        let (p, script) = (&p, &self.scripts.store);
        self.link
            .patiently(true, |mut c| async move {
                match p.query_async::<()>(&mut c).await {
                    Err(e) if e.code() == Some("NOSCRIPT") => {
                        script.load_async(&mut c).await?;
                        p.query_async::<()>(&mut c).await
                    }
                    r => r,
                }
            })
            .await?;
        self.stored.notify_waiters();
        Ok(())
    }
}

impl Backend for CeleryBroker {
    fn store(&self, outcomes: Vec<Outcome>) -> BoxFuture<'_, Result<(), Refused>> {
        Box::pin(async move { self.store_all(&outcomes).await })
    }

    fn fetch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        Box::pin(async move { self.fetch_outcome(id).await })
    }

    fn wait<'a>(
        &'a self,
        id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Outcome>, Refused>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let channel = self.meta_key(id);
            let waiting = self.waiters.join(&channel);
            let bell = waiting.notify().clone();
            async {
                loop {
                    // Subscribed on the live connection (again, after a
                    // lost one); a refusal is covered by the slow re-read.
                    let _ = self.waiters.subscribe(&channel).await;
                    let rung = bell.notified();
                    tokio::pin!(rung);
                    rung.as_mut().enable();
                    let stored = self.stored.notified();
                    tokio::pin!(stored);
                    stored.as_mut().enable();
                    if let Some(o) = self.fetch_outcome(id).await?
                        && o.state.is_final()
                    {
                        return Ok(Some(o));
                    }
                    // Pub/sub wakes it; a slow re-read covers a subscriber
                    // that was reconnecting when the result was stored.
                    let poll = tokio::time::Instant::now() + Duration::from_secs(2);
                    tokio::select! {
                        _ = &mut rung => {}
                        _ = &mut stored => {}
                        _ = tokio::time::sleep_until(poll.min(deadline)) => {
                            if tokio::time::Instant::now() >= deadline {
                                return Ok(None);
                            }
                        }
                    }
                }
            }
            .await
        })
    }

    fn forget<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), Refused>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(());
            }
            let (epoch, mut c) = self.link.conn().await?;
            let mut del = redis::cmd("DEL");
            for id in ids {
                del.arg(self.meta_key(id));
            }
            del.query_async::<()>(&mut c)
                .await
                .map_err(|e| self.link.fail(epoch, &e))
        })
    }
}
