//! Writes each target's seeds (`headway_fuzz::seeds`) into `<dir>/<target>/`
//! so libFuzzer starts from valid inputs and known-bad ones:
//! `cargo run --example seeds -- corpus` (what `bench/fuzz.sh` does).

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "corpus".into());
    for t in ["message", "celery", "cron", "url"] {
        let d = std::path::Path::new(&dir).join(t);
        std::fs::create_dir_all(&d).expect("make the corpus dir");
        for (i, s) in headway_fuzz::seeds(t).iter().enumerate() {
            std::fs::write(d.join(format!("seed-{i}")), s).expect("write a seed");
        }
    }
}
