#!/usr/bin/env bash
# Builds the Kafka Streams baseline jar of one committed revision (default HEAD) in a detached
# git worktree and prints the path of a private copy,
# /tmp/tidemark-bench-bin/kstreams-baseline-<rev>.jar, where <rev> is the last commit at or
# before REV that touched bench/kstreams (so the copy is reused until the baseline changes).
# The counterpart of build_rev.sh for the baseline: bench/kstreams/build.sh builds the working
# tree, which may hold someone's uncommitted edits.
#
#   bench/lib/build_ks_rev.sh [REV]
#
# Maven's dependencies come from ~/.m2 (shared with build.sh); progress goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REV="$(git -C "$ROOT" log -1 --format=%h "${1:-HEAD}" -- bench/kstreams)"
[ -n "$REV" ] || { echo "[bench] no commit touches bench/kstreams at ${1:-HEAD}" >&2; exit 2; }
OUT="/tmp/tidemark-bench-bin/kstreams-baseline-$REV.jar"
if [ -s "$OUT" ]; then echo "$OUT"; exit 0; fi
mkdir -p /tmp/tidemark-bench-bin
WT="$(mktemp -d /tmp/kstreams-build-$REV.XXXX)"
trap 'git -C "$ROOT" worktree remove --force "$WT" >/dev/null 2>&1 || rm -rf "$WT"' EXIT
git -C "$ROOT" worktree add --detach "$WT" "$REV" >/dev/null 2>&1
echo "[bench] building the Kafka Streams baseline $REV in $WT" >&2
(cd "$WT/bench/kstreams" && nice -n 10 mvn -q -B package >&2)
cp -p "$WT/bench/kstreams/target/kstreams-baseline.jar" "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
echo "$OUT"
