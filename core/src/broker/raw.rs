//! Bytes put on a queue as another producer would put them.
//!
//! Why: quarantine and dead letters are about messages headway did not
//! write — a Celery producer's, a foreign client's, junk. Tests and tools
//! (the bindings' `testing.push_raw` / `testing.pushRaw`) need to put such
//! bytes on any broker without going through `publish`, which only writes
//! what it encoded itself. One method here keeps the two bindings from each
//! deciding how.

use super::target::Connected;
use crate::task::Refused;

/// The concrete broker behind an app's seams: what a target connected.
pub type Raw = Connected;

impl Connected {
    /// Puts `raw` on `queue` unchecked: decoded when claimed, quarantined
    /// if it is not a message headway runs.
    pub async fn push(&self, queue: &str, raw: &[u8]) -> Result<(), Refused> {
        match self {
            Connected::Memory(b) => {
                b.push_raw(queue, raw);
                Ok(())
            }
            Connected::Headway(b) => b.push_raw(queue, raw).await,
            Connected::Celery(b) => b.push_raw(queue, raw).await,
            Connected::Amqp(b) => b.push_raw(queue, raw).await,
            Connected::Rpc(_) => Err(Refused::Invalid(
                "rpc:// is a result store; push onto its broker".into(),
            )),
        }
    }
}
