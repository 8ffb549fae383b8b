//! Bytes put on a queue as another producer would put them.
//!
//! Why: quarantine and dead letters are about messages headway did not
//! write — a Celery producer's, a foreign client's, junk. Tests and tools
//! (the bindings' `testing.push_raw` / `testing.pushRaw`) need to put such
//! bytes on any broker without going through `publish`, which only writes
//! what it encoded itself. One enum here keeps the two bindings from each
//! deciding how.

use std::sync::Arc;

use super::celery::CeleryBroker;
use super::{MemoryBroker, RedisBroker};
use crate::task::Refused;

/// The concrete broker behind an app's seams.
#[derive(Clone)]
pub enum Raw {
    /// The in-process broker.
    Memory(Arc<MemoryBroker>),
    /// headway's own Redis layout.
    Native(Arc<RedisBroker>),
    /// Celery's Redis layout.
    Celery(Arc<CeleryBroker>),
}

impl Raw {
    /// Puts `raw` on `queue` unchecked: decoded when claimed, quarantined
    /// if it is not a message headway runs.
    pub async fn push(&self, queue: &str, raw: &[u8]) -> Result<(), Refused> {
        match self {
            Raw::Memory(b) => {
                b.push_raw(queue, raw);
                Ok(())
            }
            Raw::Native(b) => b.push_raw(queue, raw).await,
            Raw::Celery(b) => b.push_raw(queue, raw).await,
        }
    }
}
