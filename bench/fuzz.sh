#!/usr/bin/env bash
# Fuzzes headway's decoders and parsers with cargo-fuzz (libFuzzer), each
# target for a bounded time (issue 7). Targets: message (headway's own
# decoder), celery (the kombu/Celery envelope decoder), cron (Cron::new and
# its search), url (RedisUrl::parse).
#
#   bench/fuzz.sh                 # 60 s per target
#   bench/fuzz.sh --smoke         # 10 s per target (what CI can afford)
#   bench/fuzz.sh 300 cron url    # 300 s for the two named
#
# Fails (non-zero, the input saved under core/fuzz/artifacts/<target>/) on a
# panic, an input slower than 5 s (-timeout), or RSS over 2 GiB
# (-rss_limit_mb). On a stable toolchain it runs without a sanitizer
# (-s none: AddressSanitizer needs nightly); Rust's own checks still make
# every overflow, bad index or failed assertion a crash. On nightly it uses
# AddressSanitizer. The same target bodies run on stable, everywhere, as
# `cargo test -p headway-core --test fuzz_smoke`.
set -euo pipefail
cd "$(dirname "$0")/../core/fuzz"

secs=60
if [[ "${1:-}" == "--smoke" ]]; then secs=10; shift; fi
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then secs=$1; shift; fi
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then targets=(message celery cron url); fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is missing: cargo install cargo-fuzz --locked" >&2
  exit 2
fi
san=none
if rustc --version | grep -q nightly; then san=address; fi

cargo run --quiet --release --example seeds -- corpus
status=0
for t in "${targets[@]}"; do
  echo "=== fuzz $t: ${secs}s, sanitizer $san"
  log=$(mktemp)
  set +e
  cargo fuzz run -s "$san" "$t" "corpus/$t" -- \
    -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  grep -E "^(Done |stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==|SUMMARY|thread '|artifact_prefix)" "$log" || true
  if [[ $rc -ne 0 ]]; then
    tail -40 "$log" >&2
    echo "!!! fuzz $t FAILED (the input is under core/fuzz/artifacts/$t/)" >&2
    status=1
  fi
  rm -f "$log"
done
if [[ $status -eq 0 ]]; then echo "fuzz: all targets clean"; fi
exit $status
