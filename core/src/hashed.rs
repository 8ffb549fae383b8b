//! The hash maps on a run's path, keyed with foldhash instead of SipHash.
//!
//! Why: a run looks up its task's registration, metrics and tuning by name,
//! its host call by number, and on the memory broker its queue, claim and
//! result by id — each a SipHash of the key, ~4 % of a Rust no-op drain's
//! samples on the memory broker. foldhash's quality hasher is seeded per
//! map from a per-process random seed, so keys a user chooses (task ids,
//! queue names) cannot be picked to collide, as with SipHash's; it hashes a
//! short key several times faster.

/// A `HashMap` keyed with foldhash (see the module docs).
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::quality::RandomState>;

/// A `HashSet` keyed with foldhash (see the module docs).
pub(crate) type HashSet<T> = std::collections::HashSet<T, foldhash::quality::RandomState>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_key_as_std_maps_do() {
        let mut m: HashMap<String, u32> = HashMap::default();
        m.insert("a".into(), 1);
        m.insert("b".into(), 2);
        assert_eq!(m.get("a"), Some(&1));
        assert_eq!(m.remove("b"), Some(2));
        assert_eq!(m.get("b"), None);
        let mut s: HashSet<u64> = HashSet::default();
        assert!(s.insert(7));
        assert!(!s.insert(7));
        assert!(s.contains(&7));
    }

    #[test]
    fn two_maps_are_seeded_apart() {
        use std::hash::BuildHasher;
        let (a, b) = (
            foldhash::quality::RandomState::default(),
            foldhash::quality::RandomState::default(),
        );
        // Per-map seeds: the same key hashes differently in two maps (a
        // collision found in one does not carry to another).
        let differ = (0..8u64).any(|k| a.hash_one(k) != b.hash_one(k));
        assert!(differ);
        // And one map's hash of a key is stable.
        assert_eq!(a.hash_one("id"), a.hash_one("id"));
    }
}
