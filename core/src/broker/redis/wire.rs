//! What the layout's values look like: replies read as bytes or integers,
//! priority steps, stored results, held elements and redelivery marks.
//!
//! Why apart: the Lua scripts write these formats and the Rust side reads
//! them back; keeping the readers together keeps them next to their tests.

use ::redis::Value;

use crate::task::message::Message;
use crate::task::state::Outcome;

/// Priority steps: 0 is claimed first (kombu's Redis order), as in memory.
pub(super) const STEPS: u8 = 10;

pub(super) fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        other => bytes(other).and_then(|b| std::str::from_utf8(b).ok()?.trim().parse().ok()),
    }
}

pub(super) fn step_of(m: &Message) -> u8 {
    m.priority.unwrap_or(0).min(STEPS - 1)
}

pub(super) fn step_arg(s: u8) -> &'static str {
    ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"][s as usize]
}

/// A final state's result value starts with its name and `|`.
pub(super) fn stored(o: &Outcome) -> Vec<u8> {
    let mut v = Vec::with_capacity(128);
    v.extend_from_slice(o.state.name().as_bytes());
    v.push(b'|');
    serde_json::to_writer(&mut v, o).expect("an outcome always serialises");
    v
}

pub(super) fn unstored(b: &[u8]) -> Option<Outcome> {
    let bar = b.iter().position(|c| *c == b'|')?;
    serde_json::from_slice(&b[bar + 1..]).ok()
}

/// A held element `<token>:<step>:<payload>`: token, step, payload.
pub(super) fn unheld(el: &[u8]) -> Option<(u64, u8, &[u8])> {
    let c1 = el.iter().position(|c| *c == b':')?;
    let token = std::str::from_utf8(&el[..c1]).ok()?.parse().ok()?;
    let rest = &el[c1 + 1..];
    let c2 = rest.iter().position(|c| *c == b':')?;
    let step = std::str::from_utf8(&rest[..c2]).ok()?.parse().ok()?;
    Some((token, step, &rest[c2 + 1..]))
}

/// A ready payload's bytes when it is marked redelivered (`!<n>!<bytes>`).
pub(super) fn unmark(p: &[u8]) -> Option<&[u8]> {
    let rest = p.strip_prefix(b"!")?;
    // `!{` is the mark as it was before the count.
    if rest.first() == Some(&b'{') {
        return Some(rest);
    }
    let bang = rest.iter().position(|c| *c == b'!')?;
    if bang == 0 || !rest[..bang].iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(&rest[bang + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::state::State;

    #[test]
    fn held_elements_parse() {
        assert_eq!(unheld(b"12:3:{\"a\":1}"), Some((12, 3, &b"{\"a\":1}"[..])));
        assert_eq!(unheld(b"7:0:!{}"), Some((7, 0, &b"!{}"[..])));
        assert_eq!(unheld(b"{\"a\":1}"), None);
        let o = Outcome::new("x", State::Success, 5);
        let s = stored(&o);
        assert!(s.starts_with(b"SUCCESS|"));
        assert_eq!(unstored(&s), Some(o));
    }

    #[test]
    fn marks_parse() {
        assert_eq!(unmark(b"!0!{}"), Some(&b"{}"[..]));
        assert_eq!(unmark(b"!12!x!y"), Some(&b"x!y"[..]));
        assert_eq!(unmark(b"!!{}"), None);
        assert_eq!(unmark(b"!{}"), Some(&b"{}"[..]));
        assert_eq!(unmark(b"{}"), None);
    }
}
