//! The Lua scripts of the Celery layout. Each runs as one atomic step on the
//! server, where kombu uses a MULTI pipeline or a WATCH transaction. Every
//! script is a file under `lua/` (what it does, its KEYS and ARGV are
//! written there), put together with the shared prelude pieces it uses
//! (`crate::broker::lua`): the text Redis gets is fixed at compile time.

use redis::Script;

use crate::broker::lua::script;

/// The layout's scripts, hashed once per broker.
pub(super) struct Scripts {
    /// Pops envelopes and holds them in `unacked` in one step (`claim.lua`).
    pub claim: Script,
    /// Holds one envelope a BRPOP took (`hold.lua`).
    pub hold: Script,
    /// kombu's `restore_by_tag` as a compare-and-swap (`restore.lua`).
    pub restore: Script,
    /// Re-scores a live consumer's index entries (`rescore.lua`).
    pub rescore: Script,
    /// Releases `unacked_mutex` if still its owner's (`unlock.lua`).
    pub unlock: Script,
    /// Stores a round of results, never over a final one (`store.lua`).
    pub store: Script,
    /// A chord part's arrival (`arrive.lua`).
    pub arrive: Script,
    /// Sends a chord's callback once (`fire.lua`).
    pub fire: Script,
    /// Closes a chord whose callback another transport sends (`close.lua`).
    pub close: Script,
    /// Moves one message to the dead letters (`bury.lua`).
    pub bury: Script,
    /// Re-queues or purges dead letters (`dead.lua`).
    pub dead: Script,
    /// Beat single-fire (`beat.lua`).
    pub beat: Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            claim: Script::new(script!(unacked; "lua/claim.lua")),
            hold: Script::new(script!(unacked; "lua/hold.lua")),
            restore: Script::new(script!(unacked; "lua/restore.lua")),
            rescore: Script::new(script!(; "lua/rescore.lua")),
            unlock: Script::new(script!(; "lua/unlock.lua")),
            store: Script::new(script!(; "lua/store.lua")),
            arrive: Script::new(script!(; "lua/arrive.lua")),
            fire: Script::new(script!(; "lua/fire.lua")),
            close: Script::new(script!(; "lua/close.lua")),
            bury: Script::new(script!(unacked; "lua/bury.lua")),
            dead: Script::new(script!(dead; "lua/dead.lua")),
            beat: Script::new(script!(; "lua/beat.lua")),
        }
    }
}
