//! The fuzz targets of `core/fuzz` on stable Rust: each is fed its seeds,
//! known-bad inputs from other projects' trackers, a few huge ones, and a
//! few thousand seeded mutations, and must not panic, must answer each input
//! within a bound, and must not allocate more than a small multiple of the
//! input (measured per thread by a counting allocator).
//!
//! cargo-fuzz (`bench/fuzz.sh`) explores far more, with coverage, on
//! nightly; this is what CI runs everywhere. `HEADWAY_FUZZ_SMOKE_N` sets
//! the mutations per target (3000), `HEADWAY_FUZZ_SMOKE_SEED` the seed.

#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod targets;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Counts bytes allocated by the current thread: live now, and the peak.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let now = l.get() + delta;
        l.set(now);
        let _ = PEAK.try_with(|p| {
            if now > p.get() {
                p.set(now);
            }
        });
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        track(new as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// SplitMix64: a seeded generator with no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Tokens that matter to one of the grammars, spliced in whole.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "\\",
    "\\u0000",
    "\\ud800",
    "\\udfff",
    "1e999999",
    "-0",
    "99999999999999999999",
    "null",
    "true",
    "\"id\"",
    "\"task\"",
    "\"queue\"",
    "\"body\"",
    "\"content-type\"",
    "\"headers\"",
    "\"properties\"",
    "\"body_encoding\"",
    "\"base64\"",
    "\"__type__\"",
    "\"datetime\"",
    "\"eta\"",
    "\"chain\"",
    "\"chord\"",
    "*",
    "/",
    "-",
    "L",
    "W",
    "#",
    "?",
    "@",
    "%",
    "%zz",
    "%40",
    "\n",
    " ",
    "\t",
    "60",
    "0",
    "31",
    "FEB",
    "MON",
    "@reboot",
    "rediss://",
    "redis://",
    "[::1]",
    ":65536",
    "//",
    "\u{d7}",
    "\u{fffd}",
    "\"method\"",
    "\"arguments\"",
    "\"task_id\"",
    "\"destination\"",
    "\"status\"",
    "\"exc_type\"",
    "\"exc_message\"",
    "\"date_done\"",
    "\"retries\"",
    "\"expires\"",
    "\"countdown\"",
    "\"options\"",
    "1e300",
    "-1e300",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "9999-12-31T23:59:59",
    "\u{80}",
];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(8) {
        let len = out.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = rng.next() as u8;
            }
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let i = rng.below(len + 1);
                out.splice(i..i, t.iter().copied());
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let j = (i + 1 + rng.below(16)).min(len);
                out.drain(i..j);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let j = (i + 1 + rng.below(32)).min(len);
                let part = out[i..j].to_vec();
                for _ in 0..1 + rng.below(4) {
                    out.splice(j..j, part.iter().copied());
                }
            }
            5 => {
                let other = &seeds[rng.below(seeds.len())];
                if !other.is_empty() {
                    let a = rng.below(other.len());
                    let b = (a + rng.below(other.len() - a) + 1).min(other.len());
                    let i = rng.below(len + 1);
                    out.splice(i..i, other[a..b].iter().copied());
                }
            }
            6 if len > 0 => out.truncate(rng.below(len)),
            _ => out.push(rng.next() as u8),
        }
    }
    out.truncate(64 * 1024);
    out
}

/// How long one input may take (a debug build): a hang is an answer that
/// takes seconds.
const TIME: Duration = Duration::from_secs(2);

/// How much one input may make a target allocate at its peak: 128 bytes per
/// input byte, and 1 MiB. The worst case is JSON's densest array, `[1,1,…]`:
/// 2 input bytes per element and 80 bytes per `serde_json::Value` (with
/// `preserve_order`), doubled for a moment while the array's vector grows.
/// Proportional, so the size cap bounds it: a 16 MiB message can cost a
/// worker about 2 GiB at worst — lower `max_message_bytes` on small workers.
fn alloc_bound(len: usize) -> isize {
    (128 * len + (1 << 20)) as isize
}

struct Worst {
    time: Duration,
    alloc: isize,
}

fn run_one(name: &str, target: fn(&[u8]), input: &[u8], worst: &mut Worst) {
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let t = Instant::now();
    let r = std::panic::catch_unwind(|| target(input));
    let took = t.elapsed();
    let peak = PEAK.with(Cell::get) - before;
    let shown = String::from_utf8_lossy(&input[..input.len().min(300)]).into_owned();
    assert!(
        r.is_ok(),
        "{name} panicked on {} bytes: {shown:?}",
        input.len()
    );
    assert!(
        took < TIME,
        "{name} took {took:?} on {} bytes: {shown:?}",
        input.len()
    );
    assert!(
        peak <= alloc_bound(input.len()),
        "{name} allocated {peak} bytes at its peak for {} bytes of input: {shown:?}",
        input.len()
    );
    worst.time = worst.time.max(took);
    worst.alloc = worst.alloc.max(peak);
}

fn smoke(name: &str, target: fn(&[u8]), extra: Vec<Vec<u8>>) {
    let n: usize = std::env::var("HEADWAY_FUZZ_SMOKE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let seed: u64 = std::env::var("HEADWAY_FUZZ_SMOKE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x6865_6164_7761_7937);
    let mut seeds = targets::seeds(name);
    assert!(!seeds.is_empty(), "no seeds for {name}");
    let mut worst = Worst {
        time: Duration::ZERO,
        alloc: 0,
    };
    for s in seeds.iter().chain(&extra) {
        run_one(name, target, s, &mut worst);
    }
    // Quiet about expected panics' messages? None are expected: a panic
    // fails the test with its input.
    let mut rng = Rng(seed);
    let mut pool = seeds.clone();
    for _ in 0..n {
        let base = pool[rng.below(pool.len())].clone();
        let input = mutate(&mut rng, &seeds, &base);
        run_one(name, target, &input, &mut worst);
        // Keep some mutants as bases, so mutations stack up.
        if rng.below(8) == 0 && pool.len() < 512 {
            pool.push(input);
        }
    }
    seeds.clear();
    eprintln!(
        "{name}: {n} mutations of seed {seed:#x}: slowest {:?}, most allocated {} bytes",
        worst.time, worst.alloc
    );
}

fn big(unit: &str, times: usize) -> Vec<u8> {
    unit.repeat(times).into_bytes()
}

#[test]
fn message_decoder() {
    smoke(
        "message",
        targets::message,
        vec![
            big("[", 100_000),
            [
                b"{\"id\":\"a\",\"task\":\"t\",\"queue\":\"q\",\"args\":".as_slice(),
                &big("[", 5_000),
            ]
            .concat(),
            [
                b"{\"id\":\"a\",\"task\":\"t\",\"queue\":\"q\",\"args\":[".as_slice(),
                &big("1,", 200_000),
                b"1]}",
            ]
            .concat(),
            [b"{\"id\":\"".as_slice(), &big("\\u0041", 100_000), b"\"}"].concat(),
            b"\x80\x04\x95".to_vec(),
        ],
    );
}

#[test]
fn celery_decoder() {
    smoke(
        "celery",
        targets::celery,
        vec![
            big("{\"body\":", 20_000),
            [b"{\"body\":\"".as_slice(), &big("QUFB", 100_000), b"\",\"content-type\":\"application/json\",\"properties\":{\"body_encoding\":\"base64\"}}"].concat(),
            b"{\"body\":\"W1tdLHt9LHt9XQ==\",\"content-type\":\"application/x-python-serialize\",\"properties\":{}}".to_vec(),
        ],
    );
}

#[test]
fn cron_parser() {
    smoke(
        "cron",
        targets::cron,
        vec![
            // a line of 10k fields (one once hung fugit's cron parser).
            big("1 ", 10_000),
            // A 5-field line with a huge list.
            [big("0,", 20_000).as_slice(), b"0 * * * *"].concat(),
            big("*/1", 30_000),
            b"0 0 31 2 *".to_vec(),
            b"0 0 * * *\nNot/AZone".to_vec(),
            b"0 0 * * *\nTZ=TZ=TZ=".to_vec(),
        ],
    );
}

#[test]
fn redis_url_parser() {
    smoke(
        "url",
        targets::url,
        vec![
            [b"redis://".as_slice(), &big("a", 60_000)].concat(),
            [b"redis://u:".as_slice(), &big("%41", 20_000), b"@h"].concat(),
            [b"redis://".as_slice(), &big("@", 30_000), b"h"].concat(),
            b"redis://[".to_vec(),
        ],
    );
}

#[test]
fn celery_claim_decoder() {
    smoke(
        "celery_dead",
        targets::celery_dead,
        vec![
            big(" ", 60_000),
            [b"{\"body\":\"".as_slice(), &big("QUFB", 100_000), b"\",\"content-type\":\"application/json\",\"headers\":{\"task\":\"t\",\"id\":\"i\"},\"properties\":{\"body_encoding\":\"base64\"}}"].concat(),
            [b"{\"body\":\"".as_slice(), &big("[", 5_000), b"\",\"content-type\":\"application/json\",\"headers\":{}}"].concat(),
            vec![0x80; 1000],
        ],
    );
}

#[test]
fn pidbox_parser() {
    smoke(
        "pidbox",
        targets::pidbox,
        vec![
            [
                b"{\"body\":\"{\\\"method\\\":\\\"revoke\\\",\\\"arguments\\\":{\\\"task_id\\\":["
                    .as_slice(),
                &big("\\\"a\\\",", 20_000),
                b"\\\"b\\\"]}}\"}",
            ]
            .concat(),
            [
                b"{\"body\":\"".as_slice(),
                &big("e30=", 50_000),
                b"\",\"properties\":{\"body_encoding\":\"base64\"}}",
            ]
            .concat(),
        ],
    );
}

#[test]
fn celery_result_meta_parser() {
    smoke(
        "result_meta",
        targets::result_meta,
        vec![
            [
                b"{\"status\":\"FAILURE\",\"result\":{\"exc_type\":\"E\",\"exc_message\":["
                    .as_slice(),
                &big("1,", 100_000),
                b"1]}}",
            ]
            .concat(),
            [
                b"{\"status\":\"SUCCESS\",\"result\":".as_slice(),
                &big("[", 5_000),
            ]
            .concat(),
        ],
    );
}

/// Every binary `core/fuzz/Cargo.toml` declares is a target with seeds,
/// and each of them has a smoke test here (the list below): a target added
/// there without one fails this test.
#[test]
fn every_fuzz_target_has_seeds_and_a_smoke_test() {
    const SMOKED: [&str; 7] = [
        "message",
        "celery",
        "celery_dead",
        "pidbox",
        "result_meta",
        "cron",
        "url",
    ];
    let manifest = include_str!("../fuzz/Cargo.toml");
    let bins: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| *n != "headway-fuzz")
        .collect();
    assert!(bins.len() >= 7, "{bins:?}");
    for b in &bins {
        assert!(SMOKED.contains(b), "fuzz target {b} has no smoke test here");
        assert!(
            !targets::seeds(b).is_empty(),
            "fuzz target {b} has no seeds"
        );
    }
    for t in SMOKED {
        assert!(bins.contains(&t), "{t} is not a cargo-fuzz target");
    }
}
