//! Golden tests of Celery's wire format, against messages a real Celery
//! 5.5.3 (kombu 5.5.4) LPUSHed (captured into `tests/data/celery/*.txt`:
//! a key line, then the envelope line).
//!
//! Each capture is decoded into headway's message and encoded back, and the
//! text must come out byte for byte as Celery wrote it — key order,
//! separators, `ensure_ascii` escapes, the reversed chain, the chord moved to
//! a chain's last link, the `celery.chain` callback.

use headway_core::broker::celery::{Sender, Typed, typed};
use headway_core::task::message::Message;
use serde_json::{Value, json};

fn captures(name: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(format!(
        "{}/tests/data/celery/{name}.txt",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with('{'))
        .map(|(i, l)| (lines[i - 1].replace("<SEP>", "\x06\x16"), l.to_string()))
        .collect()
}

fn sender_for(envelope: &Value) -> Sender {
    let mut s = Sender::this_process("celery");
    s.reply_to = envelope["properties"]["reply_to"]
        .as_str()
        .unwrap()
        .to_string();
    s
}

fn round_trip(name: &str) -> Vec<Message> {
    let mut out = Vec::new();
    for (key, raw) in captures(name) {
        let env: Value = serde_json::from_str(&raw).unwrap();
        let s = sender_for(&env);
        let d = s.decode(raw.as_bytes()).unwrap();
        let tag = d.tag.clone().unwrap();
        let again = s.encode_tagged(&d.message, 0, tag);
        assert_eq!(again.json, raw, "{name}: re-encoding changed the text");
        let step = env["properties"]["priority"].as_u64().unwrap();
        assert!(key.starts_with("celery"));
        if step == 0 {
            assert_eq!(key, "celery");
        }
        out.push(d.message);
    }
    out
}

#[test]
fn a_plain_task_round_trips_byte_for_byte() {
    let m = round_trip("simple").remove(0);
    assert_eq!(m.task, "tasks.add");
    assert_eq!(m.args, vec![json!(2), json!(3)]);
    assert_eq!(
        m.queue, "default",
        "Celery's `celery` queue is headway's `default`"
    );
    assert_eq!(m.carried_header("origin"), Some(&json!("gen700@vm")));
    assert_eq!(m.retries, 0);
}

#[test]
fn a_chain_is_read_next_first_and_written_reversed() {
    let m = round_trip("chain").remove(0);
    let tail: Vec<&str> = m.chain.iter().map(|s| s.task.as_str()).collect();
    assert_eq!(tail, ["tasks.add", "tasks.add"]);
    assert_eq!(m.chain[0].args, vec![json!(3)], "the next link comes first");
    assert!(!m.chain[0].immutable && m.chain[1].immutable);
    assert_eq!(m.chain[1].args, vec![json!(4), json!(5)]);
}

#[test]
fn chord_parts_carry_the_callback() {
    let ms = round_trip("chord");
    for m in &ms {
        let c = m.chord.as_ref().unwrap();
        assert_eq!(Some(&c.key), m.group.as_ref());
        assert_eq!(c.callback.task, "tasks.tsum");
        assert_eq!(c.callback.id, "8098df62-663b-452e-a351-9e141faf8527");
    }
    let idx: Vec<_> = ms.iter().map(|m| m.group_index).collect();
    assert_eq!(idx, [Some(1), Some(0)]);
}

#[test]
fn a_chain_inside_a_chord_carries_it_on_its_last_link() {
    let m = round_trip("chord_chainpart").remove(0);
    assert_eq!(
        m.group.as_deref(),
        Some("567d76af-b90f-43b0-875c-2f7d3167b9dc")
    );
    assert_eq!(m.group_index, Some(0));
    assert_eq!(m.chord.as_ref().unwrap().callback.task, "tasks.tsum");
    assert_eq!(m.chain.len(), 1);
}

#[test]
fn a_chain_callback_is_a_celery_chain_signature() {
    let m = round_trip("chord_chainbody").remove(0);
    let cb = &m.chord.as_ref().unwrap().callback;
    assert_eq!(cb.task, "tasks.tsum");
    assert_eq!(cb.chain.len(), 1);
    assert_eq!(cb.chain[0].task, "tasks.add");
}

#[test]
fn groups_links_and_typed_values_round_trip() {
    let g = round_trip("group");
    assert!(g.iter().all(|m| m.group.is_some() && m.chord.is_none()));
    let l = round_trip("link").remove(0);
    let c = l.carried.as_ref().unwrap();
    assert_eq!(c.callbacks.len(), 1);
    assert_eq!(c.errbacks[0]["immutable"], json!(true));
    let t = round_trip("typed").remove(0);
    assert_eq!(
        Typed::from_value(&t.args[0]).unwrap(),
        Some(Typed::DateTime("2026-01-02T03:04:05.006789+00:00".into()))
    );
    assert_eq!(
        Typed::from_value(&t.args[1])
            .unwrap()
            .unwrap()
            .uuid_hyphenated()
            .unwrap(),
        "00000000-0000-0000-0000-000000000001"
    );
    assert_eq!(
        Typed::from_value(&t.kwargs["n"]).unwrap(),
        Some(Typed::Bytes(vec![0xff, 0]))
    );
    assert_eq!(t.kwargs["s"], json!("é☃"));
}

#[test]
fn eta_expires_and_priority_are_read() {
    let (key, raw) = captures("eta").remove(0);
    assert_eq!(key, "celery\x06\x163", "priority 5 goes to step 3");
    let env: Value = serde_json::from_str(&raw).unwrap();
    let s = sender_for(&env);
    let m = s.decode(raw.as_bytes()).unwrap().message;
    assert_eq!(m.priority, Some(5));
    assert_eq!(m.eta, typed::parse_iso("2026-12-02T09:03:15.273183+00:00"));
    assert_eq!(m.expires.unwrap() - m.eta.unwrap(), 50_000);
    // Written back: the same headers but for sub-millisecond digits.
    let again: Value = serde_json::from_str(
        &s.encode_tagged(&m, m.eta.unwrap() - 10_000, "t".into())
            .json,
    )
    .unwrap();
    assert_eq!(
        again["headers"]["eta"],
        json!("2026-12-02T09:03:15.273000+00:00")
    );
    assert_eq!(again["properties"]["expiration"], json!("60000"));
    assert_eq!(again["properties"]["priority"], json!(5));
}

#[test]
fn a_concurrency_key_travels_as_a_header_and_a_signature_option() {
    use headway_core::task::message::{Options, Sig};
    let s = Sender::this_process("celery");
    let mut m = Message::new(
        "id-1".into(),
        "t".into(),
        vec![],
        serde_json::Map::new(),
        "default".into(),
    );
    m.set_concurrency_key("cust-7");
    let next = Sig::new("u", vec![]).with_options(Options {
        concurrency_key: Some("cust-8".into()),
        ..Options::default()
    });
    m.chain = vec![next];
    let enc = s.encode(&m, 0);
    let env: Value = serde_json::from_slice(enc.json.as_bytes()).unwrap();
    assert_eq!(env["headers"]["headway_concurrency_key"], json!("cust-7"));
    let back = s.decode(enc.json.as_bytes()).unwrap().message;
    assert_eq!(back.concurrency_key(), Some("cust-7"));
    assert_eq!(
        back.chain[0].options.concurrency_key.as_deref(),
        Some("cust-8")
    );
    // The positive control: a message sent without one has none.
    let plain = Message::new(
        "id-2".into(),
        "t".into(),
        vec![],
        serde_json::Map::new(),
        "default".into(),
    );
    let enc = s.encode(&plain, 0);
    assert_eq!(
        s.decode(enc.json.as_bytes())
            .unwrap()
            .message
            .concurrency_key(),
        None
    );
}
