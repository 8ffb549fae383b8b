//! The Lua both Redis layouts share, and the one way a script is put
//! together from it.
//!
//! Redis runs a script as one text with no `require`, so a piece two
//! scripts need is either pasted into each (and the copies drift: the
//! dead-letter re-queue was once written twice, a line apart) or prepended
//! to each at build time. [`script!`] does the latter with `include_str!`
//! and `concat!`, so the whole text of every script is a `&'static str`
//! fixed at compile time and its SHA1 is the same in every process.
//!
//! The pieces define `local function`s and nothing else: a piece runs no
//! Redis command of its own, so prepending one changes no script's effect.
//! - `dead.lua` — dead letters (`<header JSON>\n<bytes>`): split a letter,
//!   purge a list, re-queue letters oldest first by id. What "put it back"
//!   means is the layout's own (a step list on Celery's layout, a marked
//!   payload on headway's), passed in as a function.
//! - `unacked.lua` — kombu's `unacked` hash and `unacked_index` set (the
//!   Celery layout's holds): the entry a hold writes, and the compare-and-
//!   take-out every settle, restore and burial starts with.

/// A script's source: the named prelude pieces (files of this directory,
/// without `.lua`), each followed by a newline, then the script's own file
/// (a path relative to the file the macro is used in, as `include_str!`).
///
/// `script!(dead, unacked; "lua/claim.lua")`.
macro_rules! script {
    ($($piece:ident),* ; $body:literal) => {
        concat!(
            $(
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/src/broker/lua/",
                    stringify!($piece),
                    ".lua"
                )),
                "\n",
            )*
            include_str!($body)
        )
    };
}
pub(crate) use script;

/// The own layout's dead-letter script (re-queue and purge), on the shared
/// piece. The own layout prepends its common part to it, as to every
/// script of its own.
pub(crate) const OWN_DEAD: &str = script!(dead; "../redis/lua/dead.lua");
