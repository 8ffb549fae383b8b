//! Chord arrivals: parts are counted in a set (SADD), so a redelivered part
//! cannot count twice, and the arrival that completes the chord enqueues the
//! callback in the same script.
//!
//! Why one script: the count and the callback's publish are all or nothing;
//! no crash between them can lose or double the callback.

use super::RedisBroker;
use super::options::check_name;
use super::scripts::evalsha;
use super::wire::{int, step_arg, step_of};
use crate::task::message::Message;
use crate::task::spec::Joined;
use crate::task::state::Refused;

impl RedisBroker {
    pub(super) async fn arrive_inner(
        &self,
        key: &str,
        part: &str,
        size: u32,
        callback: &Message,
    ) -> Result<Joined, Refused> {
        check_name("queue", &callback.queue)?;
        let mut p = ::redis::pipe();
        self.register(&mut p, &[callback.queue.as_str()]);
        p.add_command(
            evalsha(&self.scripts.arrive, &self.base(&callback.queue))
                .arg(key)
                .arg(part)
                .arg(size)
                .arg(self.result_ms)
                .arg(self.now_arg())
                .arg(step_arg(step_of(callback)))
                .arg(callback.eta.map(|e| e.to_string()).unwrap_or_default())
                .arg(callback.to_json())
                .clone(),
        );
        let got = self.run(&p, true).await?;
        Ok(match got.last().and_then(int) {
            Some(2) => Joined::Sent,
            _ => Joined::Waiting,
        })
    }
}
