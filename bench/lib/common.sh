# Sourced by the bench/*.sh scripts: paths, the benchmark broker, topology files, /proc helpers.
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

ensure_tidemark() {
  if [ ! -x "$BIN" ]; then
    blog "building tidemark (release)"; (cd "$ROOT" && nice -n 10 cargo build --release --bin tidemark >&2)
  fi
  # Run a private copy, so a concurrent rebuild cannot swap the binary in the middle of a series.
  mkdir -p /tmp/tidemark-bench-bin
  cp -p "$BIN" /tmp/tidemark-bench-bin/tidemark.$$
  BIN=/tmp/tidemark-bench-bin/tidemark.$$
  BIN_INFO="$(stat -c '%y' "$BIN") $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')"
  trap_extra="rm -f $BIN"
}
# Other processes on the host (1-minute load average): a benchmark is only clean when it is low.
loadavg() { cut -d' ' -f1 /proc/loadavg; }
ensure_kstreams() { KS_JAR="$("$BENCH/kstreams/build.sh")"; }

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

# CPU ticks (utime+stime, incl. reaped children) of a pid; 0 if gone.
cpu_ticks() { awk '{print $14+$15+$16+$17}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Host-wide steal ticks and total ticks from /proc/stat.
steal_total() { awk '/^cpu /{t=0; for(i=2;i<=NF;i++) t+=$i; print $9, t}' /proc/stat; }
CLK_TCK=$(getconf CLK_TCK)
# Peak RSS (kB) of a live pid.
peak_rss_kb() { awk '/VmHWM/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
