#!/usr/bin/env bash
# Installs what building and testing tidemark needs on a fresh Debian machine of this kind.
# Idempotent: a second run only checks. Run as root (or with sudo available).
#
#   scripts/setup.sh              check every prerequisite, install the missing ones, check again
#   scripts/setup.sh --check      only report: one line per prerequisite, found or missing and
#                                 how it was detected; exit 1 when anything is missing
#   scripts/setup.sh --check --root DIR
#                                 the same, looking for files below DIR instead of / (the
#                                 detection's own test uses it with fake roots)
#
# Each prerequisite is detected by what the build really loads, not by a neighbour's name:
# librocksdb-sys runs bindgen, whose clang-sys (feature `runtime`) dlopens a libclang it finds
# by LIBCLANG_PATH, `llvm-config --libdir`, then a glob over /usr/lib*, /usr/local/lib* and
# /usr/local/llvm*/lib* for `libclang.so`, `libclang-*.so`, `libclang.so.*`, `libclang-*.so.*`
# — skipping `libclang-cpp*`, the C++ library Debian ships without libclang-dev.
#
# The S3 gateway of the object-store snapshot tests (tests/snapshots_s3.rs), versitygw, is
# built from the Go module proxy into $TIDEMARK_CACHE/bin (a Go toolchain is a prerequisite
# for it); it is found there by its embedded module version.
set -euo pipefail

VERSITYGW_MODULE=github.com/versity/versitygw
VERSITYGW_VERSION=v1.8.0
VERSITYGW_BIN="${TIDEMARK_CACHE:-$HOME/.cache/tidemark}/bin/versitygw"
# The toolchain's usual home when it is not on PATH.
[ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"

MODE=install
ROOT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --check) MODE=check ;;
    --root) ROOT="${2:?--root needs a directory}"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "[setup] unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# find_libclang: prints the path clang-sys would load and how it got there, or nothing.
find_libclang() {
  local cand
  if [ -z "$ROOT" ] && [ -n "${LIBCLANG_PATH:-}" ]; then
    for cand in "$LIBCLANG_PATH" "$LIBCLANG_PATH"/libclang.so "$LIBCLANG_PATH"/libclang.so.* "$LIBCLANG_PATH"/libclang-*.so*; do
      if is_libclang "$cand"; then echo "$cand (LIBCLANG_PATH)"; return; fi
    done
  fi
  if [ -z "$ROOT" ] && command -v llvm-config >/dev/null 2>&1; then
    local dir; dir="$(llvm-config --libdir 2>/dev/null || true)"
    for cand in "$dir"/libclang.so "$dir"/libclang.so.* "$dir"/libclang-*.so*; do
      if is_libclang "$cand"; then echo "$cand (llvm-config --libdir)"; return; fi
    done
  fi
  local d
  shopt -s nullglob
  for d in "$ROOT"/usr/local/llvm*/lib* "$ROOT"/usr/local/lib*/*/* "$ROOT"/usr/local/lib*/* \
           "$ROOT"/usr/local/lib* "$ROOT"/usr/lib*/*/* "$ROOT"/usr/lib*/* "$ROOT"/usr/lib*; do
    [ -d "$d" ] || continue
    for cand in "$d"/libclang.so "$d"/libclang-*.so "$d"/libclang.so.* "$d"/libclang-*.so.*; do
      if is_libclang "$cand"; then shopt -u nullglob; echo "$cand (clang-sys search path glob)"; return; fi
    done
  done
  shopt -u nullglob
}

# is_libclang FILE: an existing file (or link to one) named like libclang, not libclang-cpp.
is_libclang() {
  local base; base="$(basename "$1")"
  case "$base" in libclang-cpp*|*-cpp.*) return 1 ;; esac
  case "$base" in libclang.so|libclang-*.so|libclang.so.*|libclang-*.so.*) ;; *) return 1 ;; esac
  [ -f "$1" ]
}

# check NAME PACKAGE DETECTED-BY... : records a prerequisite as found or missing.
MISSING=()
report() { # status name package how
  printf '[setup] %-8s %-12s %-26s %s\n' "$1" "$2" "($3)" "$4" >&2
}
check_file() { # name package path
  if [ -e "$ROOT$3" ]; then report found "$1" "$2" "$ROOT$3 exists"
  else report missing "$1" "$2" "no $ROOT$3"; MISSING+=("$2"); fi
}
check_cmd() { # name package command
  local p
  if [ -n "$ROOT" ]; then
    if [ -x "$ROOT/usr/bin/$3" ]; then report found "$1" "$2" "$ROOT/usr/bin/$3"
    else report missing "$1" "$2" "no $ROOT/usr/bin/$3"; MISSING+=("$2"); fi
  elif p="$(command -v "$3")"; then report found "$1" "$2" "$p on PATH"
  else report missing "$1" "$2" "no '$3' on PATH"; MISSING+=("$2"); fi
}

run_checks() {
  MISSING=()
  local lib
  lib="$(find_libclang)"
  if [ -n "$lib" ]; then report found libclang libclang-dev "$lib"
  else report missing libclang libclang-dev "no libclang.so that clang-sys loads (libclang-cpp does not count)"; MISSING+=(libclang-dev); fi
  check_cmd "C compiler" build-essential cc
  check_cmd "C++" g++ c++
  check_cmd make build-essential make
  check_file "OpenSSL" libssl-dev /usr/include/openssl/ssl.h
  check_file "zlib" zlib1g-dev /usr/include/zlib.h
  check_cmd pkg-config pkg-config pkg-config
  check_cmd java openjdk-17-jre-headless java
  check_cmd maven maven mvn
  check_cmd curl curl curl
  check_file "GNU time" time /usr/bin/time
  if [ -z "$ROOT" ]; then
    if command -v cargo >/dev/null; then report found cargo rustup "$(command -v cargo) on PATH"
    else report missing cargo rustup "no 'cargo' on PATH: install Rust with rustup first"; MISSING+=(rustup); fi
    local comp
    for comp in rustfmt clippy; do
      if cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then report found "$comp" rustup "cargo ${comp/rustfmt/fmt} --version answers"
      else report missing "$comp" rustup "cargo ${comp/rustfmt/fmt} does not run: rustup component add $comp"; MISSING+=("component:$comp"); fi
    done
    check_cmd go golang-go go
    if [ -x "$VERSITYGW_BIN" ] && command -v go >/dev/null 2>&1 \
        && go version -m "$VERSITYGW_BIN" 2>/dev/null | grep -q "mod[[:space:]]*$VERSITYGW_MODULE[[:space:]]*$VERSITYGW_VERSION"; then
      report found versitygw "go install" "$VERSITYGW_BIN is $VERSITYGW_MODULE $VERSITYGW_VERSION"
    else
      report missing versitygw "go install" "no $VERSITYGW_BIN built from $VERSITYGW_MODULE $VERSITYGW_VERSION"; MISSING+=(versitygw)
    fi
  fi
}

run_checks
if [ "$MODE" = check ]; then
  [ ${#MISSING[@]} -eq 0 ] && { echo "[setup] all prerequisites present" >&2; exit 0; }
  echo "[setup] missing: ${MISSING[*]}" >&2
  exit 1
fi

if [ ${#MISSING[@]} -gt 0 ]; then
  apt_pkgs=()
  for p in "${MISSING[@]}"; do
    case "$p" in
      rustup|versitygw) ;;
      component:*) rustup component add "${p#component:}" >&2 ;;
      *) apt_pkgs+=("$p") ;;
    esac
  done
  if [ ${#apt_pkgs[@]} -gt 0 ]; then
    # shellcheck disable=SC2207
    apt_pkgs=($(printf '%s\n' "${apt_pkgs[@]}" | sort -u))
    echo "[setup] installing: ${apt_pkgs[*]}" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${apt_pkgs[@]}" >/dev/null
  fi
  if printf '%s\n' "${MISSING[@]}" | grep -qx versitygw; then
    echo "[setup] building versitygw $VERSITYGW_VERSION into $(dirname "$VERSITYGW_BIN")" >&2
    mkdir -p "$(dirname "$VERSITYGW_BIN")"
    # GOTOOLCHAIN=auto: an older Debian Go fetches the toolchain the module asks for.
    GOBIN="$(dirname "$VERSITYGW_BIN")" GOTOOLCHAIN=auto GOFLAGS=-mod=mod \
      go install "$VERSITYGW_MODULE/cmd/versitygw@$VERSITYGW_VERSION" >&2
  fi
  run_checks
  if [ ${#MISSING[@]} -gt 0 ]; then
    echo "[setup] still missing after install: ${MISSING[*]}" >&2
    exit 1
  fi
fi
echo "[setup] build prerequisites present" >&2
