# Sourced by the two scripts the harness does not cover yet (bench/profile.sh, bench/freshness.sh):
# paths, the benchmark broker, the binary under test, topology files. Everything else lives in
# bench/harness (bench/README.md).
BENCH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="$(cd "$BENCH/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/tidemark/target}"
BIN="${TIDEMARK_BIN:-$CARGO_TARGET_DIR/release/tidemark}"
export KAFKA_PORT="${KAFKA_PORT:-39092}"
BOOT="127.0.0.1:$KAFKA_PORT"
KAFKA_RUN="/tmp/tidemark-kafka-$KAFKA_PORT"
RESULTS="$BENCH/results"
mkdir -p "$RESULTS"
blog() { printf '[bench] %s\n' "$*" >&2; }

# Starts the benchmark broker unless it is up; stops it on exit only if this script started it.
STARTED_BROKER=0
broker_up() {
  if ! bash "$ROOT/scripts/kafka/kafka.sh" status >/dev/null 2>&1; then
    KAFKA_HEAP="${KAFKA_HEAP:-1g}" bash "$ROOT/scripts/kafka/kafka.sh" start >&2
    STARTED_BROKER=1
  fi
  BROKER_PID="$(cat "$KAFKA_RUN/pid")"
}
broker_down() { if [ "$STARTED_BROKER" = 1 ] && [ -z "${KEEP_BROKER:-}" ]; then bash "$ROOT/scripts/kafka/kafka.sh" stop >&2 || true; fi; }

# The binary under test: TIDEMARK_BIN (its revision given as TIDEMARK_REV), or else HEAD built
# in a clean worktree (bench/lib/build_rev.sh; BENCH_REV picks another commit). A binary from
# the working tree's own build is used only with ALLOW_DIRTY=1 and is labelled +dirty.
ensure_tidemark() {
  local rev
  if [ -n "${TIDEMARK_BIN:-}" ]; then
    rev="${TIDEMARK_REV:-unknown revision}"
  elif [ -n "${ALLOW_DIRTY:-}" ]; then
    if [ ! -x "$BIN" ]; then
      blog "building tidemark (release)"; (cd "$ROOT" && nice -n 10 cargo build --release --bin tidemark >&2)
    fi
    rev="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo '+dirty')"
  else
    BIN="$("$BENCH/lib/build_rev.sh" "${BENCH_REV:-HEAD}")"
    rev="$(git -C "$ROOT" rev-parse --short "${BENCH_REV:-HEAD}")"
  fi
  # Run a private copy, so a concurrent rebuild cannot swap the binary in the middle of a series.
  mkdir -p /tmp/tidemark-bench-bin
  cp -p "$BIN" /tmp/tidemark-bench-bin/tidemark.$$
  BIN=/tmp/tidemark-bench-bin/tidemark.$$
  BIN_INFO="$(stat -c '%y' "$BIN") $rev"
  trap_extra="rm -f $BIN"
}
# Other processes on the host (1-minute load average): a benchmark is only clean when it is low.
loadavg() { cut -d' ' -f1 /proc/loadavg; }

# topology_file OUT RUN PARTITIONS MODE ACTION_URL MIN_UNITS FACTOR BASELINE [ORDERS_TOPIC]
# The example topology with per-run topic names, only velocity_spike (the rule the Kafka
# Streams baseline implements) in MODE, and the action endpoint.
topology_file() {
  local out=$1 run=$2 parts=$3 mode=$4 url=$5 min=$6 factor=$7 base=$8 orders=${9:-$2.orders}
  # The working-tree example; if the binary under test rejects it (built from another
  # revision), the committed one.
  _topology_from "$ROOT/topology/examples/orders.toml" "$@"
  if ! "$BIN" validate "$out" >/dev/null 2>&1; then
    git -C "$ROOT" show HEAD:topology/examples/orders.toml > "$out.src"
    _topology_from "$out.src" "$@"
  fi
}
_topology_from() {
  local src=$1; shift
  local out=$1 run=$2 parts=$3 mode=$4 url=$5 min=$6 factor=$7 base=$8 orders=${9:-$2.orders}
  python3 - "$src" "$out" "$run" "$parts" "$mode" "$url" "$min" "$factor" "$base" "$orders" <<'PY'
import re, sys
src, out, run, parts, mode, url, mn, factor, base, orders = sys.argv[1:]
t = open(src).read()
t = t.replace('topic = "orders"', f'topic = "{orders}"').replace('topic = "inventory"', f'topic = "{run}.inventory"')
t = t.replace('topic = "tidemark.', f'topic = "{run}.')
t = re.sub(r'partitions = 4', f'partitions = {parts}', t)
t = t.replace('# action_url = "https://inventory.internal/actions"', f'action_url = "{url}"')
t = t[: t.index('[[rules]]')]
t += f'''[[rules]]
id = "velocity_spike"
version = 1
mode = "{mode}"
params = {{ min_units = {mn}, factor = "{factor}", baseline_windows = {base} }}
'''
open(out, "w").write(t)
PY
}
# --- shared by the scenario scripts (spike, catchup, recovery, steady) ---
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_s() { date +%s.%N; }
rel() { python3 -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 2))" "$1" "$2"; }
# Host facts for a result file.
machine_json() {
  python3 - "$BIN_INFO" <<'PY'
import json, os, platform, subprocess, sys
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mem = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
print(json.dumps({"nproc": os.cpu_count(), "cpu": cpu, "mem_gib": round(mem / 2**20, 1), "kernel": platform.release(),
                  "tidemark_binary": sys.argv[1], "loadavg_at_start": os.getloadavg()[0]}))
PY
}
# start_tidemark TOPOLOGY STATE_DIR GROUP HTTP_PORT LOG PIDFILE: background `tidemark run`, pid in PIDFILE.
# Rules in act mode refuse to start unsigned: the bench signs with a fixed key.
# TM_ENV: more NAME=VALUE pairs for the processor's environment only (soak.sh's HEAP_PROFILE
# preloads jemalloc there, not into the generator).
start_tidemark() {
  env TIDEMARK_WEBHOOK_SECRET="${TIDEMARK_WEBHOOK_SECRET:-bench-signing-key}" ${TM_ENV:-} "$BIN" run --bootstrap "$BOOT" --topology "$1" --state-dir "$2" --group "$3" --http-addr "127.0.0.1:$4" \
    --backlog-probe-every 1 --log warn ${TM_EXTRA:-} 2>> "$5" >/dev/null &
  echo $! > "$6"
}
wait_ready() { # HTTP_PORT [TIMEOUT_S]
  local i; for i in $(seq 1 $((${2:-60} * 5))); do curl -sf "127.0.0.1:$1/readyz" >/dev/null && return 0; sleep 0.2; done; return 1
}
# Deletes the topics whose names match a regex (frees the broker's disk between runs).
delete_topics() {
  java -Xmx256m -cp "${TIDEMARK_CACHE:-$HOME/.cache/tidemark}/kafka-4.4.0/libs/*" -Dlog4j2.level=error \
    org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --delete --topic "$1" >/dev/null 2>&1 || true
}
