//! A shared limit's Redis connection whose bytes a binding's event loop
//! moves: the rules of the connection here, the socket there.
//!
//! Why: on the shared link a Node `SharedBucket.take()` crosses threads
//! three times — the event loop hands the command to the multiplexed
//! connection's task on a runtime thread, the reply wakes that thread, and
//! it rings the event loop — where ioredis pays one wake-up (the reply
//! waking the loop that waits on its socket). On a 2-vCPU VM each costs
//! tens of µs: 151 µs a call against `rate-limiter-flexible`'s 86. A
//! socket on the event loop itself, fed and drained here, pays one; the
//! figure is in `bench/limits/results.md`.
//!
//! What is here: which URLs a binding's socket may serve (plain TCP to one
//! node — not TLS, a Sentinel's primary or a Cluster, whose finding and
//! following the shared link does), the handshake (`AUTH`, `SELECT`), the
//! packing of each call (`EVALSHA`, and `EVAL` once Redis says `NOSCRIPT`),
//! the pairing of replies with calls (Redis answers in order), and what a
//! lost connection means: every call still waiting is handed back, to be
//! made again on the shared link's patient path (a call may have run once
//! already — for a limit the safe side, a token taken twice), and the next
//! calls take that path too until a backoff has passed. A binding only
//! opens the socket at [`Wire::address`], writes what [`Wire::flush`]
//! gives, feeds what arrives to [`Wire::feed`] and reports a closed socket
//! to [`Wire::lost`].
//!
//! Two bindings drive it: Node's event loop (`lib/wire.js`) for every
//! call of a shared limit, and a Python asyncio loop (`headway/_wire.py`)
//! for the awaitables. Everything is sans-I/O, with time passed in: the
//! tests below drive it byte by byte, and `shared_limits_wire` in
//! tests-js and tests-py over a real socket through a lost Redis, a
//! forgotten script and a refused password.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use super::store::{self, Req};
use crate::broker::RedisUrl;
use crate::broker::redis::Topology;
use crate::flow::{Backoff, Jitter, MILLI, Nanos};
use crate::task::state::Refused;

/// A reply as Redis gave it, for the limit that asked to read
/// ([`super::SharedBucket::answer`] and the others).
pub use redis::Value as Reply;

/// A connection to one Redis, for the calls of every limit on its URL;
/// `P` is what the binding keeps for each call.
pub struct Wire<P> {
    url: RedisUrl,
    /// A socket is (being) made: the handshake went out.
    open: bool,
    /// The binding must make the socket before it writes.
    dial: bool,
    outbox: Vec<u8>,
    inbox: Vec<u8>,
    /// Handshake replies still to come.
    hello: usize,
    pending: VecDeque<(Req, P)>,
    /// Calls take the shared link until then.
    down_until: Option<Instant>,
    failures: i32,
    backoff: Backoff,
    last_delay: Nanos,
}

/// What [`Wire::feed`] came to.
pub enum Fed<P> {
    /// Calls answered (maybe none yet: a reply may arrive in pieces), each
    /// with its reply or the refusal the shared link would have given.
    Answers(Vec<(P, Result<Value, Refused>)>),
    /// Redis said what no call asked for (a failed handshake, a reply
    /// nobody waits for): the socket is done — close it and call
    /// [`Wire::lost`].
    Broken,
}

impl<P> Wire<P> {
    /// A wire for the limits on `url`, or `None` when a binding's socket
    /// does not serve it (TLS, Sentinel, Cluster: the shared link does).
    /// Refused: a URL no shared limit accepts.
    pub fn new(url: &str) -> Result<Option<Self>, Refused> {
        let url = store::parse(url)?;
        if url.tls || !matches!(url.topology, Topology::Single) {
            return Ok(None);
        }
        // The shared link's dialling: 50 ms doubling to 2 s, full jitter.
        let backoff =
            Backoff::new(50 * MILLI, 2.0, 2_000 * MILLI, i32::MAX, Jitter::Full).expect("valid");
        Ok(Some(Wire {
            url,
            open: false,
            dial: false,
            outbox: Vec::new(),
            inbox: Vec::new(),
            hello: 0,
            pending: VecDeque::new(),
            down_until: None,
            failures: 0,
            backoff,
            last_delay: 0,
        }))
    }

    /// Where the socket goes: host and port.
    pub fn address(&self) -> (&str, u16) {
        (&self.url.host, self.url.port)
    }

    /// How long a socket may stay silent while calls wait before it is
    /// given up ([`Wire::lost`]): the shared link's response timeout.
    pub fn timeout(&self) -> Duration {
        store::RESPONSE_TIMEOUT
    }

    /// Whether bytes wait to be written ([`Wire::flush`]): after a
    /// [`Wire::feed`], only when a call was queued again as `EVAL`.
    pub fn unsent(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Whether calls wait for replies (a silent socket then is a dead one).
    pub fn busy(&self) -> bool {
        !self.pending.is_empty() || self.hello > 0
    }

    /// Queues `req` to be written, `p` kept until its reply; `Err(p)` when
    /// the wire is down (after a lost socket, within its backoff): make the
    /// call on the shared link.
    pub fn push(&mut self, now: Instant, req: Req, p: P) -> Result<(), (Req, P)> {
        if self.down_until.is_some_and(|t| now < t) {
            return Err((req, p));
        }
        if !self.open {
            self.open = true;
            self.dial = true;
            self.hello = 0;
            if let Some(pass) = &self.url.password {
                match &self.url.username {
                    Some(user) => pack(
                        &mut self.outbox,
                        &[b"AUTH", user.as_bytes(), pass.as_bytes()],
                    ),
                    None => pack(&mut self.outbox, &[b"AUTH", pass.as_bytes()]),
                }
                self.hello += 1;
            }
            if self.url.db != 0 {
                pack(
                    &mut self.outbox,
                    &[b"SELECT", self.url.db.to_string().as_bytes()],
                );
                self.hello += 1;
            }
        }
        pack_call(&mut self.outbox, &req, true);
        self.pending.push_back((req, p));
        Ok(())
    }

    /// The bytes to write now, if any, and whether the socket must be made
    /// first (the first bytes after [`Wire::new`] or a lost socket). They
    /// are text: every part of a call is (a key, a script, numbers), so a
    /// binding may hand them on as a string, which costs less than a
    /// buffer it must free.
    pub fn flush(&mut self) -> Option<(String, bool)> {
        if self.outbox.is_empty() {
            return None;
        }
        let dial = std::mem::replace(&mut self.dial, false);
        // The next calls' buffer made at this one's size: one allocation
        // rather than a doubling from nothing on every turn's calls.
        let size = self.outbox.len();
        let bytes = std::mem::replace(&mut self.outbox, Vec::with_capacity(size));
        // Always text (see above); `from_utf8` only checks.
        let text = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        Some((text, dial))
    }

    /// Bytes the socket received: the calls they answer. A call Redis had
    /// no script for is queued again as `EVAL` (the next [`Wire::flush`]
    /// has it).
    pub fn feed(&mut self, bytes: &[u8]) -> Fed<P> {
        self.inbox.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut at = 0;
        while let Some((len, value)) = read(&self.inbox[at..]) {
            let frame = &self.inbox[at..at + len];
            at += len;
            let reply = match value {
                Some(v) => Ok(v),
                None => redis::parse_redis_value(frame).and_then(Value::extract_error),
            };
            if self.hello > 0 {
                self.hello -= 1;
                if reply.is_err() {
                    return Fed::Broken;
                }
                continue;
            }
            let Some((mut req, p)) = self.pending.pop_front() else {
                return Fed::Broken;
            };
            match reply {
                Err(e) if no_script(&e) && pack_call(&mut self.outbox, &req, false) => {
                    req.hash = "";
                    self.pending.push_back((req, p));
                }
                Err(e) => out.push((p, Err(self.refused(&e)))),
                Ok(v) => out.push((p, Ok(v))),
            }
            self.failures = 0;
            self.down_until = None;
        }
        self.inbox.drain(..at);
        Fed::Answers(out)
    }

    /// The socket closed (or was given up): the calls that waited, to be
    /// made again on the shared link ([`super::Limit::run`]). When calls were lost with it, the
    /// next ones take the shared link too for a backoff (`random` in
    /// [0, 1) draws its jitter); an idle socket closed by Redis costs none.
    pub fn lost(&mut self, now: Instant, random: f64) -> Vec<(Req, P)> {
        let failed = self.busy();
        self.open = false;
        self.dial = false;
        self.hello = 0;
        self.outbox.clear();
        self.inbox.clear();
        let waiting: Vec<(Req, P)> = self.pending.drain(..).collect();
        if failed {
            self.failures = self.failures.saturating_add(1);
            let d = self.backoff.delay(self.failures, random, self.last_delay);
            self.last_delay = d;
            self.down_until = Some(now + Duration::from_nanos(d.max(0) as u64));
        }
        waiting
    }

    /// A Redis error as the shared link words it.
    fn refused(&self, e: &RedisError) -> Refused {
        let url = &self.url;
        crate::broker::error::refused(e, format!("{url}: {}", url.scrub(&e.to_string())))
    }
}

fn no_script(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// Packs `req` as `EVALSHA` (`sha`) or `EVAL`; `false` when it already was
/// an `EVAL` (nothing packed: its error is the answer).
fn pack_call(out: &mut Vec<u8>, req: &Req, sha: bool) -> bool {
    if !sha && req.hash.is_empty() {
        return false;
    }
    let (verb, script): (&[u8], &str) = if sha {
        (b"EVALSHA", req.hash)
    } else {
        (b"EVAL", req.source)
    };
    out.push(b'*');
    digits(out, 4 + req.args.len());
    bulk(out, verb);
    bulk(out, script.as_bytes());
    bulk(out, b"1");
    bulk(out, req.key.as_bytes());
    for a in &req.args {
        bulk(out, a.as_bytes());
    }
    true
}

/// A command as RESP: an array of bulk strings.
fn pack(out: &mut Vec<u8>, parts: &[&[u8]]) {
    out.push(b'*');
    digits(out, parts.len());
    for p in parts {
        bulk(out, p);
    }
}

/// One bulk string.
fn bulk(out: &mut Vec<u8>, p: &[u8]) {
    out.push(b'$');
    digits(out, p.len());
    out.extend_from_slice(p);
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal, then CRLF.
fn digits(out: &mut Vec<u8>, mut n: usize) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
    out.extend_from_slice(b"\r\n");
}

/// The first whole RESP2 reply in `b`, if it holds one: its length, and
/// its value when it is one the scripts give (numbers, texts, arrays of
/// them) or the handshake's `+OK` — read here in the same pass that finds
/// its end. `None` in the value for anything else (an error, what is not
/// RESP2): redis-rs's general parser reads those (and names a
/// `NOSCRIPT`); on every reply it cost a Node `take()` a microsecond.
fn read(b: &[u8]) -> Option<(usize, Option<Value>)> {
    let line = b.windows(2).position(|w| w == b"\r\n")?;
    let head = line + 2;
    let text = std::str::from_utf8(&b[1..line]).ok();
    let n = || text.and_then(|t| t.parse::<i64>().ok());
    match *b.first()? {
        b'+' if text == Some("OK") => Some((head, Some(Value::Okay))),
        b'+' => Some((head, text.map(|t| Value::SimpleString(t.to_string())))),
        b':' => Some((head, n().map(Value::Int))),
        b'-' => Some((head, None)),
        b'$' => match n() {
            Some(n) if n < 0 => Some((head, Some(Value::Nil))),
            Some(n) => {
                let end = head.saturating_add(n as usize).saturating_add(2);
                let data = b.get(head..end)?;
                let whole = data.ends_with(b"\r\n");
                Some((
                    end,
                    whole.then(|| Value::BulkString(data[..data.len() - 2].to_vec())),
                ))
            }
            None => Some((b.len(), None)),
        },
        b'*' => match n() {
            Some(n) if n < 0 => Some((head, None)),
            Some(n) => {
                // The count sizes no allocation before its items arrive:
                // the scripts answer a few.
                let mut items = Some(Vec::with_capacity((n as usize).min(8)));
                let mut at = head;
                for _ in 0..n {
                    let (len, v) = read(&b[at..])?;
                    at += len;
                    items = items.zip(v).map(|(mut xs, v)| {
                        xs.push(v);
                        xs
                    });
                }
                Some((at, items.map(Value::Array)))
            }
            None => Some((b.len(), None)),
        },
        // Not RESP2: say it is whole, so redis-rs refuses it and the socket
        // is not waited on for ever.
        _ => Some((b.len(), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_replies_as_redis_rs_does() {
        for reply in [
            &b"+OK\r\n"[..],
            b"+PONG\r\n",
            b":-7\r\n",
            b"$-1\r\n",
            b"$0\r\n\r\n",
            b"$5\r\nab\r\nc\r\n",
            b"*3\r\n:1\r\n$3\r\ninf\r\n$4\r\n0.25\r\n",
            b"*0\r\n",
            b"*2\r\n*1\r\n:1\r\n$-1\r\n",
        ] {
            let (len, v) = read(reply).unwrap();
            assert_eq!(len, reply.len());
            assert_eq!(
                v.unwrap(),
                redis::parse_redis_value(reply).unwrap(),
                "{reply:?}"
            );
        }
        // Errors, and what is not RESP2, are left to redis-rs.
        assert!(read(b"-ERR x\r\n").unwrap().1.is_none());
        assert!(read(b"*1\r\n-ERR x\r\n").unwrap().1.is_none());
        assert!(read(b"%1\r\n").unwrap().1.is_none());
        assert!(read(b"$3\r\nabcd\r\n").unwrap().1.is_none());
    }

    fn len_of(b: &[u8]) -> Option<usize> {
        read(b).map(|(len, _)| len)
    }

    #[test]
    fn frames_whole_replies_only() {
        assert_eq!(len_of(b"+OK\r\n"), Some(5));
        assert_eq!(len_of(b"+OK\r"), None);
        assert_eq!(len_of(b"$3\r\nabc\r\n+"), Some(9));
        assert_eq!(len_of(b"$3\r\nab"), None);
        assert_eq!(len_of(b"$-1\r\n"), Some(5));
        assert_eq!(len_of(b"*2\r\n:1\r\n$1\r\nx\r\n"), Some(15));
        assert_eq!(len_of(b"*2\r\n:1\r\n$1\r\nx\r"), None);
        assert_eq!(len_of(b"*3\r\n:1\r\n"), None);
        assert_eq!(len_of(b""), None);
    }

    fn req() -> Req {
        Req {
            source: "return 1",
            hash: "abc",
            key: "k".into(),
            args: vec!["a".into()],
        }
    }

    #[test]
    fn handshakes_pairs_replies_and_retries_noscript_as_eval() {
        let mut w: Wire<u32> = Wire::new("redis://:pw@127.0.0.1:1/2").unwrap().unwrap();
        let now = Instant::now();
        assert!(w.flush().is_none());
        w.push(now, req(), 1).ok().unwrap();
        w.push(now, req(), 2).ok().unwrap();
        let (text, dial) = w.flush().unwrap();
        assert!(dial);
        assert!(
            text.starts_with("*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n")
        );
        assert_eq!(text.matches("EVALSHA").count(), 2);
        // The handshake's replies, then a NOSCRIPT for 1 and an answer for
        // 2, in two pieces.
        let Fed::Answers(a) = w.feed(b"+OK\r\n+OK\r\n-NOSCRIPT No matching script.\r\n:7") else {
            panic!("broken")
        };
        assert!(a.is_empty());
        let Fed::Answers(a) = w.feed(b"\r\n") else {
            panic!("broken")
        };
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].0, 2);
        assert_eq!(a[0].1.as_ref().unwrap(), &Value::Int(7));
        let (text, dial) = w.flush().unwrap();
        assert!(!dial);
        assert!(text.contains("$4\r\nEVAL\r\n$8\r\nreturn 1\r\n"));
        // An error from the EVAL is the answer (no third try).
        let Fed::Answers(a) = w.feed(b"-ERR boom\r\n") else {
            panic!("broken")
        };
        let e = a[0].1.as_ref().unwrap_err().to_string();
        assert!(e.contains("boom") && !e.contains("pw"), "{e}");
        assert!(w.flush().is_none());
        assert!(!w.busy());
    }

    #[test]
    fn a_lost_socket_hands_calls_back_and_backs_off() {
        let mut w: Wire<u32> = Wire::new("redis://127.0.0.1:1").unwrap().unwrap();
        let now = Instant::now();
        w.push(now, req(), 1).ok().unwrap();
        assert_eq!(
            w.lost(now, 0.999)
                .into_iter()
                .map(|(_, p)| p)
                .collect::<Vec<_>>(),
            vec![1]
        );
        // Within the backoff the call is handed back at once.
        assert_eq!(w.push(now, req(), 2).err().unwrap().1, 2);
        let later = now + Duration::from_secs(3);
        w.push(later, req(), 3).ok().unwrap();
        let (_, dial) = w.flush().unwrap();
        assert!(dial, "a new socket after the lost one");
        // A reply nobody asked for breaks the socket.
        let Fed::Answers(a) = w.feed(b":1\r\n") else {
            panic!("broken")
        };
        assert_eq!(a.len(), 1);
        assert!(matches!(w.feed(b":1\r\n"), Fed::Broken));
        // An idle socket closed costs no backoff.
        assert!(w.lost(later, 0.999).is_empty());
        assert!(w.push(later, req(), 4).is_ok());
    }

    #[test]
    fn serves_plain_tcp_to_one_node_only() {
        assert!(Wire::<()>::new("redis://h:1/0").unwrap().is_some());
        assert!(Wire::<()>::new("rediss://h:1/0").unwrap().is_none());
        assert!(
            Wire::<()>::new("redis+sentinel://h:1/m/0")
                .unwrap()
                .is_none()
        );
        assert!(Wire::<()>::new("redis+cluster://h:1").unwrap().is_none());
        assert!(Wire::<()>::new("http://h").is_err());
    }
}
