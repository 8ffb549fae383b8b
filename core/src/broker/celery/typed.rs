//! kombu's typed JSON values, and the times Celery writes.
//!
//! kombu (≥ 5.3) writes values JSON has no type for as a two-key object:
//! `{"__type__": T, "__value__": V}` with T one of `datetime`, `date`,
//! `time` (V an ISO string), `decimal` (V the decimal's text), `uuid` (V
//! `{"hex": "<32 hex digits>"}`), `bytes` (V the UTF-8 text) or `base64` (V
//! the base64 of bytes that are not UTF-8). Its decoder converts every object
//! whose keys are exactly those two, anywhere in a body or a result, and
//! refuses an unknown T (`ValueError`), which a Celery worker answers by
//! dropping the message.
//!
//! **The core keeps these objects as they are on the wire**: args, kwargs
//! and results are `serde_json::Value`s in which a typed value is still the
//! two-key object. The bindings turn them into native values — Python
//! `datetime`/`date`/`time`/`uuid.UUID`/`Decimal`/`bytes`, Node `Date` (for
//! `datetime`), `Buffer` (for `bytes`/`base64`) and strings (the rest) — with
//! [`Typed::from_value`] and back with [`Typed::to_value`], so both bindings
//! apply one rule and a value sent from Node reads the same in Python.

use std::fmt;

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, SecondsFormat, TimeZone, Utc};
use serde_json::{Map, Value, json};

use super::b64;

/// A kombu typed value, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Typed {
    /// An ISO-8601 date and time, as written (offset or naive).
    DateTime(String),
    /// An ISO-8601 date (`2026-01-02`).
    Date(String),
    /// An ISO-8601 time of day (`03:04:05.000006`).
    Time(String),
    /// A UUID as 32 lowercase hex digits.
    Uuid(String),
    /// A decimal number's exact text (`"1.50"`).
    Decimal(String),
    /// Raw bytes.
    Bytes(Vec<u8>),
}

/// A typed value that cannot be decoded: what kombu raises `ValueError` for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedError(pub String);

impl fmt::Display for TypedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad kombu typed value: {}", self.0)
    }
}

impl std::error::Error for TypedError {}

fn bad(why: impl Into<String>) -> TypedError {
    TypedError(why.into())
}

impl Typed {
    /// The typed value `v` stands for: `Ok(None)` when `v` is not a two-key
    /// `__type__`/`__value__` object, an error when it is one kombu would
    /// refuse.
    pub fn from_value(v: &Value) -> Result<Option<Typed>, TypedError> {
        let Value::Object(m) = v else {
            return Ok(None);
        };
        if m.len() != 2 {
            return Ok(None);
        }
        let (Some(t), Some(val)) = (m.get("__type__"), m.get("__value__")) else {
            return Ok(None);
        };
        let t = t.as_str().ok_or_else(|| bad("__type__ is not a string"))?;
        let text = || {
            val.as_str()
                .map(str::to_string)
                .ok_or_else(|| bad(format!("the __value__ of a {t} is not a string")))
        };
        Ok(Some(match t {
            "datetime" => {
                let s = text()?;
                parse_iso(&s).ok_or_else(|| bad(format!("not an ISO datetime: {s:?}")))?;
                Typed::DateTime(s)
            }
            "date" => {
                let s = text()?;
                let head = s.get(..10).unwrap_or(&s);
                NaiveDate::parse_from_str(head, "%Y-%m-%d")
                    .map_err(|_| bad(format!("not an ISO date: {s:?}")))?;
                Typed::Date(s)
            }
            "time" => {
                let s = text()?;
                parse_time(&s).ok_or_else(|| bad(format!("not an ISO time: {s:?}")))?;
                Typed::Time(s)
            }
            "decimal" => {
                let s = text()?;
                if !is_decimal(&s) {
                    return Err(bad(format!("not a decimal: {s:?}")));
                }
                Typed::Decimal(s)
            }
            "uuid" => {
                let hex = val
                    .get("hex")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("a uuid's __value__ needs a \"hex\" string"))?;
                let hex = uuid_hex(hex).ok_or_else(|| bad(format!("not a uuid: {hex:?}")))?;
                Typed::Uuid(hex)
            }
            "bytes" => Typed::Bytes(text()?.into_bytes()),
            "base64" => Typed::Bytes(
                b64::decode(text()?.as_bytes())
                    .ok_or_else(|| bad("bad base64 in a base64 value"))?,
            ),
            other => return Err(bad(format!("unsupported __type__ {other:?}"))),
        }))
    }

    /// The wire object for this value, as kombu writes it (bytes that are
    /// UTF-8 as `bytes`, others as `base64`).
    pub fn to_value(&self) -> Value {
        let (t, v) = match self {
            Typed::DateTime(s) => ("datetime", json!(s)),
            Typed::Date(s) => ("date", json!(s)),
            Typed::Time(s) => ("time", json!(s)),
            Typed::Decimal(s) => ("decimal", json!(s)),
            Typed::Uuid(hex) => ("uuid", json!({ "hex": hex })),
            Typed::Bytes(b) => match std::str::from_utf8(b) {
                Ok(s) => ("bytes", json!(s)),
                Err(_) => ("base64", json!(b64::encode(b))),
            },
        };
        let mut m = Map::new();
        m.insert("__type__".into(), json!(t));
        m.insert("__value__".into(), v);
        Value::Object(m)
    }

    /// A datetime value for `ms` since the epoch, in UTC with `+00:00`.
    pub fn datetime_ms(ms: i64) -> Typed {
        Typed::DateTime(iso(ms))
    }

    /// A UUID value from any of its text forms (hyphenated or bare hex).
    pub fn uuid(text: &str) -> Option<Typed> {
        uuid_hex(text).map(Typed::Uuid)
    }

    /// For a datetime: ms since the epoch (a naive one read as UTC, as
    /// Celery reads naive times with its default timezone).
    pub fn epoch_ms(&self) -> Option<i64> {
        match self {
            Typed::DateTime(s) => parse_iso(s),
            _ => None,
        }
    }

    /// For a UUID: its hyphenated form.
    pub fn uuid_hyphenated(&self) -> Option<String> {
        match self {
            Typed::Uuid(hex) => uuid::Uuid::parse_str(hex)
                .ok()
                .map(|u| u.hyphenated().to_string()),
            _ => None,
        }
    }
}

/// Checks every typed value in `v` the way kombu's decoder would, so a
/// message a Celery worker would drop is refused here too.
pub fn check(v: &Value) -> Result<(), TypedError> {
    match v {
        Value::Array(items) => items.iter().try_for_each(check),
        Value::Object(m) => {
            if Typed::from_value(v)?.is_some() {
                return Ok(());
            }
            m.values().try_for_each(check)
        }
        _ => Ok(()),
    }
}

fn uuid_hex(text: &str) -> Option<String> {
    uuid::Uuid::parse_str(text)
        .ok()
        .map(|u| u.simple().to_string())
}

fn is_decimal(s: &str) -> bool {
    let t = s.trim();
    let t = t.strip_prefix(['-', '+']).unwrap_or(t);
    if matches!(
        t.to_ascii_lowercase().as_str(),
        "nan" | "snan" | "inf" | "infinity"
    ) {
        return true;
    }
    let (mant, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], Some(&t[i + 1..])),
        None => (t, None),
    };
    let mut digits = 0;
    let mut dots = 0;
    for c in mant.chars() {
        match c {
            '0'..='9' => digits += 1,
            '.' => dots += 1,
            _ => return false,
        }
    }
    if digits == 0 || dots > 1 {
        return false;
    }
    match exp {
        None => true,
        Some(e) => {
            let e = e.strip_prefix(['-', '+']).unwrap_or(e);
            !e.is_empty() && e.chars().all(|c| c.is_ascii_digit())
        }
    }
}

/// `datetime.isoformat()` of an aware UTC datetime `ms` since the epoch:
/// `2026-01-01T12:00:00.123000+00:00`, or without the fraction when it is
/// zero — what Celery writes for `eta`, `expires` and `date_done`.
pub fn iso(ms: i64) -> String {
    // Clamped to what Python's `datetime` holds (years 1 to 9999), so a
    // message's eta at the end of `i64` stays far ahead, readable by Celery.
    let ms = ms.clamp(-62_135_596_800_000, 253_402_300_799_999);
    let t = Utc
        .timestamp_millis_opt(ms)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let micros = t.timestamp_subsec_micros();
    let base = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    if micros == 0 {
        format!("{base}+00:00")
    } else {
        format!("{base}.{micros:06}+00:00")
    }
}

/// An ISO-8601 time (as Python's `fromisoformat`/dateutil's `isoparse`
/// accept them) as ms since the epoch. Any offset, `Z`, a space for `T`, up
/// to nine fractional digits (read to the millisecond); a naive time is read
/// as UTC, Celery's default timezone.
pub fn parse_iso(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_millis());
    }
    let norm = s.replacen(' ', "T", 1);
    if let Ok(t) = DateTime::parse_from_rfc3339(&norm) {
        return Some(t.timestamp_millis());
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S%.f%:z",
        "%Y-%m-%dT%H:%M:%S%.f%z",
        "%Y-%m-%dT%H:%M%:z",
    ] {
        if let Ok(t) = DateTime::parse_from_str(&norm, f) {
            return Some(t.timestamp_millis());
        }
    }
    for f in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(&norm, f) {
            return Some(t.and_utc().timestamp_millis());
        }
    }
    NaiveDate::parse_from_str(&norm, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc().timestamp_millis())
}

fn parse_time(s: &str) -> Option<NaiveTime> {
    let head = s.find(['+', '-', 'Z']).map_or(s, |i| &s[..i]);
    ["%H:%M:%S%.f", "%H:%M"]
        .iter()
        .find_map(|f| NaiveTime::parse_from_str(head, f).ok())
}

/// Seconds since the epoch as Python's `time()` float, from ms.
pub fn unix_secs(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

/// RFC 3339 with microseconds, for logs.
pub fn rfc3339(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms)
        .single()
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Micros, false))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_like_python() {
        assert_eq!(iso(1_767_225_600_000), "2026-01-01T00:00:00+00:00");
        assert_eq!(iso(1_767_225_600_123), "2026-01-01T00:00:00.123000+00:00");
        assert_eq!(
            parse_iso("2026-01-01T00:00:00.123000+00:00"),
            Some(1_767_225_600_123)
        );
        assert_eq!(
            parse_iso("2026-01-01T01:00:00+01:00"),
            Some(1_767_225_600_000)
        );
        assert_eq!(parse_iso("2026-01-01T00:00:00Z"), Some(1_767_225_600_000));
        assert_eq!(
            parse_iso("2026-01-01T00:00:00.123456789Z"),
            Some(1_767_225_600_123)
        );
        assert_eq!(parse_iso("2026-01-01T00:00:00.5"), Some(1_767_225_600_500));
        assert_eq!(parse_iso("2026-01-01 00:00:00"), Some(1_767_225_600_000));
        assert_eq!(parse_iso("2026-01-01"), Some(1_767_225_600_000));
        assert_eq!(parse_iso("soon"), None);
    }

    #[test]
    fn typed_round_trip_as_kombu_writes_them() {
        let cases = [
            (
                r#"{"__type__": "datetime", "__value__": "2026-01-02T03:04:05.006789+00:00"}"#,
                Typed::DateTime("2026-01-02T03:04:05.006789+00:00".into()),
            ),
            (
                r#"{"__type__": "uuid", "__value__": {"hex": "00000000000000000000000000000001"}}"#,
                Typed::Uuid("00000000000000000000000000000001".into()),
            ),
            (
                r#"{"__type__": "decimal", "__value__": "1.5"}"#,
                Typed::Decimal("1.5".into()),
            ),
            (
                r#"{"__type__": "bytes", "__value__": "hi"}"#,
                Typed::Bytes(b"hi".to_vec()),
            ),
            (
                r#"{"__type__": "base64", "__value__": "/wA="}"#,
                Typed::Bytes(vec![0xff, 0]),
            ),
            (
                r#"{"__type__": "date", "__value__": "2026-01-02"}"#,
                Typed::Date("2026-01-02".into()),
            ),
            (
                r#"{"__type__": "time", "__value__": "03:04:05.000006"}"#,
                Typed::Time("03:04:05.000006".into()),
            ),
        ];
        for (text, want) in cases {
            let v: Value = serde_json::from_str(text).unwrap();
            let got = Typed::from_value(&v).unwrap().unwrap();
            assert_eq!(got, want);
            assert_eq!(super::super::pyjson::dumps(&got.to_value()), text);
        }
        let t = Typed::uuid("00000000-0000-0000-0000-000000000001").unwrap();
        assert_eq!(
            t.uuid_hyphenated().unwrap(),
            "00000000-0000-0000-0000-000000000001"
        );
        assert_eq!(
            Typed::datetime_ms(1_767_225_600_000).epoch_ms(),
            Some(1_767_225_600_000)
        );
    }

    #[test]
    fn refuses_what_kombu_refuses() {
        for bad in [
            r#"{"__type__": "pickle", "__value__": "x"}"#,
            r#"{"__type__": "decimal", "__value__": "one"}"#,
            r#"{"__type__": "uuid", "__value__": {"hex": "zz"}}"#,
            r#"{"__type__": "datetime", "__value__": 5}"#,
            r#"[1, {"a": {"__type__": "nope", "__value__": 1}}]"#,
        ] {
            let v: Value = serde_json::from_str(bad).unwrap();
            assert!(check(&v).is_err(), "{bad}");
        }
        // Three keys, or one: not a typed value, left alone.
        let v: Value =
            serde_json::from_str(r#"{"__type__": "x", "__value__": 1, "y": 2}"#).unwrap();
        assert!(check(&v).is_ok());
        assert!(Typed::from_value(&v).unwrap().is_none());
    }
}
