//! Every Lua script of the layout, built in one place, and their loading.
//!
//! Why one place: each script is loaded once per connection (`SCRIPT LOAD`)
//! and called by its SHA; most share the `lua/common.lua` prelude, so how a
//! script's source is put together is decided here and nowhere else.

use crate::broker::link::Conn;
use ::redis::{Cmd, RedisError};

use super::RedisBroker;

pub(super) const COMMON: &str = include_str!("lua/common.lua");

pub(super) struct Script {
    pub(super) src: String,
    pub(super) sha: String,
}

impl Script {
    pub(super) fn new(body: &str, common: bool) -> Script {
        let src = if common {
            format!("{COMMON}\n{body}")
        } else {
            body.to_string()
        };
        let sha = ::redis::Script::new(&src).get_hash().to_string();
        Script { src, sha }
    }
}

pub(super) struct Scripts {
    pub(super) publish: Script,
    pub(super) claim: Script,
    pub(super) settle: Script,
    pub(super) recover: Script,
    pub(super) sweep: Script,
    pub(super) arrive: Script,
    pub(super) stats: Script,
    pub(super) store: Script,
    pub(super) bury: Script,
    pub(super) dead: Script,
    pub(super) holders: Script,
    pub(super) beat: Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            publish: Script::new(include_str!("lua/publish.lua"), true),
            claim: Script::new(include_str!("lua/claim.lua"), true),
            settle: Script::new(include_str!("lua/settle.lua"), true),
            recover: Script::new(include_str!("lua/recover.lua"), true),
            sweep: Script::new(include_str!("lua/sweep.lua"), true),
            arrive: Script::new(include_str!("lua/arrive.lua"), true),
            stats: Script::new(include_str!("lua/stats.lua"), true),
            store: Script::new(include_str!("lua/store.lua"), false),
            bury: Script::new(include_str!("lua/bury.lua"), true),
            dead: Script::new(crate::broker::lua::OWN_DEAD, true),
            holders: Script::new(include_str!("lua/holders.lua"), true),
            beat: Script::new(include_str!("lua/beat.lua"), true),
        }
    }

    pub(super) fn all(&self) -> [&Script; 12] {
        [
            &self.publish,
            &self.claim,
            &self.settle,
            &self.recover,
            &self.sweep,
            &self.arrive,
            &self.stats,
            &self.store,
            &self.bury,
            &self.dead,
            &self.holders,
            &self.beat,
        ]
    }
}

/// `EVALSHA sha 1 key args…`.
pub(super) fn evalsha(s: &Script, key: &str) -> Cmd {
    let mut c = ::redis::cmd("EVALSHA");
    c.arg(&s.sha).arg(1).arg(key);
    c
}

impl RedisBroker {
    pub(super) async fn load_scripts(&self, c: &mut Conn) -> Result<(), RedisError> {
        let mut p = ::redis::pipe();
        for s in self.scripts.all() {
            p.cmd("SCRIPT").arg("LOAD").arg(&s.src).ignore();
        }
        p.exec_async(c).await
    }
}
