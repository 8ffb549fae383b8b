//! A headway message as an AMQP message, the way Celery's producer and
//! worker on RabbitMQ see it: Celery's task protocol v2 (the Celery
//! layout's codec, not a copy), with kombu's AMQP mapping of the envelope.
//!
//! Over Redis, kombu wraps a message in a JSON envelope; over AMQP the same
//! pieces are the protocol's own: the v2 headers are the message's header
//! table, the body is the JSON `[args, kwargs, embed]` as it is (not
//! base64), and the properties are AMQP's — `content_type`
//! `application/json`, `content_encoding` `utf-8`, `delivery_mode` 2
//! (persistent), `priority`, `correlation_id` (the task id) and `reply_to`
//! (the producer's oid, where an `rpc://` result goes). So the codec writes
//! the envelope it writes for Redis and this module takes it apart, and on
//! the way in puts a delivery back into that envelope's shape for the
//! codec to read: the two transports cannot drift apart.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use serde_json::{Map, Number, Value};

use super::super::celery::codec::{CodecError, Decoded, Sender};
use crate::task::message::{Message, new_id};
use crate::task::state::Refused;

/// One message ready for `basic.publish` on the default exchange.
pub(super) struct Outgoing {
    /// The routing key: the Celery queue's name.
    pub queue: String,
    pub body: Vec<u8>,
    pub props: BasicProperties,
}

pub(super) fn short(s: &str, what: &str) -> Result<ShortString, Refused> {
    ShortString::try_new(s).map_err(|_| {
        Refused::Invalid(format!(
            "invalid `{what}`: {} bytes, over AMQP's 255-byte short string",
            s.len()
        ))
    })
}

/// A JSON value as an AMQP field value: py-amqp's mapping (None void,
/// bool, int 32- or 64-bit, float double, str long string, list array, dict
/// table), so a Celery worker reads back what a Celery producer would send.
pub(super) fn to_amqp(v: &Value) -> Result<AMQPValue, Refused> {
    Ok(match v {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => match i32::try_from(i) {
                Ok(i) => AMQPValue::LongInt(i),
                Err(_) => AMQPValue::LongLongInt(i),
            },
            (None, Some(f)) => AMQPValue::Double(f),
            (None, None) => AMQPValue::LongString(LongString::from(n.to_string())),
        },
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_bytes())),
        Value::Array(a) => {
            let mut out = FieldArray::default();
            for x in a {
                out.push(to_amqp(x)?);
            }
            AMQPValue::FieldArray(out)
        }
        Value::Object(o) => AMQPValue::FieldTable(to_table(o)?),
    })
}

/// A JSON object as an AMQP table (a key over 255 bytes is refused).
pub(super) fn to_table(o: &Map<String, Value>) -> Result<FieldTable, Refused> {
    let mut t = FieldTable::default();
    for (k, v) in o {
        t.insert(short(k, "header")?, to_amqp(v)?);
    }
    Ok(t)
}

/// An AMQP field value as JSON: strings and byte arrays as text (lossy for
/// bytes that are not UTF-8), numbers as numbers, decimals as floats.
pub(super) fn to_json(v: &AMQPValue) -> Value {
    let num = |f: f64| Number::from_f64(f).map_or(Value::Null, Value::Number);
    match v {
        AMQPValue::Boolean(b) => Value::Bool(*b),
        AMQPValue::ShortShortInt(i) => Value::from(*i),
        AMQPValue::ShortShortUInt(i) => Value::from(*i),
        AMQPValue::ShortInt(i) => Value::from(*i),
        AMQPValue::ShortUInt(i) => Value::from(*i),
        AMQPValue::LongInt(i) => Value::from(*i),
        AMQPValue::LongUInt(i) => Value::from(*i),
        AMQPValue::LongLongInt(i) => Value::from(*i),
        AMQPValue::Float(f) => num(*f as f64),
        AMQPValue::Double(f) => num(*f),
        AMQPValue::DecimalValue(d) => num(d.value as f64 / 10f64.powi(d.scale as i32)),
        AMQPValue::ShortString(s) => Value::String(s.as_str().to_string()),
        AMQPValue::LongString(s) => Value::String(String::from_utf8_lossy(s.as_bytes()).into()),
        AMQPValue::FieldArray(a) => Value::Array(a.as_slice().iter().map(to_json).collect()),
        AMQPValue::Timestamp(t) => Value::from(*t),
        AMQPValue::FieldTable(t) => Value::Object(table_json(t)),
        AMQPValue::ByteArray(b) => Value::String(String::from_utf8_lossy(b.as_slice()).into()),
        AMQPValue::Void => Value::Null,
    }
}

/// An AMQP table as a JSON object.
pub(super) fn table_json(t: &FieldTable) -> Map<String, Value> {
    t.inner()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), to_json(v)))
        .collect()
}

/// `m` as Celery's producer publishes it on RabbitMQ.
/// `reply_to` is the caller's reply queue: this producer's, or for a
/// retry the original caller's, so its result still finds it.
pub(super) fn encode(
    sender: &Sender,
    m: &Message,
    now: i64,
    reply_to: &str,
) -> Result<Outgoing, Refused> {
    let env = sender.encode_tagged(m, now, new_id());
    let env: Value = serde_json::from_str(&env.json)
        .map_err(|e| Refused::Invalid(format!("an envelope headway wrote is not JSON: {e}")))?;
    let headers = env
        .get("headers")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let body = sender.body(m).into_bytes();
    let queue = sender.wire_queue(&m.queue).to_string();
    let props = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("utf-8".into())
        .with_delivery_mode(2)
        .with_priority(m.priority.unwrap_or(0))
        .with_correlation_id(short(&m.id, "id")?)
        .with_reply_to(short(reply_to, "reply_to")?)
        .with_headers(to_table(&headers)?);
    short(&queue, "queue")?;
    Ok(Outgoing { queue, body, props })
}

/// A delivery from Celery queue `queue` read as a Celery worker reads it.
pub(super) fn decode(
    sender: &Sender,
    queue: &str,
    props: &BasicProperties,
    body: &[u8],
) -> Result<Decoded, CodecError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| CodecError("the body is not UTF-8".into()))?
        .to_string();
    let headers = props.headers().as_ref().map(table_json).unwrap_or_default();
    let mut info = Map::new();
    info.insert("exchange".into(), Value::String(String::new()));
    info.insert("routing_key".into(), Value::String(queue.to_string()));
    let mut p = Map::new();
    if let Some(c) = props.correlation_id() {
        p.insert("correlation_id".into(), Value::String(c.to_string()));
    }
    p.insert("delivery_info".into(), Value::Object(info));
    p.insert(
        "priority".into(),
        Value::from(props.priority().unwrap_or(0)),
    );
    let mut env = Map::new();
    env.insert("body".into(), Value::String(text));
    env.insert(
        "content-type".into(),
        Value::String(
            props
                .content_type()
                .as_ref()
                .map(|c| c.to_string())
                .unwrap_or_default(),
        ),
    );
    env.insert("headers".into(), Value::Object(headers));
    env.insert("properties".into(), Value::Object(p));
    sender.decode_value(Value::Object(env), None)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_round_trip() {
        let v = json!({"a": [1, 2.5, null, true, "x"], "b": {"c": -3}});
        let back = to_json(&to_amqp(&v).unwrap());
        assert_eq!(back, v);
        let long = "k".repeat(300);
        let mut o = Map::new();
        o.insert(long, json!(1));
        assert!(to_table(&o).is_err());
    }

    #[test]
    fn a_message_as_celery_sends_it_and_back() {
        let s = Sender::this_process("celery");
        let mut m = Message::new(
            "id-1".into(),
            "tasks.add".into(),
            vec![json!(2), json!(3)],
            Map::new(),
            "default".into(),
        );
        m.priority = Some(7);
        let out = encode(&s, &m, 0, &s.reply_to).unwrap();
        assert_eq!(out.queue, "celery");
        let body: Value = serde_json::from_slice(&out.body).unwrap();
        assert_eq!(body[0], json!([2, 3]));
        assert_eq!(
            out.props.correlation_id().as_ref().unwrap().as_str(),
            "id-1"
        );
        assert_eq!(*out.props.delivery_mode(), Some(2));
        let h = table_json(out.props.headers().as_ref().unwrap());
        assert_eq!(h["task"], json!("tasks.add"));
        assert_eq!(h["timelimit"], json!([null, null]));
        let d = decode(&s, "celery", &out.props, &out.body).unwrap();
        assert_eq!(d.message.queue, "default");
        assert_eq!(d.message.priority, Some(7));
        assert_eq!(d.message.args, vec![json!(2), json!(3)]);
    }
}
