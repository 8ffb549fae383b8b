//! Plants a target's seeds (`headway_fuzz::seeds`) in `$HEADWAY_FUZZ_SEEDS`
//! from the fuzz binary's init, which libFuzzer runs before it reads its
//! corpus: so `bench/fuzz.sh` needs no second build (of headway-core without
//! the fuzzer's instrumentation) just to write them. Unset: does nothing.

pub fn seeds(target: &str) {
    let Some(dir) = std::env::var_os("HEADWAY_FUZZ_SEEDS") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    std::fs::create_dir_all(dir).expect("make the corpus dir");
    for (i, s) in headway_fuzz::seeds(target).iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i}")), s).expect("write a seed");
    }
}
