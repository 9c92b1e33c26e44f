# Sourced by the scripts: fixed build and download caches outside the clone, so CI and a
# developer reuse them; everything still works when they are empty (just slower).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/tidemark/target}"
export TIDEMARK_CACHE="${TIDEMARK_CACHE:-$HOME/.cache/tidemark}"
mkdir -p "$CARGO_TARGET_DIR" "$TIDEMARK_CACHE" 2>/dev/null || {
  export CARGO_TARGET_DIR="$HOME/.cache/tidemark/target"; mkdir -p "$CARGO_TARGET_DIR"
}
