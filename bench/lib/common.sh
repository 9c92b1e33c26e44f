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
# The hypervisor's steal over the next SECONDS, in % of this VM's CPU time: time a neighbour on
# the physical host got instead of us. No load average shows it; it was 0.2–49 % per run in the
# 2026-12-01/02 series.
steal_pct_over() {
  local a; a="$(steal_total)"; sleep "$1"; steal_pct_between "$a" "$(steal_total)" 1
}
# The steal between two `steal_total` readings A and B, in % of this VM's CPU time (DECIMALS, 2).
steal_pct_between() {
  awk -v a="$1" -v b="$2" -v p="${3:-2}" 'BEGIN{split(a, x, " "); split(b, y, " "); d = y[2] - x[2]; printf "%.*f", p, (d > 0 ? 100 * (y[1] - x[1]) / d : 0)}'
}
# Waits up to QUIET_MAX_S (default 60) for the 1-minute load average to fall below QUIET_LOAD
# (2.5) and the steal over the last step below QUIET_STEAL_PCT (10), in 10 s steps after a 5 s
# first look: the A-B-B-A scripts call it before every run and record the load. QUIET_WAITED is
# the seconds it waited, QUIET_STEAL the steal (%) of its last look.
wait_quiet() {
  QUIET_WAITED=0; QUIET_STEAL="$(steal_pct_over 5)"
  while awk -v l="$(loadavg)" -v q="${QUIET_LOAD:-2.5}" -v s="$QUIET_STEAL" -v qs="${QUIET_STEAL_PCT:-10}" \
      'BEGIN{exit !(l >= q || s >= qs)}' && [ "$QUIET_WAITED" -lt "${QUIET_MAX_S:-60}" ]; do
    QUIET_STEAL="$(steal_pct_over 10)"; QUIET_WAITED=$((QUIET_WAITED + 10))
  done
}
# The Kafka Streams baseline as committed code: KSTREAMS_JAR as given (with KSTREAMS_REV), or
# the jar built from the last commit touching bench/kstreams at KS_REV (HEAD) by
# lib/build_ks_rev.sh. Sets KSTREAMS_JAR, KSTREAMS_REV and KS_SHA (first 16 hex of its sha256).
ensure_kstreams_committed() {
  if [ -z "${KSTREAMS_JAR:-}" ]; then
    KSTREAMS_JAR="$("$BENCH/lib/build_ks_rev.sh" "${KS_REV:-HEAD}")"
    KSTREAMS_REV="$(git -C "$ROOT" log -1 --format=%h "${KS_REV:-HEAD}" -- bench/kstreams)"
  fi
  KSTREAMS_REV="${KSTREAMS_REV:-unknown revision}"
  KS_SHA="$(sha256sum "$KSTREAMS_JAR" | cut -c1-16)"
}
# The Kafka Streams baseline jar: KSTREAMS_JAR if set (recovery_ab.sh passes a committed build
# from lib/build_ks_rev.sh), else bench/kstreams/build.sh's build of the working tree.
ensure_kstreams() { KS_JAR="${KSTREAMS_JAR:-$("$BENCH/kstreams/build.sh")}"; }

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

# The drain benchmarks' input (drain_ab.sh, capacity.sh): the topics of TAG (orders topic ORDERS,
# PARTITIONS partitions) and EVENTS records of ~EVENT_BYTES (1024) in it: seed 1, event times from
# half an hour ago at 20 k/s, no inventory records. The generator's summary goes to GEN_JSON.
drain_log() { # TAG ORDERS EVENTS PARTITIONS WORK GEN_JSON
  local tag=$1 orders=$2 events=$3 parts=$4 work=$5 gen=$6
  topology_file "$work/topology-gen.toml" "$tag" "$parts" act "http://127.0.0.1:1/actions" 50 3.0 15 "$orders"
  "$BIN" topics --bootstrap "$BOOT" --topology "$work/topology-gen.toml" >&2
  blog "generating $events events of ~${EVENT_BYTES:-1024} B into $orders ($parts partitions)"
  "$BIN" gen --bootstrap "$BOOT" --orders-topic "$orders" --inventory-topic "$tag.inventory" --events "$events" \
    --rate 20000 --seed 1 --start "$(date -u -d '-30 min' +%Y-%m-%dT%H:%M:%SZ)" --inventory-every 0 \
    --event-bytes "${EVENT_BYTES:-1024}" > "$gen"
  sync; sleep 5
}

# CPU ticks (utime+stime, incl. reaped children) of a pid; 0 if gone.
cpu_ticks() { awk '{print $14+$15+$16+$17}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Host-wide busy (all but idle and iowait), steal and total ticks from /proc/stat.
host_ticks() { awk '/^cpu /{t=0; for(i=2;i<=NF;i++) t+=$i; print t - $5 - $6, $9, t}' /proc/stat; }
# Host-wide steal ticks and total ticks (the last two of host_ticks).
steal_total() { host_ticks | cut -d' ' -f2-; }
CLK_TCK=$(getconf CLK_TCK)
# Peak RSS (kB) of a live pid.
peak_rss_kb() { awk '/VmHWM/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# --- shared by the scenario scripts (spike, catchup, recovery, steady) ---
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Prefixes every stdin line with the epoch time (s.ns): the generator's progress lines become
# an offered-rate time series.
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done; }
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
# Java of the Kafka Streams baseline, in the background; pid in PIDFILE. KS_EXTRA: more App
# flags (e.g. `--instance-id ID --lag-out FILE`, as recovery.sh passes).
# start_ks APP_ID ORDERS STATE_DIR ACTION_URL GUARANTEE LATENCY_OUT LOG PIDFILE
start_ks() {
  java -Xms"${KS_HEAP:-1g}" -Xmx"${KS_HEAP:-1g}" -XX:+UseG1GC -jar "$KS_JAR" \
    --bootstrap "$BOOT" --app-id "$1" --prefix "$1" --orders "$2" --partitions "${PARTITIONS:-4}" --guarantee "$5" \
    --threads "${KS_THREADS:-2}" --state-dir "$3" --action-url "$4" --latency-out "$6" \
    --min-units "${MIN_UNITS:-50}" --factor "${FACTOR_RULE:-3.0}" --baseline-windows 15 ${KS_EXTRA:-} >/dev/null 2>> "$7" &
  echo $! > "$8"
}
# Deletes the topics whose names match a regex (frees the broker's disk between runs).
delete_topics() {
  java -Xmx256m -cp "${TIDEMARK_CACHE:-$HOME/.cache/tidemark}/kafka-4.4.0/libs/*" -Dlog4j2.level=error \
    org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --delete --topic "$1" >/dev/null 2>&1 || true
}
# Stops the broker if this script started it and wipes its data directory (GBs per run).
broker_down_wipe() {
  broker_down
  if [ "$STARTED_BROKER" = 1 ] && [ -z "${KEEP_BROKER:-}" ]; then rm -rf "$KAFKA_RUN/data"; fi
}

# scenario_begin KIND: what every scenario script starts with. Sets TAG (KIND-<epoch>),
# WORK (its temp dir), PIDS (background processes to kill), RX_PORT (the action receiver,
# started here) and MACHINE; installs scenario_cleanup on EXIT.
scenario_begin() {
  TAG="$1-$(date +%s)"
  WORK="$(mktemp -d /tmp/bench-$TAG.XXXX)"
  PIDS=()
  trap scenario_cleanup EXIT
  RX_PORT=$(free_port)
  python3 "$BENCH/lib/receiver.py" "$RX_PORT" "$WORK/actions.jsonl" & PIDS+=($!)
  MACHINE="$(machine_json)"
}

# Kills what the run started (pid files in WORK, PIDS), removes its state directories, runs
# the script's own trap_extra, and stops the broker it started, wiping its data.
scenario_cleanup() {
  for f in "$WORK"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"/state*; eval "${trap_extra:-}"; broker_down_wipe
}

# scenario_topology: the run's topology file $WORK/t.toml (velocity_spike in act mode,
# posting to the receiver) and its topics.
scenario_topology() {
  topology_file "$WORK/t.toml" "$TAG" "$PARTITIONS" act "http://127.0.0.1:$RX_PORT/actions" "${MIN_UNITS:-50}" "${FACTOR_RULE:-3.0}" "${BASELINE_WINDOWS:-15}"
  "$BIN" topics --bootstrap "$BOOT" --topology "$WORK/t.toml" >/dev/null 2>&1
}

# scenario_tidemark: the run's topology, tidemark serving /metrics on a free port (HTTP),
# ready, and the sampler (pid SP) writing $WORK/samples.jsonl once a second.
scenario_tidemark() {
  HTTP=$(free_port)
  scenario_topology
  start_tidemark "$WORK/t.toml" "$WORK/state" "$TAG" "$HTTP" "$WORK/tm.log" "$WORK/tm.pid"
  wait_ready "$HTTP" 120 || { cat "$WORK/tm.log" >&2; exit 1; }
  python3 "$BENCH/lib/sampler.py" "$WORK/samples.jsonl" --url "http://127.0.0.1:$HTTP/metrics" \
    --pidfile "processor=$WORK/tm.pid" --pid "broker=$BROKER_PID" & SP=$!; PIDS+=($SP)
}

# alive PIDFILE LOG: exits the script if the process died (with the tail of its log).
alive() { kill -0 "$(cat "$1")" 2>/dev/null || { blog "process $1 died"; tail -50 "$2" >&2; exit 1; }; }
# stop_pidfile PIDFILE: SIGTERM, up to 60 s for a clean exit, then SIGKILL.
stop_pidfile() {
  local p i; p=$(cat "$1")
  kill "$p" 2>/dev/null || true
  for i in $(seq 1 60); do kill -0 "$p" 2>/dev/null || break; sleep 1; done
  kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; rm -f "$1"
}
