#!/usr/bin/env bash
# Action latency at a steady paced input: p50/p99 of append→2xx and of each budget segment.
#
#   bench/latency.sh [RATE] [SECONDS]        (defaults: 20000 events/s for 60 s)
#   IDLE_SKEW=300ms COMMIT_INTERVAL=100ms bench/latency.sh ...   (topology overrides)
#   LATENCY_OUT=FILE    append the result line there instead of bench/results/latency.jsonl
#   LATENCY_RAW=FILE    also write every action's exact append→2xx in ms, one per line
#
# Starts the benchmark broker (port 39092) unless up, creates a run's topics (all three rules
# in `act` mode, thresholds that fire steadily), starts `tidemark run` with /metrics and a
# local 200-answering endpoint (bench/lib/receiver.py), produces ~1 KiB events open-loop at
# RATE with `tidemark gen --paced --start now` (inventory snapshots every 1000 events), then
# reads the latency histograms from /metrics and appends a JSON line to
# bench/results/latency.jsonl. Segment quantiles are interpolated within Prometheus buckets
# (bounds 1 ms … 300 s, fine between 50 ms and 3 s); `end_to_end_exact_ms` is exact per
# action, from the receiver's log (each POST carries the triggering record's append time in
# `tidemark-source-append-time`). The open-loop generator keeps coordinated omission out of
# the input side.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
RATE="${1:-20000}"
SECS="${2:-60}"
EVENTS=$((RATE * SECS))
ensure_tidemark
broker_up
RUN="lat-$(date +%s)"
WORK="$(mktemp -d)"
cleanup() { kill "${TM_PID:-}" "${RX_PID:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; eval "${trap_extra:-}"; broker_down; }
trap cleanup EXIT
RX_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
HTTP_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 "$BENCH/lib/receiver.py" "$RX_PORT" "$WORK/actions.jsonl" & RX_PID=$!
python3 - "$ROOT/topology/examples/orders.toml" "$WORK/topology.toml" "$RUN" "http://127.0.0.1:$RX_PORT/actions" "${IDLE_SKEW:-}" "${COMMIT_INTERVAL:-}" <<'PY'
import sys
src, out, run, url, idle_skew, commit_interval = sys.argv[1:]
t = open(src).read()
if idle_skew:
    t = t.replace('idle_skew = "2s"', f'idle_skew = "{idle_skew}"')
if commit_interval:
    t = t.replace('commit_interval = "200ms"', f'commit_interval = "{commit_interval}"')
t = t.replace('topic = "orders"', f'topic = "{run}.orders"').replace('topic = "inventory"', f'topic = "{run}.inventory"')
t = t.replace('topic = "tidemark.', f'topic = "{run}.')
t = t.replace('# action_url = "https://inventory.internal/actions"', f'action_url = "{url}"')
t = t[: t.index('[[rules]]')] + '''[[rules]]
id = "oversell"
version = 1
mode = "act"

[[rules]]
id = "low_stock"
version = 1
mode = "act"
params = { threshold = 50, replenish_to = 200 }

[[rules]]
id = "velocity_spike"
version = 1
mode = "act"
params = { min_units = 40, factor = "2.0", baseline_windows = 15 }
'''
open(out, "w").write(t)
PY
"$BIN" topics --bootstrap "$BOOT" --topology "$WORK/topology.toml" >&2
# act rules refuse to run unsigned; signing is part of the measured path.
TIDEMARK_WEBHOOK_SECRET="${TIDEMARK_WEBHOOK_SECRET:-bench-signing-key}" \
  "$BIN" run --bootstrap "$BOOT" --topology "$WORK/topology.toml" --state-dir "$WORK/state" --group "$RUN" \
  --http-addr "127.0.0.1:$HTTP_PORT" --log warn 2> "$WORK/run.log" & TM_PID=$!
for _ in $(seq 1 60); do curl -sf "127.0.0.1:$HTTP_PORT/readyz" >/dev/null && break; sleep 1; done
blog "producing $EVENTS events at $RATE/s (open loop)"
STEAL0="$(steal_total)"
"$BIN" gen --bootstrap "$BOOT" --orders-topic "$RUN.orders" --inventory-topic "$RUN.inventory" --events "$EVENTS" \
  --rate "$RATE" --paced --start now --seed 3 --skus 2000 --inventory-every 1000 > "$WORK/gen.json" 2> "$WORK/gen.log"
sleep 10
curl -sf "127.0.0.1:$HTTP_PORT/metrics" > "$WORK/metrics.txt"
python3 - "$WORK/metrics.txt" "$RATE" "$SECS" "$WORK/actions.jsonl" "$(loadavg)" "$BIN_INFO" "${IDLE_SKEW:-2s}" "${COMMIT_INTERVAL:-200ms}" \
  "$(steal_pct_between "$STEAL0" "$(steal_total)")" <<'PY' | tee -a "${LATENCY_OUT:-$RESULTS/latency.jsonl}"
import json, re, sys
page, rate, secs, actions, load, build, idle_skew, commit_interval, steal_pct = sys.argv[1:]
broken = sum(float(l.split()[-1]) for l in open(page) if l.startswith("tidemark_merge_broken_promises_total"))
buckets = {}
for line in open(page):
    m = re.match(r'tidemark_latency_seconds_bucket\{(.*)\} (\S+)', line)
    if not m: continue
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
    buckets.setdefault(labels["segment"], []).append((float("inf") if labels["le"] == "+Inf" else float(labels["le"]), float(m.group(2))))
def q(bs, p):
    bs = sorted(bs); total = bs[-1][1]
    if total == 0: return None
    target, prev_le, prev_n = p * total, 0.0, 0.0
    for le, n in bs:
        if n >= target:
            if le == float("inf"): return prev_le
            return prev_le + (le - prev_le) * ((target - prev_n) / max(n - prev_n, 1e-9))
        prev_le, prev_n = le, n
out = {"bench": "latency", "rate": int(rate), "seconds": int(secs), "actions": sum(1 for _ in open(actions)),
       "loadavg_at_end": float(load), "build": build, "idle_skew": idle_skew, "commit_interval": commit_interval,
       "merge_broken_promises": broken, "quantiles_ms": {},
       # the hypervisor's steal over the generator's run and the 10 s after it (host-wide)
       "steal_pct": float(steal_pct)}
for seg, bs in sorted(buckets.items()):
    out["quantiles_ms"][seg] = {k: (None if v is None else round(v * 1000, 1)) for k, v in (("p50", q(bs, .5)), ("p99", q(bs, .99)))} | {"count": int(sorted(bs)[-1][1])}
# Exact append→2xx per action from the receiver's log (the tidemark-source-append-time header
# against the receive time), not interpolated within buckets.
rows = [json.loads(l) for l in open(actions) if l.strip()]
# Output checks: every action once (a re-POST under the same key is a dispatcher retry the
# contract allows, counted), never two payloads under one key.
payloads = {}
for r in rows:
    payloads.setdefault(r["key"], set()).add(r.get("body") if isinstance(r.get("body"), str) else json.dumps(r.get("body"), sort_keys=True))
out["outputs"] = {"posts": len(rows), "distinct_keys": len(payloads),
                  "keys_with_two_payloads": sum(1 for v in payloads.values() if len(v) > 1)}
lat = sorted(r["t"] - r["src"] for r in rows if r.get("src") is not None)
if lat:
    pick = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
    out["end_to_end_exact_ms"] = {"count": len(lat), "p50": pick(.5), "p99": pick(.99), "p999": pick(.999), "max": lat[-1]}
print(json.dumps(out))
PY
if [ -n "${LATENCY_RAW:-}" ]; then
  python3 -c 'import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("src") is not None: print(r["t"] - r["src"])' "$WORK/actions.jsonl" > "$LATENCY_RAW"
fi
