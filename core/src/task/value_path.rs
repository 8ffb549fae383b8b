//! Where in a task's value — its arguments, a result, a state's meta — a
//! binding met something JSON cannot carry, and the words it is refused with.
//!
//! A binding walks a host value into JSON and refuses what cannot travel by
//! naming where it sits (`add: args[1]['k'] is a set, ...`): a refusal that
//! says only "not serialisable" leaves the caller to search a nested value
//! by hand. The path is built as the walk descends, a chain of borrowed links,
//! so nothing is allocated until an error is written; it is spelled as the
//! host indexes its own values. The circular and too-deep refusals are
//! [`super::depth`]'s; the rest are here, so a binding only says what it met.

use super::specs::Host;

/// Where a value sits: the root's own name (`args`, `kwargs`, `result`),
/// then an index or a key per level.
pub enum Path<'a> {
    /// The value's own name.
    Root(&'a str),
    /// Item `usize` of the list at the path.
    Index(&'a Path<'a>, usize),
    /// Member `&str` of the object at the path.
    Key(&'a Path<'a>, &'a str),
}

impl Path<'_> {
    /// The path as `host` writes an index into its values: Python
    /// `args[1]['k']`; Node `args[1].k`, or `["k k"]` for a key that is no
    /// identifier.
    pub fn text(&self, host: Host) -> String {
        let mut s = String::new();
        self.render(host, &mut s);
        s
    }

    fn render(&self, host: Host, out: &mut String) {
        match self {
            Path::Root(r) => out.push_str(r),
            Path::Index(p, i) => {
                p.render(host, out);
                out.push_str(&format!("[{i}]"));
            }
            Path::Key(p, k) => {
                p.render(host, out);
                match host {
                    Host::Node if is_identifier(k) => {
                        out.push('.');
                        out.push_str(k);
                    }
                    Host::Node => {
                        let quoted = serde_json::to_string(k).unwrap_or_default();
                        out.push_str(&format!("[{quoted}]"));
                    }
                    Host::Python | Host::Rust => {
                        out.push_str("['");
                        out.push_str(&k.replace('\\', "\\\\").replace('\'', "\\'"));
                        out.push_str("']");
                    }
                }
            }
        }
    }

    /// The path of the enclosing container at `level` (the root is 1;
    /// clamped to the path's own length).
    pub fn ancestor(&self, level: usize) -> &Path<'_> {
        let mut chain = vec![self];
        let mut p = self;
        while let Path::Index(up, _) | Path::Key(up, _) = p {
            chain.push(up);
            p = up;
        }
        chain.reverse();
        chain[level.clamp(1, chain.len()) - 1]
    }
}

/// A JavaScript identifier as Node's dot access takes it (ASCII letters,
/// digits, `_` and `$`, not starting with a digit).
fn is_identifier(k: &str) -> bool {
    let mut cs = k.chars();
    cs.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// The refusal of `v`, a float that is not finite, at `path` of `owner`'s
/// value.
pub fn not_finite_text(owner: &str, path: &str, v: f64) -> String {
    format!("{owner}: {path} is {v}, and JSON carries only finite numbers")
}

/// The refusal of a Python int wider than 64 bits: serde_json's numbers are
/// `i64`, `u64` or `f64`, and a float would change the value.
pub fn wide_int_text(owner: &str, path: &str) -> String {
    format!(
        "{owner}: {path} is an int beyond 64 bits, which JSON numbers here cannot carry exactly"
    )
}

/// The refusal of a Python dict key of type `kind` (JSON keys are text).
pub fn key_type_text(owner: &str, path: &str, kind: &str) -> String {
    format!("{owner}: {path} has a key of type {kind}; JSON object keys must be str")
}

/// The refusal of a Python value of type `kind` that JSON cannot carry,
/// naming what can.
pub fn uncarried_text(owner: &str, path: &str, kind: &str) -> String {
    let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u', 'A', 'E', 'I', 'O', 'U']) {
        "an"
    } else {
        "a"
    };
    format!(
        "{owner}: {path} is {article} {kind}, which JSON cannot carry (use dict, list, tuple, str, int, float, bool, None, or kombu's datetime, date, time, UUID, Decimal, bytes)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_spelled_as_the_host_indexes() {
        let root = Path::Root("args");
        let one = Path::Index(&root, 1);
        let key = Path::Key(&one, "it's");
        let deeper = Path::Index(&key, 0);
        assert_eq!(deeper.text(Host::Python), r"args[1]['it\'s'][0]");
        assert_eq!(deeper.text(Host::Node), r#"args[1]["it's"][0]"#);
        let plain = Path::Key(&one, "k");
        assert_eq!(plain.text(Host::Node), "args[1].k");
        assert_eq!(plain.text(Host::Python), "args[1]['k']");
        assert_eq!(deeper.ancestor(1).text(Host::Python), "args");
        assert_eq!(deeper.ancestor(2).text(Host::Python), "args[1]");
        assert_eq!(
            deeper.ancestor(9).text(Host::Python),
            deeper.text(Host::Python)
        );
    }

    #[test]
    fn the_refusals_words() {
        assert_eq!(
            not_finite_text("add", "args[0]", f64::INFINITY),
            "add: args[0] is inf, and JSON carries only finite numbers"
        );
        assert_eq!(
            key_type_text("add", "kwargs", "int"),
            "add: kwargs has a key of type int; JSON object keys must be str"
        );
        assert!(uncarried_text("add", "args[1]", "set").starts_with("add: args[1] is a set, "));
        assert!(
            uncarried_text("add", "args[1]", "object").starts_with("add: args[1] is an object")
        );
        assert!(wide_int_text("add", "args[0]").contains("beyond 64 bits"));
    }
}
