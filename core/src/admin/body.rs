//! How much body a request declares: the `Content-Length` rule an adapter
//! applies before reading, so that a request the core would refuse (413)
//! for its declared length is not read at all — the same rule in every
//! binding.

/// A request's declared body length: its first `Content-Length` header
/// (any case), trimmed, as a whole number of bytes; `None` when there is
/// none or it is no such number (the body as read decides then).
pub fn declared_length(headers: &[(String, String)]) -> Option<u64> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<u64>().ok())
}

/// Whether `headers` declare a body past `max` bytes: the core answers 413
/// whatever comes, so an adapter reads none of it.
pub fn declared_over(headers: &[(String, String)], max: usize) -> bool {
    declared_length(headers).is_some_and(|n| n > max as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_first_content_length_in_any_case_trimmed() {
        assert_eq!(declared_length(&h(&[("Content-Length", " 12 ")])), Some(12));
        assert_eq!(declared_length(&h(&[("content-length", "+7")])), Some(7));
        assert_eq!(
            declared_length(&h(&[("CONTENT-LENGTH", "3"), ("content-length", "9")])),
            Some(3)
        );
        assert_eq!(declared_length(&h(&[("host", "x")])), None);
    }

    #[test]
    fn an_unreadable_length_declares_nothing() {
        for v in ["", "-1", "1.5", "0x10", "1e3", "abc", "1_000"] {
            assert_eq!(declared_length(&h(&[("content-length", v)])), None, "{v:?}");
            assert!(!declared_over(&h(&[("content-length", v)]), 0), "{v:?}");
        }
        // The first one decides, even when it is unreadable.
        assert_eq!(
            declared_length(&h(&[("content-length", "x"), ("content-length", "5")])),
            None
        );
    }

    #[test]
    fn over_is_strictly_past_max() {
        let cl = |n: &str| h(&[("Content-Length", n)]);
        assert!(!declared_over(&cl("10"), 10));
        assert!(declared_over(&cl("11"), 10));
        assert!(declared_over(&cl("18446744073709551615"), usize::MAX - 1));
        assert!(!declared_over(&h(&[]), 0));
    }
}
