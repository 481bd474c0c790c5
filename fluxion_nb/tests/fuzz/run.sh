#!/usr/bin/env bash
# Run the libFuzzer targets built in BUILD (default build/fuzz) for SECONDS
# each (default 60), one worker each (-jobs=1), one after the other.
#   run.sh [SECONDS] [TARGET...]     TARGET: json jgf jobspec update yaml (default all)
# Corpora are read and grown under BUILD/corpus/<target> (make_corpus.py seeds
# them); findings go to BUILD/artifacts/<target>/, logs to BUILD/run/<target>/.
# Exits 1 if any target crashed, leaked, timed out or ran out of memory.
set -u
SECONDS_EACH=${1:-60}
shift || true
TARGETS=${*:-json jgf jobspec update yaml}
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${BUILD:-build/fuzz}" && pwd)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
for t in $TARGETS; do
  bin="$BUILD/fuzz_$t"
  [ -x "$bin" ] || { echo "missing $bin (build with -DFLUXION_FUZZ=ON)"; failed=1; continue; }
  mkdir -p "$BUILD/corpus/$t" "$BUILD/artifacts/$t" "$BUILD/run/$t"
  dict="$HERE/dict/$t.dict"
  [ -f "$dict" ] || dict="$HERE/dict/json.dict"
  echo "== fuzz_$t for ${SECONDS_EACH}s"
  before=$(ls "$BUILD/artifacts/$t" | wc -l)
  (cd "$BUILD/run/$t" && "$bin" -jobs=1 -max_total_time="$SECONDS_EACH" -timeout=20 \
     -rss_limit_mb=2048 -max_len=65536 -dict="$dict" -artifact_prefix="$BUILD/artifacts/$t/" \
     "$BUILD/corpus/$t" >/dev/null 2>&1)
  rc=$?
  log="$BUILD/run/$t/fuzz-0.log"
  grep -E "^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)" "$log" | tail -1
  after=$(ls "$BUILD/artifacts/$t" | wc -l)
  if [ $rc -ne 0 ] || [ "$after" -gt "$before" ]; then
    echo "fuzz_$t FAILED (exit $rc); new artifacts in $BUILD/artifacts/$t:"
    ls -t "$BUILD/artifacts/$t" | head -"$((after - before + 1))"
    grep -E "ERROR|INVARIANT|SUMMARY|Test unit written" "$log" | head -20
    failed=1
  fi
done
exit $failed
