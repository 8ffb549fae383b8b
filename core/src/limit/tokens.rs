//! How many tokens a call on a shared bucket asks for when its caller names
//! none: one (a call is one request, one send). Each binding's `take`,
//! `next` and `wait` leave the count optional; the default is decided here
//! once rather than in each of them.

/// The tokens a call asks for when it names none.
pub const ONE: f64 = 1.0;

/// `n`, or [`ONE`] when the caller named none. A count that was named is
/// passed on as it is, for the bucket to take or refuse.
pub fn tokens(n: Option<f64>) -> f64 {
    n.unwrap_or(ONE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_token_unless_named() {
        assert_eq!(tokens(None), 1.0);
        assert_eq!(tokens(Some(3.0)), 3.0);
        // A named count is the bucket's to refuse, not replaced here.
        assert!(tokens(Some(f64::NAN)).is_nan());
        assert_eq!(tokens(Some(0.0)), 0.0);
    }
}
