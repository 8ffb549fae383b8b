//! How deep a value may nest to travel as a task's arguments or result.
//!
//! A binding turns a host value (a Python list, a JS object) into JSON by
//! walking it. A value that contains itself never ends, and one nested
//! thousands deep overflows the thread's stack: either is a crash that takes
//! the process down, and with a worker every run it holds. So both bindings
//! refuse such values, at send and at a body's return, at the same depth and
//! with the same words — the limit is a rule of the queue, not of the
//! language that made the value.
//!
//! 100 levels: far beyond any payload worth sending, below serde_json's own
//! parse limit (128), so whatever is sent can be read back, and far below
//! what a thread's stack holds.

/// The most levels of containers a value may nest, counting its outermost
/// (the arguments' list, the kwargs' object, a result's own container) as
/// level 1.
pub const MAX_DEPTH: usize = 100;

/// Whether a container at `level` (the outermost is 1) nests too deep.
pub fn too_deep(level: usize) -> bool {
    level > MAX_DEPTH
}

/// The refusal of a container at `path` of `owner`'s value that nests past
/// [`MAX_DEPTH`].
pub fn too_deep_text(owner: &str, path: &str) -> String {
    format!("{owner}: {path} nests deeper than {MAX_DEPTH} levels, which JSON here cannot carry")
}

/// The refusal of a container at `path` that is `first`, one of its own
/// enclosing containers, again: a value that contains itself.
pub fn circular_text(owner: &str, path: &str, first: &str) -> String {
    format!(
        "{owner}: {path} is {first} again (a value that contains itself), which JSON cannot carry"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_and_its_words() {
        assert!(!too_deep(1));
        assert!(!too_deep(MAX_DEPTH));
        assert!(too_deep(MAX_DEPTH + 1));
        assert_eq!(
            too_deep_text("add", "args[0][0]"),
            "add: args[0][0] nests deeper than 100 levels, which JSON here cannot carry"
        );
        assert_eq!(
            circular_text("add", "args[0][0]", "args[0]"),
            "add: args[0][0] is args[0] again (a value that contains itself), which JSON cannot carry"
        );
    }
}
