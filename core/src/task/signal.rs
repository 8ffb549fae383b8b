//! The signal a terminate carries: `revoke(terminate, signal)` names one,
//! the broadcast carries it to the process running the run, and whatever
//! stops the run there (a process pool kills its child with it) reads it
//! from the terminate mark.
//!
//! Why here, once: a signal is given as a name (`"SIGKILL"`, `"kill"`) or a
//! number, by Python, by Node, by a Celery client over the pidbox, or by
//! another headway process over the own layout's channel. Each of those
//! reads it with [`parse`] (a caller's argument, refused by name) or
//! [`from_wire`] (a broadcast, never refused), so "KILL" means 9 in every
//! one of them. A broadcast writes a signal's name where it has one
//! ([`to_wire`]): Celery's workers read names, and a name means the same on
//! every platform where a number may not (SIGUSR1 is 10 on Linux, 30 on
//! macOS).

use serde_json::Value;

use super::specs::{Host, SpecError};

/// The signal a terminate sends when none is named: SIGTERM, as Celery's
/// `revoke(terminate=True)` does.
pub const SIGTERM: i32 = 15;

/// The highest signal number accepted (Linux's `SIGRTMAX`).
pub const SIGNAL_MAX: i32 = 64;

/// What a bad `signal` is told.
pub const SIGNAL_RANGE: &str = "must be a signal name such as \"SIGTERM\", \"TERM\", \"SIGKILL\" or \"KILL\", or a number 1 to 64";

/// The named signals, with this platform's numbers. The BSDs (macOS
/// included) number the user signals differently from Linux.
#[cfg(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
))]
const NAMED: &[(&str, i32)] = &[
    ("SIGHUP", 1),
    ("SIGINT", 2),
    ("SIGQUIT", 3),
    ("SIGABRT", 6),
    ("SIGKILL", 9),
    ("SIGUSR1", 30),
    ("SIGUSR2", 31),
    ("SIGALRM", 14),
    ("SIGTERM", 15),
];

#[cfg(not(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
)))]
const NAMED: &[(&str, i32)] = &[
    ("SIGHUP", 1),
    ("SIGINT", 2),
    ("SIGQUIT", 3),
    ("SIGABRT", 6),
    ("SIGKILL", 9),
    ("SIGUSR1", 10),
    ("SIGUSR2", 12),
    ("SIGALRM", 14),
    ("SIGTERM", 15),
];

/// A signal as a caller gave it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SignalSpec<'a> {
    /// A name, any case, with or without `SIG`: `"SIGTERM"`, `"kill"`.
    Name(&'a str),
    /// A number (a host's number: a whole one is wanted).
    Number(f64),
}

/// The number of the signal named `name` (any case, with or without
/// `SIG`; a number written as text is read too).
pub fn number_of(name: &str) -> Option<i32> {
    let t = name.trim();
    if let Ok(n) = t.parse::<i32>() {
        return (1..=SIGNAL_MAX).contains(&n).then_some(n);
    }
    let up = t.to_ascii_uppercase();
    let full = if up.starts_with("SIG") {
        up
    } else {
        format!("SIG{up}")
    };
    NAMED.iter().find(|(n, _)| *n == full).map(|&(_, s)| s)
}

/// The name of signal `n` (`"SIGTERM"`), when it has one here.
pub fn name_of(n: i32) -> Option<&'static str> {
    NAMED.iter().find(|&&(_, s)| s == n).map(|&(name, _)| name)
}

/// Whether `n` is a signal number a terminate may carry (1 to 64).
pub fn check(host: Host, n: i32) -> Result<i32, SpecError> {
    if (1..=SIGNAL_MAX).contains(&n) {
        Ok(n)
    } else {
        Err(SpecError::new(host, "signal", SIGNAL_RANGE))
    }
}

/// A caller's `signal` as a number: [`SIGTERM`] when none is given.
pub fn parse(host: Host, spec: Option<SignalSpec<'_>>) -> Result<i32, SpecError> {
    let bad = || SpecError::new(host, "signal", SIGNAL_RANGE);
    match spec {
        None => Ok(SIGTERM),
        Some(SignalSpec::Name(name)) => number_of(name).ok_or_else(bad),
        Some(SignalSpec::Number(x)) => {
            if x.is_finite() && x.fract() == 0.0 && (1.0..=SIGNAL_MAX as f64).contains(&x) {
                Ok(x as i32)
            } else {
                Err(bad())
            }
        }
    }
}

/// Signal `n` as a broadcast carries it: its name where it has one (what
/// Celery sends), else its number.
pub fn to_wire(n: i32) -> Value {
    match name_of(n) {
        Some(name) => Value::from(name),
        None => Value::from(n),
    }
}

/// A broadcast's signal: a name or a number as [`parse`] reads them;
/// `None` when it is absent or not one (the receiver then uses
/// [`SIGTERM`], as a Celery worker does for a missing one).
pub fn from_wire(v: &Value) -> Option<i32> {
    match v {
        Value::String(s) => number_of(s),
        Value::Number(n) => n
            .as_i64()
            .filter(|n| (1..=SIGNAL_MAX as i64).contains(n))
            .map(|n| n as i32),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_are_read_alike_in_every_host() {
        for host in [Host::Rust, Host::Python, Host::Node] {
            let p = |s| parse(host, Some(SignalSpec::Name(s)));
            assert_eq!(parse(host, None), Ok(SIGTERM));
            assert_eq!(p("SIGTERM"), Ok(15));
            assert_eq!(p("term"), Ok(15));
            assert_eq!(p("SigKill"), Ok(9));
            assert_eq!(p("KILL"), Ok(9));
            assert_eq!(p("SIGINT"), Ok(2));
            assert_eq!(p("QUIT"), Ok(3));
            assert_eq!(p("sighup"), Ok(1));
            assert_eq!(p("SIGUSR1"), Ok(name_of_usr1()));
            assert_eq!(p("9"), Ok(9));
            for bad in ["", "SIG", "SIGNOPE", "TERMINATE", "0", "65", "-9", "9.5"] {
                let e = p(bad).unwrap_err();
                assert_eq!(e.arg(), "signal", "{bad:?}");
                assert!(
                    e.to_string().starts_with("invalid `signal`: must be"),
                    "{e}"
                );
            }
            let n = |x| parse(host, Some(SignalSpec::Number(x)));
            assert_eq!(n(1.0), Ok(1));
            assert_eq!(n(64.0), Ok(64));
            for bad in [0.0, 65.0, -15.0, 9.5, f64::NAN, f64::INFINITY] {
                assert_eq!(n(bad).unwrap_err().arg(), "signal", "{bad}");
            }
            assert!(check(host, 0).is_err() && check(host, 65).is_err());
            assert_eq!(check(host, 40), Ok(40));
        }
    }

    fn name_of_usr1() -> i32 {
        NAMED.iter().find(|(n, _)| *n == "SIGUSR1").unwrap().1
    }

    #[test]
    fn the_wire_carries_a_name_where_there_is_one() {
        assert_eq!(to_wire(15), Value::from("SIGTERM"));
        assert_eq!(to_wire(9), Value::from("SIGKILL"));
        assert_eq!(to_wire(40), Value::from(40));
        for n in 1..=SIGNAL_MAX {
            assert_eq!(from_wire(&to_wire(n)), Some(n), "{n}");
        }
        // What Celery clients send: names as written, or a number.
        assert_eq!(from_wire(&Value::from("KILL")), Some(9));
        assert_eq!(from_wire(&Value::from(2)), Some(2));
        for bad in [
            Value::Null,
            Value::from("NOPE"),
            Value::from(0),
            Value::from(99),
            Value::from(1.5),
        ] {
            assert_eq!(from_wire(&bad), None, "{bad}");
        }
    }
}
