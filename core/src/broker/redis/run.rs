//! The runner every command of the layout goes through: the shared
//! [`Link`](crate::broker::link::Link) (reconnects, waits through a short
//! outage), plus what is this layout's own — a Redis that restarted has
//! lost the scripts, so NOSCRIPT reloads them and runs the call again.

use std::sync::atomic::{AtomicBool, Ordering};

use ::redis::{Cmd, Pipeline, Value};

use super::RedisBroker;
use crate::task::state::Refused;

impl RedisBroker {
    /// Runs a pipeline and answers its replies. NOSCRIPT (a restarted Redis)
    /// reloads the scripts and runs it again, once; a connection error drops
    /// the connection, and with `patient` the call waits for the link to
    /// come back for up to `patience`. Every error is shown with the URL
    /// redacted.
    pub(super) async fn run(&self, p: &Pipeline, patient: bool) -> Result<Vec<Value>, Refused> {
        let reloaded = AtomicBool::new(false);
        self.link
            .patiently(patient, |mut c| {
                let reloaded = &reloaded;
                async move {
                    match p.query_async::<Vec<Value>>(&mut c).await {
                        Err(e)
                            if e.code() == Some("NOSCRIPT")
                                && !reloaded.swap(true, Ordering::SeqCst) =>
                        {
                            self.load_scripts(&mut c).await?;
                            p.query_async::<Vec<Value>>(&mut c).await
                        }
                        r => r,
                    }
                }
            })
            .await
    }

    pub(super) async fn one(&self, c: Cmd, patient: bool) -> Result<Value, Refused> {
        let mut p = ::redis::pipe();
        p.add_command(c);
        Ok(self.run(&p, patient).await?.pop().unwrap_or(Value::Nil))
    }
}
