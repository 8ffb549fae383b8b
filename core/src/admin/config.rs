//! An admin's configuration from what an adapter was handed: the rules both
//! bindings would otherwise write (a default, a range), decided once.

use super::{AdminConfig, MAX_BODY};
use crate::task::Refused;
use crate::task::specs::Host;

impl AdminConfig {
    /// The largest body from the number an adapter was given: none is
    /// [`MAX_BODY`]; a whole number of bytes from 1 to `u32::MAX` (4 GiB, far
    /// past any form's send) is taken; anything else is refused, naming
    /// the argument as `host` spells it.
    pub fn max_body_of(host: Host, n: Option<f64>) -> Result<usize, Refused> {
        let Some(n) = n else {
            return Ok(MAX_BODY);
        };
        if n.fract() == 0.0 && (1.0..=f64::from(u32::MAX)).contains(&n) {
            Ok(n as usize)
        } else {
            Err(Refused::Invalid(format!(
                "invalid `{}`: must be a positive whole number of bytes",
                host.spell("max_body")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_body_is_a_positive_whole_number() {
        assert_eq!(
            AdminConfig::max_body_of(Host::Node, None).unwrap(),
            MAX_BODY
        );
        assert_eq!(
            AdminConfig::max_body_of(Host::Python, Some(1024.0)).unwrap(),
            1024
        );
        assert_eq!(
            AdminConfig::max_body_of(Host::Node, Some(f64::from(u32::MAX))).unwrap(),
            u32::MAX as usize
        );
        for bad in [0.0, -1.0, 1.5, f64::NAN, f64::INFINITY, 2f64.powi(32)] {
            assert!(
                AdminConfig::max_body_of(Host::Node, Some(bad)).is_err(),
                "{bad}"
            );
        }
        let why = |h| match AdminConfig::max_body_of(h, Some(0.0)) {
            Err(Refused::Invalid(why)) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            why(Host::Node),
            "invalid `maxBody`: must be a positive whole number of bytes"
        );
        assert_eq!(
            why(Host::Python),
            "invalid `max_body`: must be a positive whole number of bytes"
        );
    }
}
