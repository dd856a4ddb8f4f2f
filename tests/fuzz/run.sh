#!/usr/bin/env bash
# Builds the libFuzzer target for the JSON readers and runs it for a bounded time.
#   tests/fuzz/run.sh [SECONDS] [WORK_DIR]      (defaults: 30, build/fuzz)
# Seeds: the published config.json files in ../shared/models (BWPLAN_SHARED_DIR overrides), the bundled
# presets, the example plans, the hardware catalog, the bundled error bands and tests/fuzz/seeds (gemma3 text_config,
# hostile catalog, an H200 calibration profile).
# Exit status: 0 no finding, non-zero a crash, sanitizer report or timeout (the reproducer is left in WORK_DIR
# as crash-*/leak-*/timeout-*).
set -euo pipefail
secs=${1:-30}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${2:-$root/build/fuzz}
shared=${BWPLAN_SHARED_DIR:-$root/../shared}
cxx=${FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}
if [ -z "$cxx" ]; then echo "run.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; fi
mkdir -p "$work/corpus" "$work/seeds"
bin="$work/fuzz_readers"
src="$root/tests/fuzz/fuzz_readers.cpp"
if [ ! -x "$bin" ] || [ -n "$(find "$root/include" "$src" -newer "$bin" -print -quit)" ]; then
  echo "run.sh: building $bin with $cxx" >&2
  "$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/include" "$src" -o "$bin"
fi
rm -f "$work/seeds"/*
for d in "$shared/models" "$shared/models/more" "$root/configs/models" "$root/configs/examples" "$root/configs/hardware" \
         "$root/tests/fuzz/seeds" "$root/tests/fuzz/regressions"; do
  [ -d "$d" ] || continue
  for f in "$d"/*.json; do [ -f "$f" ] && cp "$f" "$work/seeds/$(basename "$d")-$(basename "$f")"; done
done
cp "$root/configs/error-bands.json" "$work/seeds/configs-error-bands.json"  # the error-band reader's seed
echo "run.sh: $(ls "$work/seeds" | wc -l) seed files, $(ls "$work/corpus" | wc -l) corpus files, ${secs}s" >&2
cd "$work"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
exec "$bin" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -dict="$root/tests/fuzz/json.dict" "$work/corpus" "$work/seeds"
