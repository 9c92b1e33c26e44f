#!/usr/bin/env bash
# kill -9 recovery, tidemark against Kafka Streams EOS, in alternating blocks (issue 16's
# method) for the row "kill -9 → first action: target ≤ 1 s, and ≥ 10× faster than Kafka
# Streams (EOS)".
#
#   bench/recovery_ab.sh [RATE=10000] [HISTORY=1000000] [PRE_KILL_S=30] [POST_KILL_S=40] [BLOCKS=5]
#   SPEC scale: bench/recovery_ab.sh 20000 72000000 60 120 5   (hours per run; see below)
#
# Every run is one bench/recovery.sh run with one system (SYSTEMS=tidemark or SYSTEMS=ks-eos):
# HISTORY records processed into the state first, then paced input at RATE, `kill -9` after
# PRE_KILL_S, an immediate restart on the same state directory with the same static member id,
# POST_KILL_S more input and DRAIN_S (10) s of measurement. With WARMUP=1 (default) one run of
# each system comes first and is discarded; then BLOCKS blocks of tidemark, ks-eos, ks-eos,
# tidemark. QUIET_LOAD (2.5) / QUIET_MAX_S (60): before each run, wait up to QUIET_MAX_S for
# the 1-minute load average to fall below QUIET_LOAD; the load before each run is recorded
# either way. CONTINUE=1 adds BLOCKS blocks to the series already in results/raw/$NAME-runs.jsonl
# (after its own discarded warm-ups; refused unless rate, history, kill and drain times, the
# caught-up threshold and both revisions are those of that series); the result then has every
# block, and `series` says which command ran which blocks.
#
# Committed binaries only: tidemark is BENCH_REV (HEAD) built by lib/build_rev.sh, or
# TIDEMARK_BIN with its revision in TIDEMARK_REV; the Kafka Streams baseline is the jar of the
# last commit touching bench/kstreams at KS_REV (HEAD), built by lib/build_ks_rev.sh in a
# clean worktree (not the working tree's bench/kstreams), or KSTREAMS_JAR with KSTREAMS_REV.
# Both revisions (and the jar's sha256) are in the result.
#
# One broker for the whole series (KAFKA_PORT, default 39092): this script starts it unless
# one is up, so recovery.sh finds it up and neither stops nor wipes it, and never restarts it
# between systems (it does that only between two systems of one SYSTEMS list). A cold broker
# per run costs a JIT warm-up that saturated this 2-core host in the latency series. Each
# run's topics are deleted after it (a run writes ~1 GB at the defaults).
#
# Measured per run (bench/lib/recovery_ab.py, from the receiver's log of every POST and Kafka
# Streams' per-second latency log; times from the kill): → first action POSTed, → first action
# whose key was not POSTed before the kill, → caught up (one rule for both systems: every later
# second with actions has append→2xx p99 < CAUGHT_UP_MS, default 1000; tidemark's latency is
# exact per action from the receiver's log, Kafka Streams' from its dispatcher's per-second
# HdrHistogram), POSTs after the restart of keys POSTed before the kill, the load average
# before, the system's own pre-kill per-second p99. If that is already above the threshold,
# "caught up" cannot happen for reasons other than the recovery: tidemark with the default
# idle_skew of 2 s has a steady-state p99 of ~2.9 s in this scenario (no inventory records:
# the idle promise paces the merge). So → back to the system's own level is reported beside
# it: the same rule with max(CAUGHT_UP_MS, its highest pre-kill per-second p99) as threshold.
# Checked in every run: no key POSTed with two different payloads, at least one action after
# the restart; a failed check stops the series (its line is kept and summarised).
#
# Defaults, sized so a run takes ≤ ~3 min on this 2-core host:
# - RATE=10000: Kafka Streams EOS drains at most ~18,500 events/s here with the host to itself
#   (results/throughput_compare.json), so at 20,000/s it falls behind even without a kill and
#   never "catches up"; the 20,000/s latency series saturated this host. At 10,000/s Kafka
#   Streams has ~1.8× headroom to drain the outage on a quiet host (in the smoke run, with a
#   load of 8–16 from other work, it fell behind before the kill: check pre_kill per run).
# - HISTORY=1000000: 100 s of input at 10,000/s in the dedup state (and, for Kafka Streams, in
#   its dedup store's changelog): the restart must reopen real state. tidemark processes it in
#   ~15 s, Kafka Streams EOS in ~60 s; 4,000,000 took Kafka Streams ~160 s per run.
# - PRE_KILL_S=30: both are in steady state with actions flowing before the kill.
# - POST_KILL_S=40: earlier runs took 3–12 s to the first action; 40 s (+ DRAIN_S 10) leaves
#   Kafka Streams time to catch up as well.
# One tidemark run takes ~2 min, one Kafka Streams run ~3–3.5 min (JVM start, 1 M history
# records, 80 s live, stop): at the defaults the series (22 runs) takes ~60–80 min with the
# quiet-load waits. At SPEC scale (72 M history records at 20,000/s) a Kafka Streams run
# spends over an hour on the history alone and the state is ~30 GB: not on this host.
#
# Output: bench/results/$NAME.json (NAME=recovery_ab; per system the median and min–max of
# each measure, the ratios Kafka Streams / tidemark of the medians and per block, verdict
# lines against ≤ 1 s and ≥ 10×), $NAME.png; raw: bench/results/raw/$NAME-runs.jsonl (one line
# per run, enough to recompute every measure with `recovery_ab.py run` and no --raw-out), and
# per run raw/$NAME-rNN-<system>.json (recovery.sh's result; its plot .png only with
# KEEP_RUN_PNG=1, as $NAME.png shows every run's per-second p99), .actions.jsonl.gz (every
# POST: time, key, source append time, body hash) and, for Kafka Streams, .latency.jsonl (its
# dispatcher's per-second latency log).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
RATE="${1:-10000}"; HISTORY="${2:-1000000}"; PRE_KILL_S="${3:-30}"; POST_KILL_S="${4:-40}"; BLOCKS="${5:-5}"
NAME="${NAME:-recovery_ab}"; WARMUP="${WARMUP:-1}"; DRAIN_S="${DRAIN_S:-10}"; CAUGHT_UP_MS="${CAUGHT_UP_MS:-1000}"
QUIET_LOAD="${QUIET_LOAD:-2.5}"; QUIET_MAX_S="${QUIET_MAX_S:-60}"
KS=ks-eos
RAW="$RESULTS/raw"; mkdir -p "$RAW"

ensure_tidemark
TM_REV="${BIN_INFO#* * * }" # BIN_INFO: "<mtime: 3 fields> <revision>"
ensure_kstreams_committed
TMP="$(mktemp -d "/tmp/bench-$NAME.XXXX")"
CUR_TAG=""
broker_up
cleanup() {
  if [ -n "$CUR_TAG" ]; then delete_topics "$CUR_TAG.*"; fi
  eval "${trap_extra:-}"; broker_down_wipe; rm -rf "$TMP"
}
trap cleanup EXIT
blog "tidemark $TM_REV ($BIN_INFO), Kafka Streams $KSTREAMS_REV ($KSTREAMS_JAR, sha256 $KS_SHA), broker $BOOT"

RUNS="$RAW/$NAME-runs.jsonl"
n=0; FIRST_BLOCK=1; SERIES='[]'
if [ "${CONTINUE:-0}" = 1 ]; then
  # more blocks for an earlier series of the same scenario and binaries (its runs are kept; this
  # series' warm-ups are run and discarded as usual): refused unless every setting that shapes a
  # run is the same
  read -r n FIRST_BLOCK SERIES < <(python3 -c 'import json, sys
runs_path, res_path = sys.argv[1:3]
want = dict(zip(("rate", "history", "pre_kill_s", "post_kill_s", "drain_s", "caught_up_ms", "tidemark_rev", "kstreams_rev",
                 "kstreams_jar_sha256_16"), sys.argv[3:]))
try:
    runs = [json.loads(x) for x in open(runs_path) if x.strip()]
    old = json.load(open(res_path))
except (OSError, ValueError) as e:
    sys.exit("CONTINUE=1: no earlier series to continue (%s)" % e)
def same(a, b):
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == b
diff = [f"{k}: {old.get(k)} there, {v} here" for k, v in want.items() if not same(old.get(k), v)]
if diff or not runs:
    sys.exit("CONTINUE=1 refused, the earlier series differs: " + "; ".join(diff or ["it has no runs"]))
series = old.get("series") or [{"blocks": old.get("blocks"), "command": old.get("command"), "first_run": 1}]
print(max(r["run"] for r in runs), max(r["block"] for r in runs) + 1, json.dumps(series, separators=(",", ":")))' \
    "$RUNS" "$RESULTS/$NAME.json" "$RATE" "$HISTORY" "$PRE_KILL_S" "$POST_KILL_S" "$DRAIN_S" "$CAUGHT_UP_MS" "$TM_REV" \
    "$KSTREAMS_REV" "$KS_SHA") || true
  [ -n "$FIRST_BLOCK" ] || exit 2 # the reason is on stderr
  blog "continuing $NAME: runs 1–$n and blocks 1–$((FIRST_BLOCK - 1)) kept, blocks $FIRST_BLOCK–$((FIRST_BLOCK + BLOCKS - 1)) follow"
else
  : > "$RUNS"
fi
META="$(python3 -c 'import json, sys
a = sys.argv[1:]
series = json.loads(a[15]) + [{"blocks": int(a[4]), "first_block": int(a[14]), "first_run": int(a[16]) + 1, "command": a[17]}]
print(json.dumps({"rate": int(a[0]), "history": int(a[1]), "pre_kill_s": int(a[2]), "post_kill_s": int(a[3]),
                  "blocks": int(a[14]) - 1 + int(a[4]), "series": series,
                  "warmup": a[5] == "1", "drain_s": int(a[6]), "caught_up_ms": float(a[7]), "tidemark_rev": a[8], "tidemark_binary": a[9],
                  "kstreams_rev": a[10], "kstreams_jar_sha256_16": a[11], "kstreams_system": a[12], "kafka_port": int(a[13]),
                  "order": "tidemark, ks, ks, tidemark per block", "target": "kill -9 → first action ≤ 1 s and ≥ 10× faster than Kafka Streams (EOS)",
                  "command": a[17]}))' \
  "$RATE" "$HISTORY" "$PRE_KILL_S" "$POST_KILL_S" "$BLOCKS" "$WARMUP" "$DRAIN_S" "$CAUGHT_UP_MS" "$TM_REV" "$BIN_INFO" \
  "$KSTREAMS_REV" "$KS_SHA" "$KS" "$KAFKA_PORT" "$FIRST_BLOCK" "$SERIES" "$n" \
  "$([ "${CONTINUE:-0}" = 1 ] && echo 'CONTINUE=1 ')bench/recovery_ab.sh $RATE $HISTORY $PRE_KILL_S $POST_KILL_S $BLOCKS")"
summarise() { python3 "$BENCH/lib/recovery_ab.py" summary "$RUNS" "$RESULTS/$NAME.json" "$RESULTS/$NAME.png" --meta "$META"; }

N0=$n
TOTAL=$(( N0 + (WARMUP == 1 ? 2 : 0) + 4 * BLOCKS ))
run_one() { # SYSTEM PHASE BLOCK
  local sys=$1 phase=$2 block=$3 id load pre rc=0
  wait_quiet
  n=$((n + 1)); id="$(printf 'r%02d' "$n")"; load="$(loadavg)"; pre="$TMP/$id"
  blog "run $n/$TOTAL: $sys, $phase, block $block, load $load, steal ${QUIET_STEAL}% (waited ${QUIET_WAITED}s)"
  if ! env SYSTEMS="$sys" NAME="raw/$NAME-$id-$sys" RAW_OUT="$pre" DRAIN_S="$DRAIN_S" \
      TIDEMARK_BIN="$BIN" TIDEMARK_REV="$TM_REV" KSTREAMS_JAR="$KSTREAMS_JAR" \
      bash "$BENCH/recovery.sh" "$RATE" "$HISTORY" "$PRE_KILL_S" "$POST_KILL_S" > "$pre.log" 2>&1; then
    cp "$pre.log" "$RAW/$NAME-$id-$sys.failed.log"
    CUR_TAG="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["tag"])' "$pre-$sys.marks.json" 2>/dev/null || true)"
    blog "run $n ($sys) failed; log: results/raw/$NAME-$id-$sys.failed.log"; tail -30 "$pre.log" >&2; exit 1
  fi
  CUR_TAG="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["tag"])' "$pre-$sys.marks.json")"
  delete_topics "$CUR_TAG.*"
  local line
  line="$(python3 "$BENCH/lib/recovery_ab.py" run --system "$sys" --phase "$phase" --block "$block" --run "$n" --load "$load" \
    --marks "$pre-$sys.marks.json" --actions "$pre-$sys.actions.jsonl" \
    $([ "$sys" = tidemark ] || echo "--latency $pre-$sys.latency.jsonl") \
    --result "$RAW/$NAME-$id-$sys.json" --raw-out "$RAW/$NAME-$id-$sys" --caught-up-ms "$CAUGHT_UP_MS")" || rc=$?
  if [ -n "$line" ]; then printf '%s\n' "$line" >> "$RUNS"; fi
  CUR_TAG=""
  if [ -z "${KEEP_RUN_PNG:-}" ]; then rm -f "$RAW/$NAME-$id-$sys.png"; fi
  # recovery.sh leaves its work directory (logs, samples) in /tmp: the raw copies are kept instead
  local work; work="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["work"])' "$pre-$sys.marks.json")"
  case "$work" in /tmp/bench-recovery-*) rm -rf "$work";; esac
  rm -f "$pre"*
  [ -z "$line" ] || printf '%s' "$line" | python3 -c 'import json, sys
r = json.loads(sys.stdin.read())
f = lambda x: "never" if x is None else "%.2f s" % x
print("[bench]   first action %s, first new action %s, caught up %s, re-POSTs %d, outputs %s" % (
    f(r["first_action_s"]), f(r["first_new_action_s"]), f(r["caught_up_s"]), r["reposts_of_keys_seen_before_kill"],
    "ok" if r["outputs"]["ok"] else "FAILED %s" % r["outputs"]), file=sys.stderr)'
  if [ "$rc" != 0 ]; then
    blog "run $n ($sys): the output check failed (or the run could not be read, rc $rc); stopping the series"
    summarise >/dev/null || true; exit 1
  fi
}

if [ "$WARMUP" = 1 ]; then run_one tidemark warmup 0; run_one "$KS" warmup 0; fi
for b in $(seq "$FIRST_BLOCK" $((FIRST_BLOCK + BLOCKS - 1))); do for s in tidemark "$KS" "$KS" tidemark; do run_one "$s" measured "$b"; done; done
summarise
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
for s, m in d["systems"].items():
    for k in ("first_action_s", "first_new_action_s", "caught_up_s", "back_to_pre_kill_s", "reposts_of_keys_seen_before_kill"):
        v = m[k]
        print("%-8s %-34s median %s (min %s, max %s, never %d of %d)" % (s, k, v["median"], v["min"], v["max"], v["never"], v["n"]))
for v in d["verdicts"]:
    print(v)' "$RESULTS/$NAME.json"
