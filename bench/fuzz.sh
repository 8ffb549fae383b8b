#!/usr/bin/env bash
# Fuzzes headway's decoders and parsers with cargo-fuzz (libFuzzer), each
# target for a bounded time. Every target core/fuzz/Cargo.toml declares runs
# (`cargo fuzz list`), so a new one cannot be left out: message (headway's
# own decoder), celery (the kombu/Celery envelope codec), celery_dead (the
# Celery layout's claim-path decoder: size cap, first-byte sniff, protocol 1,
# base64 body), pidbox (remote-control broadcasts), result_meta (Celery
# result metas), cron (Cron::new and its search), url (RedisUrl::parse).
#
#   bench/fuzz.sh                 # 60 s per target, optimised build
#   bench/fuzz.sh --smoke         # 5 s per target, debug build (what CI runs)
#   bench/fuzz.sh 300 cron url    # 300 s for the two named
#
# Fails (non-zero, loudly, the input saved under core/fuzz/artifacts/<target>/)
# on a panic, an input slower than 5 s (-timeout), RSS over 2 GiB
# (-rss_limit_mb), or a target that did not run at all. --smoke builds
# without optimisation (half the build time of a fresh clone) and with debug
# assertions and overflow checks on. On a stable toolchain it runs without a
# sanitizer (-s none: AddressSanitizer needs nightly); Rust's own checks
# still make every overflow, bad index or failed assertion a crash. On
# nightly (the default toolchain, or FUZZ_TOOLCHAIN=nightly) it uses
# AddressSanitizer. Each binary plants its seeds (headway_fuzz::seeds) in
# corpus/<target>/ before libFuzzer reads it (fuzz_targets/plant.rs). The
# same target bodies run on stable, everywhere, as
# `cargo test -p headway-core --test fuzz_smoke`.
set -euo pipefail
cd "$(dirname "$0")/../core/fuzz"

secs=60
profile=()
if [[ "${1:-}" == "--smoke" ]]; then secs=5; profile=(--dev); shift; fi
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then secs=$1; shift; fi
targets=("$@")

cargo=(cargo)
if [[ -n "${FUZZ_TOOLCHAIN:-}" ]]; then cargo=(cargo "+$FUZZ_TOOLCHAIN"); fi
if ! "${cargo[@]}" fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is missing: cargo install cargo-fuzz --locked" >&2
  exit 2
fi
if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <("${cargo[@]}" fuzz list)
  if [[ ${#targets[@]} -eq 0 ]]; then
    echo "!!! fuzz: \`cargo fuzz list\` named no targets" >&2
    exit 2
  fi
fi
echo "fuzz: targets ${targets[*]}"
san=none
if "${cargo[@]}" --version | grep -q nightly; then san=address; fi

# One build of every target; the runs below then start at once.
t0=$(date +%s)
"${cargo[@]}" fuzz build "${profile[@]}" -s "$san"
echo "fuzz: built in $(( $(date +%s) - t0 )) s (sanitizer $san${profile:+, debug})"

status=0
for t in "${targets[@]}"; do
  echo "=== fuzz $t: ${secs}s, sanitizer $san"
  log=$(mktemp)
  set +e
  HEADWAY_FUZZ_SEEDS="corpus/$t" "${cargo[@]}" fuzz run "${profile[@]}" -s "$san" "$t" "corpus/$t" -- \
    -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  grep -E "^(Done |stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==|SUMMARY|thread '|artifact_prefix)" "$log" || true
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  if [[ $rc -eq 0 && -z "$runs" ]]; then
    echo "!!! fuzz $t: exit 0 but no final stats: it did not run" >&2
    rc=1
  fi
  if [[ $rc -ne 0 ]]; then
    tail -40 "$log" >&2
    echo "!!! fuzz $t FAILED (exit $rc; the input is under core/fuzz/artifacts/$t/)" >&2
    status=1
  fi
  rm -f "$log"
done
if [[ $status -eq 0 ]]; then echo "fuzz: all targets clean"; else echo "!!! fuzz: a target FAILED" >&2; fi
exit $status
