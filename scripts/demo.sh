#!/usr/bin/env bash
# The zero-install demo: installs build prerequisites, builds, and runs `tidemark demo`
# (an in-process mock Kafka, a generated order stream, the example topology).
set -euo pipefail
cd "$(dirname "$0")/.."
# Every prerequisite, found or missing and how it was detected; then install what is missing.
bash scripts/setup.sh --check || bash scripts/setup.sh
. scripts/env.sh
cargo build --release --bin tidemark
exec "$CARGO_TARGET_DIR/release/tidemark" demo "$@"
