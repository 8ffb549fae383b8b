//! The context of a direct call: a body called here and now, outside any
//! worker (Python's `task(...)`, as Celery's `Task.__call__`).

use serde_json::Map;

use super::Context;

impl Context {
    /// A run of its own outside any worker: `id`, `name` and `queue` as the
    /// caller says, started at `now` (ms since the epoch). It is the first
    /// attempt and also the last (nothing retries a direct call), with no
    /// keyword arguments of its own, no canvas above it, no time limits, no
    /// worker, no trace and no recorder (`update_state` records nothing).
    pub fn direct(id: String, name: String, queue: String, now: i64) -> Context {
        Context {
            id,
            name,
            queue,
            retries: 0,
            attempt: 1,
            last: true,
            now,
            kwargs: Map::new(),
            root_id: None,
            parent_id: None,
            soft_time_limit: None,
            time_limit: None,
            worker: String::new(),
            trace: None,
            rule: Default::default(),
            recorder: Default::default(),
            extras: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_direct_call_is_a_first_and_last_attempt_of_its_own() {
        let c = Context::direct("i".into(), "t".into(), "q".into(), 1_500);
        assert_eq!(
            (c.id.as_str(), c.name.as_str(), c.queue.as_str()),
            ("i", "t", "q")
        );
        assert_eq!((c.retries, c.attempt, c.last, c.now), (0, 1, true, 1_500));
        assert!(c.kwargs.is_empty() && c.worker.is_empty());
        assert!(c.root_id.is_none() && c.parent_id.is_none());
        assert_eq!((c.soft_time_limit, c.time_limit), (None, None));
        assert!(c.trace.is_none() && c.extras.is_none());
        // A failure of a direct call is final: nothing goes again.
        assert_eq!(
            c.state_after(Some(&super::super::Failure::new("E", "m"))),
            "FAILURE"
        );
    }
}
