//! A layout kit: one way to make a broker of each layout — the in-memory
//! broker, headway's own Redis layout, Celery's Redis layout — and the
//! operations the reliability scenarios need, so one scenario is written
//! once and run on every layout it applies to.
//!
//! The layouts promise the same things in different words: a dropped
//! holder is lost when its lease lapses (own layout), when its claim is older
//! than the visibility timeout (Celery's), or when told (memory). What
//! differs — the keys a layout keeps in Redis, the bytes a producer of it
//! writes, the reasons it gives for bytes it cannot read — is answered here,
//! per layout, and nowhere in the scenarios.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use headway_core::broker::celery::{CeleryBroker, CeleryOptions};
use headway_core::broker::memory::MemoryOptions;
use headway_core::broker::{MemoryBroker, RedisBroker, RedisOptions};
use headway_core::task::{App, Broker, Clock, Inspector, Message, Refused, Seams, SystemClock};

use super::RedisServer;

/// Where messages live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Memory,
    /// headway's own Redis layout (`broker::RedisBroker`).
    Redis,
    /// Celery's Redis layout (`broker::celery::CeleryBroker`).
    Celery,
}

impl Layout {
    pub const ALL: [Layout; 3] = [Layout::Memory, Layout::Redis, Layout::Celery];
    /// The layouts a second process can share: both Redis ones.
    pub const SHARED: [Layout; 2] = [Layout::Redis, Layout::Celery];

    pub fn name(self) -> &'static str {
        match self {
            Layout::Memory => "memory",
            Layout::Redis => "redis",
            Layout::Celery => "celery",
        }
    }

    /// The layout named `name` (as [`Layout::name`] spells it).
    pub fn parse(name: &str) -> Layout {
        match name {
            "memory" => Layout::Memory,
            "redis" => Layout::Redis,
            "celery" => Layout::Celery,
            other => panic!("unknown layout {other}"),
        }
    }
}

/// How a broker of a Redis layout is opened, in the terms both share.
#[derive(Clone, Debug)]
pub struct Opts {
    /// The consumer's name (the own layout's consumer, Celery's node).
    pub name: String,
    /// How long a dropped holder's claims stay its own: the own layout's
    /// lease, Celery's visibility timeout.
    pub lease: Duration,
    /// How often the broker recovers lost holders' claims by itself (`None`:
    /// only when asked).
    pub recover_every: Option<Duration>,
    /// The size cap (the layout's default when `None`).
    pub max_message_bytes: Option<usize>,
    /// How long a beat leads without renewing (the default when `None`).
    pub beat_lease: Option<Duration>,
    /// How many lost holders make a poison pill (the default when `None`).
    pub max_deliveries: Option<u32>,
}

impl Opts {
    /// `name`, a 30 s lease, no recovery of its own.
    pub fn named(name: &str) -> Opts {
        Opts {
            name: name.into(),
            lease: Duration::from_secs(30),
            recover_every: None,
            max_message_bytes: None,
            beat_lease: None,
            max_deliveries: None,
        }
    }

    pub fn lease(self, lease: Duration) -> Opts {
        Opts { lease, ..self }
    }

    pub fn recover_every(self, every: Duration) -> Opts {
        Opts {
            recover_every: Some(every),
            ..self
        }
    }

    pub fn cap(self, bytes: usize) -> Opts {
        Opts {
            max_message_bytes: Some(bytes),
            ..self
        }
    }

    pub fn beat_lease(self, lease: Duration) -> Opts {
        Opts {
            beat_lease: Some(lease),
            ..self
        }
    }

    fn redis(&self) -> RedisOptions {
        let d = RedisOptions::default();
        RedisOptions {
            consumer: Some(self.name.clone()),
            lease: self.lease,
            recover_every: self.recover_every,
            max_message_bytes: self.max_message_bytes.unwrap_or(d.max_message_bytes),
            beat_lease: self.beat_lease.unwrap_or(d.beat_lease),
            max_deliveries: self.max_deliveries.unwrap_or(d.max_deliveries),
            ..d
        }
    }

    fn celery(&self) -> CeleryOptions {
        let d = CeleryOptions::default();
        CeleryOptions {
            consumer: Some(self.name.clone()),
            visibility_timeout: self.lease,
            restore_every: self.recover_every,
            max_message_bytes: self.max_message_bytes.unwrap_or(d.max_message_bytes),
            beat_lease: self.beat_lease.unwrap_or(d.beat_lease),
            max_deliveries: self.max_deliveries.unwrap_or(d.max_deliveries),
            ..d
        }
    }
}

/// One broker of a layout, as its own type.
#[derive(Clone)]
pub enum Conn {
    Memory(Arc<MemoryBroker>),
    Redis(Arc<RedisBroker>),
    Celery(Arc<CeleryBroker>),
}

impl Conn {
    /// A broker of `layout` (a Redis one) on `url`, opened by `opts`.
    pub async fn open(layout: Layout, url: &str, opts: &Opts) -> Result<Conn, Refused> {
        Conn::open_with(layout, url, opts, Arc::new(SystemClock)).await
    }

    /// As [`Conn::open`], on `clock`.
    pub async fn open_with(
        layout: Layout,
        url: &str,
        opts: &Opts,
        clock: Arc<dyn Clock>,
    ) -> Result<Conn, Refused> {
        Ok(match layout {
            Layout::Memory => panic!("a memory broker has no URL"),
            Layout::Redis => Conn::Redis(RedisBroker::connect(url, opts.redis(), clock).await?),
            Layout::Celery => Conn::Celery(CeleryBroker::connect(url, opts.celery(), clock).await?),
        })
    }

    pub fn seams(&self) -> Seams {
        match self {
            Conn::Memory(b) => Seams {
                broker: b.clone(),
                backend: Some(b.clone()),
                counter: Some(b.clone()),
                inspector: Some(b.clone()),
            },
            Conn::Redis(b) => b.seams(),
            Conn::Celery(b) => b.seams(),
        }
    }

    pub fn broker(&self) -> Arc<dyn Broker> {
        match self {
            Conn::Memory(b) => b.clone(),
            Conn::Redis(b) => b.clone(),
            Conn::Celery(b) => b.clone(),
        }
    }

    pub fn inspector(&self) -> Arc<dyn Inspector> {
        match self {
            Conn::Memory(b) => b.clone(),
            Conn::Redis(b) => b.clone(),
            Conn::Celery(b) => b.clone(),
        }
    }

    /// An app on this broker. On Celery's layout the broker is told the
    /// app, so a task it does not register is handed back to another
    /// consumer rather than run or buried, as Celery's workers share queues.
    pub fn app(&self) -> App {
        let app = App::new(self.seams(), Arc::new(SystemClock));
        if let Conn::Celery(b) = self {
            b.route_for(&app);
        }
        app
    }

    /// Puts `raw` on `queue` as another producer would, unchecked.
    pub async fn push_raw(&self, queue: &str, raw: &[u8]) {
        match self {
            Conn::Memory(b) => b.push_raw(queue, raw),
            Conn::Redis(b) => b.push_raw(queue, raw).await.unwrap(),
            Conn::Celery(b) => b.push_raw(queue, raw).await.unwrap(),
        }
    }

    /// A clean exit: the beat lease and what it holds are given up.
    pub async fn close(&self) {
        match self {
            Conn::Memory(_) => {}
            Conn::Redis(b) => b.close().await,
            Conn::Celery(b) => {
                b.close().await.unwrap();
            }
        }
    }

    /// How many messages wait on `queue`, at every priority (not held, not
    /// delayed). Celery's inspector knows the queues this broker has used.
    pub async fn ready(&self, queue: &str) -> u64 {
        self.inspector()
            .queues()
            .await
            .unwrap()
            .iter()
            .find(|q| q.name == queue)
            .map_or(0, |q| q.ready.values().sum())
    }

    /// How many messages are claimed from `queue` and not settled.
    pub async fn unacked(&self, queue: &str) -> u64 {
        self.inspector()
            .queues()
            .await
            .unwrap()
            .iter()
            .find(|q| q.name == queue)
            .map_or(0, |q| q.unacked)
    }

    /// The bytes a producer of this layout puts on a queue for `m`.
    pub fn encode(&self, m: &Message) -> Vec<u8> {
        match self {
            Conn::Memory(_) | Conn::Redis(_) => m.to_json(),
            Conn::Celery(b) => b.sender().encode(m, 0).json.into_bytes(),
        }
    }

    /// The message in bytes this layout keeps (a queue's, a dead letter's).
    pub fn decode(&self, raw: &[u8]) -> Message {
        match self {
            Conn::Memory(_) | Conn::Redis(_) => Message::from_json(raw).unwrap(),
            Conn::Celery(b) => b.sender().decode(raw).unwrap().message,
        }
    }
}

/// One malformed input, the start of the reason it is quarantined for, and
/// the id its dead letter keeps.
pub struct Bad {
    pub what: &'static str,
    pub raw: Vec<u8>,
    pub why: &'static str,
    pub id: Option<&'static str>,
}

/// One broker under test, and what keeps it alive: the redis-server of a
/// Redis layout, dropped (killed) with the kit.
pub struct Kit {
    pub layout: Layout,
    pub main: Conn,
    server: Option<RedisServer>,
}

impl Kit {
    /// A fresh broker of `layout` named "main", or `None` (skip) for a Redis
    /// layout without a redis-server.
    pub async fn start(layout: Layout) -> Option<Kit> {
        Kit::start_with(layout, false).await
    }

    /// As [`Kit::start`]; a Redis layout's server keeps every acknowledged
    /// write across a kill -9 when `appendonly`.
    pub async fn start_with(layout: Layout, appendonly: bool) -> Option<Kit> {
        if layout == Layout::Memory {
            return Some(Kit {
                layout,
                main: Conn::Memory(MemoryBroker::new(Arc::new(SystemClock))),
                server: None,
            });
        }
        let server = RedisServer::start_with(appendonly)?;
        let main = Conn::open(layout, &server.url(), &Opts::named("main"))
            .await
            .unwrap();
        Some(Kit {
            layout,
            main,
            server: Some(server),
        })
    }

    /// A kit of each of `layouts` that can start here, in that order.
    pub async fn all(layouts: &[Layout]) -> Vec<Kit> {
        let mut out = Vec::new();
        for &l in layouts {
            out.extend(Kit::start(l).await);
        }
        out
    }

    pub fn name(&self) -> &'static str {
        self.layout.name()
    }

    pub fn seams(&self) -> Seams {
        self.main.seams()
    }

    pub fn broker(&self) -> Arc<dyn Broker> {
        self.main.broker()
    }

    pub fn inspector(&self) -> Arc<dyn Inspector> {
        self.main.inspector()
    }

    pub fn app(&self) -> App {
        self.main.app()
    }

    pub async fn push_raw(&self, queue: &str, raw: &[u8]) {
        self.main.push_raw(queue, raw).await
    }

    pub fn encode(&self, m: &Message) -> Vec<u8> {
        self.main.encode(m)
    }

    /// The redis-server of a Redis layout.
    pub fn server(&self) -> &RedisServer {
        self.server.as_ref().expect("a Redis layout")
    }

    pub fn server_mut(&mut self) -> &mut RedisServer {
        self.server.as_mut().expect("a Redis layout")
    }

    pub fn url(&self) -> String {
        self.server().url()
    }

    /// Another broker on the same store: a memory broker's consumer handle
    /// (`opts.name`; the rest is the store's), a new connection on Redis.
    pub async fn open(&self, opts: Opts) -> Conn {
        self.try_open(&opts).await.unwrap()
    }

    pub async fn try_open(&self, opts: &Opts) -> Result<Conn, Refused> {
        match &self.main {
            Conn::Memory(b) => Ok(Conn::Memory(b.handle(&opts.name))),
            _ => Conn::open(self.layout, &self.url(), opts).await,
        }
    }

    /// A broker of this layout on its own store with a size cap of `cap`
    /// bytes: on memory a new broker (its cap is the store's), on Redis a
    /// connection to the same server.
    pub async fn capped(&self, name: &str, cap: usize) -> Conn {
        match &self.main {
            Conn::Memory(_) => Conn::Memory(MemoryBroker::with_options(
                Arc::new(SystemClock),
                MemoryOptions {
                    max_message_bytes: cap,
                    ..MemoryOptions::default()
                },
            )),
            _ => self.open(Opts::named(name).cap(cap)).await,
        }
    }

    /// How long a dropped holder stays the holder here: the own layout's
    /// lease and Celery's visibility timeout, short so a scenario sees a few
    /// losses in seconds (memory: when told, by [`Kit::lose`]).
    pub fn lost_after(&self) -> Duration {
        match self.layout {
            Layout::Memory => Duration::from_millis(150),
            Layout::Redis => Duration::from_millis(150),
            // Celery's restore reads claim times in seconds; a second is its
            // shortest honest timeout.
            Layout::Celery => Duration::from_secs(1),
        }
    }

    /// Another consumer that, once dropped, is lost after
    /// [`Kit::lost_after`]; it recovers nothing itself.
    pub async fn consumer(&self, name: &str) -> Arc<dyn Broker> {
        self.open(Opts::named(name).lease(self.lost_after()))
            .await
            .broker()
    }

    /// A consumer that recovers lost holders' claims by itself, often (on
    /// memory, the main broker: [`Kit::lose`] recovers there).
    pub async fn sweeper(&self, name: &str) -> Conn {
        match &self.main {
            Conn::Memory(_) => self.main.clone(),
            _ => {
                self.open(
                    Opts::named(name)
                        .lease(self.lost_after())
                        .recover_every(Duration::from_millis(50)),
                )
                .await
            }
        }
    }

    /// Makes consumer `name` (made by [`Kit::consumer`], then dropped) lost,
    /// and on memory recovers its claims (on Redis a sweeper does that by
    /// itself). Its claims on `queue` are what is waited for.
    pub async fn lose(&self, name: &str, queue: &str) {
        match &self.main {
            Conn::Memory(b) => {
                b.expire(name);
                b.recover().await.unwrap();
            }
            Conn::Redis(_) => {
                // Dropped, it refreshes no more: wait for the lease to lapse.
                let key = format!("headway:{{{queue}}}:lease:{name}");
                let deadline = Instant::now() + self.lost_after() * 10;
                while self.server().cli(&["EXISTS", &key]) != "0" {
                    assert!(Instant::now() < deadline, "{name}'s lease never lapsed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            // No lease: the claim is lost once older than the visibility
            // timeout, which a sweeper sees by itself.
            Conn::Celery(_) => {}
        }
    }

    /// How many messages wait on `queue`, at every priority, as the main
    /// broker's inspector sees them.
    pub async fn ready(&self, queue: &str) -> u64 {
        self.main.ready(queue).await
    }

    /// How many messages are claimed from `queue` and not settled.
    pub async fn unacked(&self, queue: &str) -> u64 {
        self.main.unacked(queue).await
    }

    /// The Redis list of `queue`'s default priority, read past the broker.
    pub fn ready_key(&self, queue: &str) -> String {
        match &self.main {
            Conn::Memory(_) => panic!("a memory broker has no keys"),
            Conn::Redis(_) => format!("headway:{{{queue}}}:ready:0"),
            Conn::Celery(b) => b.queue_key(queue, 0),
        }
    }

    /// `LLEN` of `queue`'s default priority list, read past the broker.
    pub fn ready_len(&self, queue: &str) -> usize {
        let s = self.server();
        s.cli(&["LLEN", &self.ready_key(queue)]).parse().unwrap()
    }

    /// How many claims of `queue` consumer `name` holds, read past the
    /// broker (on Celery's layout, every consumer's: kombu's `unacked` hash
    /// does not say whose a claim is).
    pub fn held_len(&self, queue: &str, name: &str) -> usize {
        let s = self.server();
        match self.layout {
            Layout::Redis => s
                .cli(&["LLEN", &format!("headway:{{{queue}}}:held:{name}")])
                .parse()
                .unwrap(),
            Layout::Celery => s.cli(&["HLEN", "unacked"]).parse().unwrap(),
            Layout::Memory => panic!("a memory broker has no keys"),
        }
    }

    /// Who holds the beat lease, read past the broker (Celery's layout adds
    /// `#<instance>` to the name; this answers the name).
    pub fn beat_leader(&self) -> String {
        let s = self.server();
        match self.layout {
            Layout::Redis => s.cli(&["GET", "headway:{beat}:beat:lease"]),
            Layout::Celery => {
                let v = s.cli(&["GET", "headway.celery.beat.lease"]);
                v.split('#').next().unwrap_or_default().to_string()
            }
            Layout::Memory => panic!("a memory broker has no keys"),
        }
    }

    /// The last slot of `entry` fired, read past the broker (0: none).
    pub fn beat_fired(&self, entry: &str) -> i64 {
        let key = match self.layout {
            Layout::Redis => "headway:{beat}:beat:fired",
            Layout::Celery => "headway.celery.beat.fired",
            Layout::Memory => panic!("a memory broker has no keys"),
        };
        self.server()
            .cli(&["HGET", key, entry])
            .parse()
            .unwrap_or(0)
    }

    /// Bytes this layout quarantines on a claim, whose id (`id`) it can
    /// still read: a message with no task name on the own layout; on
    /// Celery's, a pickled envelope (a consumer that reads JSON only).
    pub fn bad_with_id(&self, id: &str, queue: &str) -> Vec<u8> {
        match self.layout {
            Layout::Memory | Layout::Redis => {
                format!(r#"{{"id":"{id}","queue":"{queue}"}}"#).into_bytes()
            }
            Layout::Celery => celery_envelope(
                "application/x-python-serialize",
                &format!(r#"{{"task": "t", "id": "{id}"}}"#),
                "gAR=",
                &format!("t-{id}"),
            ),
        }
    }

    /// Each malformed input for this layout, in the shapes its producers
    /// could write, with its reason and the id its dead letter keeps.
    pub fn malformed(&self) -> Vec<Bad> {
        match self.layout {
            Layout::Memory | Layout::Redis => own_malformed(),
            Layout::Celery => celery_malformed(),
        }
    }
}

pub const PWNED: &str = "/tmp/headway-pickle-pwned";

/// `pickle.dumps(P(), protocol=4)` where `P.__reduce__` is
/// `(os.system, ("touch /tmp/headway-pickle-pwned",))`: unpickling it runs
/// a shell command.
pub fn evil_pickle() -> Vec<u8> {
    let hex = "8004953a000000000000008c05706f736978948c0673797374656d9493948c1f746f756368202f746d702f686561647761792d7069636b6c652d70776e656494859452942e";
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// The same pickle, base64 as an envelope's body carries it.
const EVIL_PICKLE_B64: &str =
    "gASVOgAAAAAAAACMBXBvc2l4lIwGc3lzdGVtlJOUjB90b3VjaCAvdG1wL2hlYWR3YXktcGlja2xlLXB3bmVklIWUUpQu";

fn own_malformed() -> Vec<Bad> {
    let envelope = |ct: &str, body: &str| {
        format!(
            r#"{{"body":"{body}","content-encoding":"utf-8","content-type":"{ct}","headers":{{"lang":"py","task":"add","id":"env-1"}},"properties":{{"body_encoding":"base64","delivery_tag":"t1"}}}}"#
        )
        .into_bytes()
    };
    let mut big = vec![b' '; headway_core::task::MAX_MESSAGE_BYTES];
    big[0] = b'{';
    big.push(b'}');
    vec![
        Bad {
            what: "raw bytes",
            raw: b"\x00\x01\xfe\xff not a message".to_vec(),
            why: "not JSON",
            id: None,
        },
        Bad {
            what: "bad JSON",
            raw: br#"{"id":"bj-1","task":"add","#.to_vec(),
            why: "bad JSON",
            id: None,
        },
        Bad {
            what: "no task name",
            raw: br#"{"id":"nt-1","queue":"default","args":[1]}"#.to_vec(),
            why: "no task name",
            id: Some("nt-1"),
        },
        Bad {
            what: "wrong protocol",
            raw: envelope("application/json", "W1sxLDJdLHt9LHt9XQ=="),
            why: "wrong protocol",
            id: Some("env-1"),
        },
        Bad {
            what: "bad base64",
            raw: envelope("application/json", "!!!not base64!!!"),
            why: "wrong protocol",
            id: Some("env-1"),
        },
        Bad {
            what: "pickle",
            raw: evil_pickle(),
            why: "content type not allowed: a pickle",
            id: None,
        },
        Bad {
            what: "pickle in an envelope",
            raw: envelope("application/x-python-serialize", EVIL_PICKLE_B64),
            why: "content type not allowed: \"application/x-python-serialize\"",
            id: Some("env-1"),
        },
        Bad {
            what: "over the size cap",
            raw: big,
            why: "too large",
            id: None,
        },
    ]
}

/// A kombu envelope as Celery writes one, with the given content type,
/// headers (JSON text) and body (already encoded).
pub fn celery_envelope(ct: &str, headers: &str, body: &str, tag: &str) -> Vec<u8> {
    format!(
        r#"{{"body": "{body}", "content-encoding": "utf-8", "content-type": "{ct}", "headers": {headers}, "properties": {{"delivery_mode": 2, "delivery_info": {{"exchange": "", "routing_key": "celery"}}, "priority": 0, "body_encoding": "base64", "delivery_tag": "{tag}"}}}}"#
    )
    .into_bytes()
}

/// Standard base64 with padding.
pub fn b64(raw: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in raw.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn celery_malformed() -> Vec<Bad> {
    let args = b64(
        b"[[1, 2], {}, {\"callbacks\": null, \"errbacks\": null, \"chain\": null, \"chord\": null}]",
    );
    let v1 = b64(
        br#"{"task": "add", "id": "v1-1", "args": [1, 2], "kwargs": {}, "retries": 0, "eta": null}"#,
    );
    let task = r#"{"lang": "py", "task": "add", "id": "env-1"}"#;
    let mut big = celery_envelope("application/json", task, &args, "big");
    big.resize(headway_core::task::MAX_MESSAGE_BYTES + 1, b' ');
    vec![
        Bad {
            what: "raw bytes",
            raw: b"\x00\x01\xfe\xff not a message".to_vec(),
            why: "not JSON",
            id: None,
        },
        Bad {
            what: "bad JSON",
            raw: br#"{"body": "W10=", "content-type": "#.to_vec(),
            why: "bad JSON",
            id: None,
        },
        Bad {
            what: "bad base64",
            raw: celery_envelope("application/json", task, "!!!not base64!!!", "b64"),
            why: "bad message: the body is not base64",
            id: Some("env-1"),
        },
        Bad {
            what: "no task header",
            raw: celery_envelope(
                "application/json",
                r#"{"lang": "py", "id": "nt-1"}"#,
                &args,
                "nt",
            ),
            why: "no task name",
            id: Some("nt-1"),
        },
        Bad {
            what: "protocol 1",
            raw: celery_envelope("application/json", "{}", &v1, "v1"),
            why: "wrong protocol: Celery task protocol 1",
            id: Some("v1-1"),
        },
        Bad {
            what: "headway's own form",
            raw: br#"{"id":"hw-1","task":"add","queue":"default","args":[1]}"#.to_vec(),
            why: "wrong protocol: a headway message",
            id: Some("hw-1"),
        },
        Bad {
            what: "pickle",
            raw: evil_pickle(),
            why: "content type not allowed: a pickle",
            id: None,
        },
        Bad {
            what: "pickle in an envelope",
            raw: celery_envelope(
                "application/x-python-serialize",
                // A task this app runs: another's is handed back instead
                // (celery_unknown.rs), since a Celery worker may take pickle.
                r#"{"lang": "py", "task": "good", "id": "pk-1"}"#,
                EVIL_PICKLE_B64,
                "pk",
            ),
            why: "content type not allowed: \"application/x-python-serialize\"",
            id: Some("pk-1"),
        },
        Bad {
            what: "over the size cap",
            raw: big,
            why: "too large",
            id: None,
        },
    ]
}
