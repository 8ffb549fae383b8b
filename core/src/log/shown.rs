//! How text that came from a message is put in a log line.
//!
//! Task names, ids and the reasons a message was refused are chosen by
//! whoever published the message. Printed raw, a name holding a newline
//! forges a log line of its own (`"x\n[ERROR] disk full"`), an ANSI escape
//! repaints or clears the operator's terminal, and a 1 MB name is a 1 MB log
//! line per message. [`shown`] wraps such a value for printing: control
//! characters (C0, DEL, C1, so ESC too), line and paragraph separators,
//! bidi overrides and backslashes are written as escapes, and it is cut to
//! [`SHOWN_MAX`] characters with the original length after an ellipsis — one
//! bounded line, whatever the message holds.

use std::fmt::{self, Write};

/// How many characters of a message-derived value a log line shows.
pub const SHOWN_MAX: usize = 128;

/// A value from a message, escaped and cut for a log line.
///
/// `Display` writes the escaped text; `Debug` writes it in double quotes
/// (with `"` escaped), for call sites that quoted the raw value with `{:?}`.
#[derive(Clone, Copy)]
pub struct Shown<'a>(&'a str);

/// Wraps `s` (a task name, an id, a refusal's reason) for a log line.
pub fn shown(s: &str) -> Shown<'_> {
    Shown(s)
}

/// Whether `c` must not reach a log line as itself.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}'
        )
}

impl Shown<'_> {
    fn write(&self, f: &mut fmt::Formatter<'_>, quote: bool) -> fmt::Result {
        for (n, c) in self.0.chars().enumerate() {
            if n == SHOWN_MAX {
                return write!(f, "\u{2026} ({} bytes)", self.0.len());
            }
            match c {
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                '\\' => f.write_str("\\\\")?,
                '"' if quote => f.write_str("\\\"")?,
                c if hidden(c) => write!(f, "\\u{{{:x}}}", c as u32)?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, false)
    }
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        self.write(f, true)?;
        f.write_char('"')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_line_stays_on_its_line() {
        let name = "tasks.add\n[ERROR] forged line\r\x1b[31mred\x1b[0m\u{202e}txt\u{7f}\u{85}\\";
        let line = format!("received unregistered task {:?}", shown(name));
        assert_eq!(
            line,
            "received unregistered task \"tasks.add\\n[ERROR] forged line\\r\\u{1b}[31mred\\u{1b}[0m\\u{202e}txt\\u{7f}\\u{85}\\\\\""
        );
        assert!(!line.chars().any(hidden));
        assert_eq!(shown("a\"b").to_string(), "a\"b");
        assert_eq!(format!("{:?}", shown("a\"b")), "\"a\\\"b\"");
        assert_eq!(shown("plain-id-1").to_string(), "plain-id-1");
        assert_eq!(shown("").to_string(), "");
    }

    #[test]
    fn a_huge_value_is_cut_with_its_length() {
        let big = "x".repeat(1 << 20);
        let s = shown(&big).to_string();
        assert_eq!(
            s,
            format!("{}\u{2026} ({} bytes)", "x".repeat(SHOWN_MAX), 1 << 20)
        );
        // Exactly at the limit: nothing cut.
        let edge = "é".repeat(SHOWN_MAX);
        assert_eq!(shown(&edge).to_string(), edge);
        // Escapes count as one character each, so the line stays bounded
        // (each at most 10 bytes) even for a value of newlines.
        let nl = "\n".repeat(1 << 20);
        let s = shown(&nl).to_string();
        assert!(s.len() < SHOWN_MAX * 10 + 32, "{}", s.len());
        assert!(s.ends_with(&format!("({} bytes)", 1 << 20)));
        assert!(!s.contains('\n'));
    }
}
