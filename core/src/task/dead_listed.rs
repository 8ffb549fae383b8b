//! The dead letters of an app's queues, asked of the app. Listing and
//! counting are its broker's inspector's ([`Inspector`]); an app whose
//! broker has no inspector keeps no dead letters it can show, so it lists
//! none and counts 0. Decided here once, rather than by each binding
//! checking for an inspector.
//!
//! [`Inspector`]: super::spec::Inspector

use super::{App, DeadLetter, Refused};

/// The dead letters of `queue`, newest first, at most `limit`: none when
/// the app's broker has no inspector.
pub async fn dead_letters(
    app: &App,
    queue: &str,
    limit: usize,
) -> Result<Vec<DeadLetter>, Refused> {
    match app.inspector() {
        Some(i) => i.dead_letters(queue, limit).await,
        None => Ok(Vec::new()),
    }
}

/// How many dead letters `queue` keeps now: 0 when the app's broker has no
/// inspector.
pub async fn dead_count(app: &App, queue: &str) -> Result<u64, Refused> {
    match app.inspector() {
        Some(i) => i.dead_count(queue).await,
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::broker::memory::MemoryBroker;
    use crate::task::spec::{Inspector, QueueInfo};
    use crate::task::{BoxFuture, Clock, Seams, State, SystemClock};

    #[tokio::test]
    async fn no_inspector_lists_none_and_counts_zero() {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let b = MemoryBroker::new(clock.clone());
        let seams = Seams {
            broker: b.clone(),
            backend: Some(b),
            counter: None,
            inspector: None,
        };
        let app = App::new(seams, clock);
        assert!(dead_letters(&app, "default", 10).await.unwrap().is_empty());
        assert_eq!(dead_count(&app, "default").await.unwrap(), 0);
    }

    /// An inspector that keeps seven dead letters on every queue.
    struct Seven;

    impl Inspector for Seven {
        fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueInfo>, Refused>> {
            Box::pin(async { Ok(Vec::new()) })
        }
        fn counts(&self) -> BoxFuture<'_, Result<BTreeMap<State, u64>, Refused>> {
            Box::pin(async { Ok(BTreeMap::new()) })
        }
        fn dead_count<'a>(&'a self, _queue: &'a str) -> BoxFuture<'a, Result<u64, Refused>> {
            Box::pin(async { Ok(7) })
        }
    }

    #[tokio::test]
    async fn an_inspector_is_asked() {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let b = MemoryBroker::new(clock.clone());
        let seams = Seams {
            broker: b,
            backend: None,
            counter: None,
            inspector: Some(Arc::new(Seven)),
        };
        let app = App::new(seams, clock);
        assert_eq!(dead_count(&app, "default").await.unwrap(), 7);
        assert!(dead_letters(&app, "default", 10).await.unwrap().is_empty());
    }
}
