#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser that takes bytes from outside (bench/fuzz/README.md).
#
#   bench/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   bench/fuzz.sh --replay [MUTATIONS_PER_TARGET]
#
# Builds bench/fuzz's `fuzz` binary with libFuzzer and LLVM SanitizerCoverage on stable rustc
# (-Cpasses=sancov-module and -Cllvm-args; no -Z flag, no nightly), then runs each TARGET
# (default: every target; `bench/fuzz.sh --list` names them) for SECONDS_PER_TARGET seconds
# (default 60), starting from its committed seeds in bench/fuzz/corpus/<target>/. Inputs that
# find new coverage go to a scratch corpus, so the committed one stays small:
#
#   $FUZZ_WORK/corpus/<target>/    what the runs found (kept between runs: they resume)
#   $FUZZ_WORK/crashes/<target>/   crash-*, timeout-*, oom-*: the inputs that failed
#   $FUZZ_WORK/logs/<target>.log   libFuzzer's output
#
# FUZZ_WORK defaults to ~/.cache/fleetmesh/fuzz. A crash (a panic, an input running over
# FUZZ_TIMEOUT seconds, over FUZZ_RSS_MB of memory, or one allocation over it) is reported
# with its file and the script goes on to the next target; it exits 1 when any target failed.
# Replay a failure with a plain backtrace (no libFuzzer needed):
#
#   FLEETMESH_FUZZ_TARGET=<target> FLEETMESH_FUZZ_INPUT=<file> \
#       cargo test -p fleetmesh-fuzz --test corpus replay -- --nocapture
#
# then add it to bench/fuzz/corpus/<target>/ and a regression test to the parser's crate.
#
# --replay runs the same harnesses without coverage and without a build of their own (what CI
# runs, from .ci/test): bench/fuzz/tests/corpus.rs feeds every committed corpus file and
# MUTATIONS_PER_TARGET seeded mutations of them (default 10000; FLEETMESH_FUZZ_SEED picks
# another set) through every harness, in the workspace's normal test build.
#
# Environment: FUZZ_TARGET_DIR (the instrumented build, default ~/.cache/fleetmesh/fuzz-target;
# never the normal target directory: the flags differ), FUZZ_OPT_LEVEL (of the dev profile
# the build uses, default 1; crates the workspace already optimises keep their level),
# FUZZ_JOBS (libFuzzer processes per target, default 1), FUZZ_TIMEOUT (default 10),
# FUZZ_RSS_MB (default 2048), FUZZ_BUILD_ONLY=1 (build and stop).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--list" ] || [ "${1:-}" = "-l" ]; then
    ls bench/fuzz/corpus
    exit 0
fi
if [ "${1:-}" = "--replay" ]; then
    export FLEETMESH_FUZZ_MUTATIONS="${2:-10000}"
    exec cargo test --workspace --locked --test corpus
fi
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi

seconds="${1:-60}"
shift || true
if ! [[ "$seconds" =~ ^[0-9]+$ ]]; then
    echo "bench/fuzz.sh: SECONDS_PER_TARGET must be a whole number, not '$seconds'" >&2
    exit 2
fi
targets=("$@")
if ((${#targets[@]} == 0)); then
    mapfile -t targets < <(ls bench/fuzz/corpus)
fi
for t in "${targets[@]}"; do
    if [ ! -d "bench/fuzz/corpus/$t" ]; then
        echo "bench/fuzz.sh: no target '$t' (bench/fuzz.sh --list)" >&2
        exit 2
    fi
done

repo=$(pwd)
work="${FUZZ_WORK:-$HOME/.cache/fleetmesh/fuzz}"
target_dir="${FUZZ_TARGET_DIR:-$HOME/.cache/fleetmesh/fuzz-target}"

# SanitizerCoverage as cargo-fuzz sets it up (level 4 = edges, inline 8-bit counters, the PC
# table for libFuzzer's feature tracking, comparison tracing for its value profile), without
# a sanitizer (those need nightly) and without `--cfg fuzzing` (some dependencies, such as
# secp256k1, swap their cryptography for stubs under it: we fuzz the code that ships).
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares"
export CARGO_PROFILE_DEV_OPT_LEVEL="${FUZZ_OPT_LEVEL:-1}"
export CARGO_PROFILE_DEV_DEBUG_ASSERTIONS=true CARGO_PROFILE_DEV_OVERFLOW_CHECKS=true
export CARGO_PROFILE_DEV_INCREMENTAL=false
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros (they run on the
# host and must not be instrumented).
host=$(rustc -vV | sed -n 's/^host: //p')
build_start=$SECONDS
CARGO_TARGET_DIR="$target_dir" cargo build --locked -p fleetmesh-fuzz --features libfuzzer \
    --bin fuzz --target "$host"
echo "fuzz: built in $((SECONDS - build_start)) s" >&2
bin="$target_dir/$host/debug/fuzz"
if [ "${FUZZ_BUILD_ONLY:-}" = 1 ]; then
    exit 0
fi

failed=()
for t in "${targets[@]}"; do
    mkdir -p "$work/corpus/$t" "$work/crashes/$t" "$work/logs"
    log="$work/logs/$t.log"
    before=$(ls "$work/crashes/$t" | wc -l)
    echo "fuzz: $t for ${seconds}s" >&2
    jobs=()
    if ((${FUZZ_JOBS:-1} > 1)); then
        # parallel processes write fuzz-N.log into the working directory: the logs folder
        jobs=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
    fi
    set +e
    (cd "$work/logs" && FLEETMESH_FUZZ_TARGET="$t" "$bin" "$work/corpus/$t" "$repo/bench/fuzz/corpus/$t" \
        -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-10}" \
        -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -malloc_limit_mb="${FUZZ_RSS_MB:-2048}" \
        "${jobs[@]}" -artifact_prefix="$work/crashes/$t/" -print_final_stats=1 >"$log" 2>&1)
    rc=$?
    set -e
    stats=$(grep -E "^stat::number_of_executed_units|^stat::average_exec_per_sec|^stat::new_units_added" \
        "$log" | sed 's/^stat:://' | tr '\n' ' ')
    after=$(ls "$work/crashes/$t" | wc -l)
    if ((rc != 0 || after > before)); then
        failed+=("$t")
        echo "fuzz: $t FAILED (exit $rc): $(grep -m1 -E "panicked at|ERROR: libFuzzer" "$log" || true)" >&2
        grep -E "Test unit written to" "$log" | sed 's/^/fuzz:   /' >&2 || true
        echo "fuzz:   log: $log" >&2
    else
        echo "fuzz: $t ok: $stats" >&2
    fi
done

if ((${#failed[@]})); then
    echo "fuzz: crashes in ${failed[*]}; inputs under $work/crashes/" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no crash" >&2
