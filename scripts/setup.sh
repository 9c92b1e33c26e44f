#!/usr/bin/env bash
# Installs what building and testing tidemark needs on a fresh Debian machine of this kind.
# Idempotent: a second run only checks. Run as root (or with sudo available).
set -euo pipefail

need=()
[ -e /usr/lib/llvm-14/lib/libclang.so ] || ls /usr/lib/x86_64-linux-gnu/libclang-*.so* >/dev/null 2>&1 || need+=(libclang-dev)
command -v cc >/dev/null || need+=(build-essential)
command -v c++ >/dev/null || need+=(g++)
[ -e /usr/include/openssl/ssl.h ] || need+=(libssl-dev)
[ -e /usr/include/zlib.h ] || need+=(zlib1g-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need+=(maven)
command -v curl >/dev/null || need+=(curl)
[ -x /usr/bin/time ] || need+=(time)

if [ ${#need[@]} -gt 0 ]; then
  echo "[setup] installing: ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "[setup] cargo not found: install Rust (rustup) first" >&2; exit 1; }
echo "[setup] build prerequisites present" >&2
