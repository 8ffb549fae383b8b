//! JSON text as Python's `json.dumps` writes it, and Python `repr` text.
//!
//! kombu serialises every body, envelope and result with `json.dumps` at its
//! defaults: `", "` and `": "` separators, `ensure_ascii` (every character
//! outside printable ASCII written `\uXXXX`, astral ones as surrogate
//! pairs) and floats in `repr` form (`1.0`, `1e+16`). Writing the same text
//! keeps a chord member headway adds byte-identical to the one a Celery
//! worker would add for the same result — Celery's join counts members of a
//! sorted set, so equal text is what makes a redelivered part count once.
//!
//! `repr` text is what Celery puts in `argsrepr`/`kwargsrepr` (logs and
//! events only), so an approximation of Python's `repr` is enough there.

use std::fmt::Write;

use serde_json::Value;

/// `json.dumps(value)` with Python's defaults.
pub fn dumps(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    write_value(&mut out, value);
    out
}

/// Appends `json.dumps(value)` to `out`.
pub fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64() {
                let _ = write!(out, "{u}");
            } else {
                write_float(out, n.as_f64().unwrap_or(0.0));
            }
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, v);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_str(out, k);
                out.push_str(": ");
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

/// Appends a JSON string literal with `ensure_ascii` escaping.
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// Appends a float as Python's `repr` writes it: the shortest digits that
/// round-trip, positional for exponents -4..16, scientific (`1e+16`,
/// `1.5e-05`) outside, and always a `.0` on a positional integer.
pub fn write_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("NaN");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if f == 0.0 {
        out.push_str(if f.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "1.2345e-7".
    let sci = format!("{f:e}");
    let (mant, exp) = sci.split_once('e').expect("`{:e}` always has an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            for _ in 0..(-exp - 1) {
                out.push('0');
            }
            out.push_str(&digits);
        } else {
            let point = exp as usize + 1;
            if digits.len() <= point {
                out.push_str(&digits);
                for _ in digits.len()..point {
                    out.push('0');
                }
                out.push_str(".0");
            } else {
                out.push_str(&digits[..point]);
                out.push('.');
                out.push_str(&digits[point..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
}

/// How long a repr may be: Celery's `argsrepr_maxsize`/`kwargsrepr_maxsize`
/// default of 1024.
pub const REPR_MAX: usize = 1024;

/// Python's `repr` of an args list as a tuple: `(2, 3)`, `(1,)`, `()`.
pub fn repr_args(args: &[Value]) -> String {
    let mut out = String::from("(");
    for (i, v) in args.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        repr_value(&mut out, v);
    }
    if args.len() == 1 {
        out.push(',');
    }
    out.push(')');
    cut(out)
}

/// Python's `repr` of a kwargs dict: `{'a': 1}`.
pub fn repr_kwargs(kwargs: &serde_json::Map<String, Value>) -> String {
    let mut out = String::new();
    repr_value(&mut out, &Value::Object(kwargs.clone()));
    cut(out)
}

fn cut(mut s: String) -> String {
    if s.len() > REPR_MAX {
        let mut end = REPR_MAX - 3;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

fn repr_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(_) => {
            let start = out.len();
            write_value(out, v);
            if out[start..].contains("NaN") {
                out.truncate(start);
                out.push_str("nan");
            }
        }
        Value::String(s) => repr_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_value(out, x);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, x)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_str(out, k);
                out.push_str(": ");
                repr_value(out, x);
            }
            out.push('}');
        }
    }
}

fn repr_str(out: &mut String, s: &str) {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(q);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dumps_like_python() {
        assert_eq!(
            dumps(&json!([[2, 3], {}, {"a": null, "b": [true, false]}])),
            r#"[[2, 3], {}, {"a": null, "b": [true, false]}]"#
        );
        assert_eq!(
            dumps(&json!("é☃\u{1F600}\"\\\n\u{1}\u{7f}")),
            r#""\u00e9\u2603\ud83d\ude00\"\\\n\u0001\u007f""#
        );
    }

    #[test]
    fn floats_like_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (1.5, "1.5"),
            (-2.25, "-2.25"),
            (0.1, "0.1"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.25e-7, "1.25e-07"),
            (123456.789, "123456.789"),
            (1e100, "1e+100"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
        ];
        for (f, want) in cases {
            let mut s = String::new();
            write_float(&mut s, f);
            assert_eq!(s, want, "{f}");
        }
    }

    #[test]
    fn reprs() {
        assert_eq!(repr_args(&[json!(2), json!(3)]), "(2, 3)");
        assert_eq!(repr_args(&[json!("a")]), "('a',)");
        assert_eq!(repr_args(&[]), "()");
        let mut m = serde_json::Map::new();
        m.insert("k".into(), json!([1.0, null, true, "it's"]));
        assert_eq!(repr_kwargs(&m), r#"{'k': [1.0, None, True, "it's"]}"#);
        assert!(repr_args(&[json!("x".repeat(2000))]).len() <= REPR_MAX);
    }
}
