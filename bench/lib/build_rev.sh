#!/usr/bin/env bash
# Builds the `tidemark` binary of one committed revision (default HEAD) in a detached git
# worktree and prints the path of a private copy, /tmp/tidemark-bench-bin/tidemark-<rev>
# (reused when it exists). Benchmarks measure committed code only: this is how they get it,
# whatever state the working tree is in.
#
#   bench/lib/build_rev.sh [REV]
#
# BUILD_FEATURES=sysalloc builds it with `--no-default-features` (the system allocator instead
# of mimalloc, so bench/soak.sh's HEAP_PROFILE can preload jemalloc); the copy is then
# tidemark-<rev>-sysalloc.
#
# The build shares CARGO_TARGET_DIR (dependencies are not rebuilt); progress goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REV="$(git -C "$ROOT" rev-parse --short "${1:-HEAD}")"
case "${BUILD_FEATURES:-}" in
  "") FLAGS=(); OUT="/tmp/tidemark-bench-bin/tidemark-$REV" ;;
  sysalloc) FLAGS=(--no-default-features); OUT="/tmp/tidemark-bench-bin/tidemark-$REV-sysalloc" ;;
  *) echo "[bench] unknown BUILD_FEATURES=$BUILD_FEATURES (known: sysalloc)" >&2; exit 2 ;;
esac
if [ -x "$OUT" ]; then echo "$OUT"; exit 0; fi
mkdir -p /tmp/tidemark-bench-bin
WT="$(mktemp -d /tmp/tidemark-build-$REV.XXXX)"
trap 'git -C "$ROOT" worktree remove --force "$WT" >/dev/null 2>&1 || rm -rf "$WT"' EXIT
git -C "$ROOT" worktree add --detach "$WT" "$REV" >/dev/null 2>&1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/tidemark/target}"
echo "[bench] building tidemark $REV in $WT" >&2
# Cargo names a workspace crate's artifacts independently of where the workspace lives and
# judges freshness by mtimes, so two checkouts sharing CARGO_TARGET_DIR can each take the
# other's artifacts for their own (seen: a working-tree build linked a library this build
# had just written). Sources dated in the future make this build recompile every workspace
# crate whatever was built before; afterwards the working tree's sources are touched so its
# next build recompiles them too.
git -C "$WT" ls-files -z | (cd "$WT" && xargs -0 touch -d '+1 day')
(cd "$WT" && nice -n 10 cargo build --release --bin tidemark "${FLAGS[@]}" >&2)
cp -p "$CARGO_TARGET_DIR/release/tidemark" "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
git -C "$ROOT" ls-files -z -- '*.rs' '*.toml' | (cd "$ROOT" && xargs -0 touch -c)
echo "$OUT"
