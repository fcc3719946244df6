#!/usr/bin/env bash
# Compares two release builds of findmy in one run, alternating them round by round so that the
# machine's load falls on both alike: single-fix and 100-fix ingest, the read API's devices list
# and history page, and the projector's drain of a burst. Each build's findmy-bench drives the
# findmy beside it. Prints one line per measurement; the raw output of every run stays in OUT.
#
#   ops/bench/compare-builds.sh BASE_BIN_DIR HEAD_BIN_DIR [ROUNDS] [DRAIN_FIXES] [OUT]
#
# BIN_DIR is `swift build -c release --show-bin-path` of each checkout. docs/benchmarks.md,
# "Comparing two builds", shows how to read the lines.
set -euo pipefail
base=${1:?base bin dir}
head=${2:?head bin dir}
rounds=${3:-3}
drain_fixes=${4:-2000000}
out=${5:-$(mktemp -d /tmp/fm-compare.XXXXXX)}
mkdir -p "$out"
work=$(mktemp -d /tmp/fm-compare-work.XXXXXX)
chmod o+x "$work"  # the embedded cluster's OS user passes through to its data directory
trap 'rm -rf "$work"' EXIT

run() {  # build-name bin-dir round
    local name=$1 bin=$2 round=$3 log
    log="$out/$name-$round"
    echo "# round $round, $name ($bin), load $(cut -d' ' -f1-3 /proc/loadavg)"
    rm -rf "$work/ingest" "$work/read"
    FINDMY_BIN="$bin/findmy" "$base/findmy-bench" ingest --dir "$work/ingest" --seconds 3 --connections 64 --fixes 1,100 \
        --phases native >"$log-ingest.txt" 2>&1 || echo "$name r$round ingest: failed, see $log-ingest.txt"
    grep -E '"fixes_per_batch"|fixes/s|reports/s' "$log-ingest.txt" | sed "s/^/$name r$round ingest: /" || true
    FINDMY_BIN="$bin/findmy" "$base/findmy-bench" read --dir "$work/read" --requests 300 >"$log-read.txt" 2>&1 ||
        echo "$name r$round read: failed, see $log-read.txt"
    grep -Ei 'p50|p99' "$log-read.txt" | sed "s/^/$name r$round read: /" || true
    "$bin/findmy-bench" project --drain --dir "$work/drain-$name" --fixes "$drain_fixes" --keep-log \
        >"$log-drain.txt" 2>&1 || echo "$name r$round drain: failed, see $log-drain.txt"
    grep -Ei 'visible|fixes/s|cpu' "$log-drain.txt" | sed "s/^/$name r$round drain: /" || true
}

for round in $(seq 1 "$rounds"); do
    if ((round % 2)); then
        run base "$base" "$round"
        run head "$head" "$round"
    else
        run head "$head" "$round"
        run base "$base" "$round"
    fi
done
echo "# raw output in $out"
