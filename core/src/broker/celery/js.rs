//! kombu's typed JSON values as a JavaScript host carries them.
//!
//! The core keeps `{"__type__": T, "__value__": V}` objects as they are on
//! the wire ([`super::typed`]); a JS host has no `datetime` or `bytes`, so
//! what each type becomes there is decided here, once: a `datetime` a
//! `Date`, `bytes`/`base64` a `Buffer` (both ways, with [`Typed::from_value`]
//! / [`Typed::to_value`], so the ISO text of a `Date` and the
//! `bytes`/`base64` choice stay the core's), a `uuid` its hyphenated string
//! and a `decimal`, `date` or `time` its text (one way); a typed object
//! kombu would refuse (an unknown T, a bad value) stays a plain object.
//!
//! Values cross as JSON text. A `Date` or a `Buffer` travels as a one-key
//! *marker* object whose key starts with NUL (no key a person writes):
//! `{"\u0000date": <epoch ms>}`, `{"\u0000bytes": "<hex>"}`, both ways — the
//! Node binding's `lib/json.js` makes and revives them.
//!
//! Both directions cost nothing when there is nothing typed: from JS, the
//! request text is walked only when it holds `\u0000` (how `JSON.stringify`
//! writes NUL); to JS, a value's text is re-made only when it holds
//! `"__type__"`.

use serde_json::{Map, Value};

use super::Typed;

/// A `Date`: epoch ms.
const DATE: &str = "\u{0}date";
/// A `Buffer`: its bytes as lowercase hex.
const BYTES: &str = "\u{0}bytes";

/// Whether JSON text from `lib/json.js` may hold markers.
pub fn marked(text: &str) -> bool {
    text.contains("\\u0000")
}

/// Replaces the markers in `v` with kombu typed objects.
pub fn from_js(v: &mut Value) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(from_js),
        Value::Object(m) => {
            if let Some(t) = marker_in(m) {
                *v = t.to_value();
                return;
            }
            m.values_mut().for_each(from_js);
        }
        _ => {}
    }
}

/// [`from_js`] over keyword arguments.
pub fn from_js_map(m: &mut Map<String, Value>) {
    m.values_mut().for_each(from_js);
}

fn marker_in(m: &Map<String, Value>) -> Option<Typed> {
    if m.len() != 1 {
        return None;
    }
    if let Some(x) = m.get(DATE) {
        let ms = x.as_f64().filter(|f| f.is_finite())?;
        return Some(Typed::datetime_ms(ms.round() as i64));
    }
    hex::decode(m.get(BYTES)?.as_str()?).ok().map(Typed::Bytes)
}

/// Writes `v` (a value, a list of them, keyword arguments) as JSON text for
/// `lib/json.js`, typed values as it reads them.
pub fn write_js<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    let start = out.len();
    // Serialising values into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
    if !has_type(&out[start..]) {
        return;
    }
    let Ok(mut c) = serde_json::to_value(v) else {
        return;
    };
    if !to_js(&mut c) {
        return;
    }
    out.truncate(start);
    let _ = serde_json::to_writer(&mut *out, &c);
}

/// `v` as JSON text for `lib/json.js` (see [`write_js`]).
pub fn text_js(v: Value) -> String {
    let mut out = Vec::with_capacity(64);
    write_js(&mut out, &v);
    // serde_json writes UTF-8 only.
    String::from_utf8(out).unwrap_or_else(|_| "null".into())
}

/// Whether JSON text holds the key `"__type__"`.
fn has_type(mut text: &[u8]) -> bool {
    while let Some(i) = text.iter().position(|&b| b == b'_') {
        if i > 0 && text[i - 1] == b'"' && text[i..].starts_with(b"__type__\"") {
            return true;
        }
        text = &text[i + 1..];
    }
    false
}

/// Turns typed objects in `v` into markers or strings; whether any was.
fn to_js(v: &mut Value) -> bool {
    match v {
        Value::Array(items) => items.iter_mut().fold(false, |any, x| to_js(x) | any),
        Value::Object(_) => {
            if let Ok(Some(t)) = Typed::from_value(v) {
                if let Some(js) = js_of(&t) {
                    *v = js;
                    return true;
                }
                return false;
            }
            let Value::Object(m) = v else { return false };
            m.values_mut().fold(false, |any, x| to_js(x) | any)
        }
        _ => false,
    }
}

fn js_of(t: &Typed) -> Option<Value> {
    Some(match t {
        Typed::DateTime(_) => serde_json::json!({ DATE: t.epoch_ms()? }),
        Typed::Bytes(b) => serde_json::json!({ BYTES: hex::encode(b) }),
        Typed::Uuid(_) => Value::String(t.uuid_hyphenated()?),
        Typed::Decimal(s) | Typed::Date(s) | Typed::Time(s) => Value::String(s.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn markers_become_typed_values_and_back() {
        let mut v = json!([{ "\u{0}date": 1_767_225_600_123_i64 }, { "k": { "\u{0}bytes": "ff00" } }, { "\u{0}bytes": "6869" }]);
        from_js(&mut v);
        assert_eq!(
            v,
            json!([
                { "__type__": "datetime", "__value__": "2026-01-01T00:00:00.123000+00:00" },
                { "k": { "__type__": "base64", "__value__": "/wA=" } },
                { "__type__": "bytes", "__value__": "hi" },
            ])
        );
        let back: Value = serde_json::from_str(&text_js(v)).unwrap();
        assert_eq!(
            back,
            json!([{ "\u{0}date": 1_767_225_600_123_i64 }, { "k": { "\u{0}bytes": "ff00" } }, { "\u{0}bytes": "6869" }])
        );
    }

    #[test]
    fn strings_for_the_rest_and_bad_ones_left_alone() {
        let v = json!({
            "u": { "__type__": "uuid", "__value__": { "hex": "00000000000000000000000000000001" } },
            "d": { "__type__": "decimal", "__value__": "1.50" },
            "x": [{ "__type__": "pickle", "__value__": "x" }, { "__type__": "date", "__value__": "2026-01-02" }],
            "n": 1,
        });
        let got: Value = serde_json::from_str(&text_js(v)).unwrap();
        assert_eq!(
            got,
            json!({
                "u": "00000000-0000-0000-0000-000000000001",
                "d": "1.50",
                "x": [{ "__type__": "pickle", "__value__": "x" }, "2026-01-02"],
                "n": 1,
            })
        );
        // Not a marker: two keys, or a bad hex.
        let mut v = json!([{ "\u{0}date": 1, "y": 2 }, { "\u{0}bytes": "zz" }]);
        let want = v.clone();
        from_js(&mut v);
        assert_eq!(v, want);
    }
}
