#!/usr/bin/env bash
# Validates the tidemark Helm chart (helm/tidemark) offline:
#   helm lint (default values, helm/ci-values.yaml, and values the schema must reject),
#   helm template, kubeconform -strict against Kubernetes and Prometheus Operator JSON
#   schemas generated locally, chart contract checks (incl. the optional micro-batch
#   StatefulSet, finance close CronJob and snapshot volume, all on in helm/ci-values.yaml, the
#   partition assignment: --replicas or --session-timeout per staticAssignment, and standby
#   tasks: TIDEMARK_STANDBYS, never with static assignment),
#   the flags the chart passes checked against `tidemark <command> --help`, promtool
#   check/test rules on the PrometheusRule, the Grafana dashboard JSON, and the metric names
#   used by both against helm/metric-names.txt.
# Idempotent. First run: builds helm, kubeconform and promtool from the Go module proxy
# (nice -n 19) into $TIDEMARK_CACHE/bin and generates the schemas into
# $TIDEMARK_CACHE/k8s-schemas (TIDEMARK_CACHE defaults to ~/.cache/tidemark). Later runs
# only check. Needs go and python3 (+ PyYAML, installed with pip if missing).
# Env: TIDEMARK_HELM_PROMTOOL=skip  skip building promtool (the rules then get a Python
#                                   YAML + PromQL structural check instead);
#      TIDEMARK_BIN=/path/tidemark  a built tidemark, to `tidemark validate` the rendered
#                                   topologies (otherwise looked up in the cargo target dirs).
# Prints one line per check and ends with "N passed, M failed[, K skipped]"; exits non-zero
# on any failure.
set -uo pipefail

HELM_VERSION=v3.22.0
KUBECONFORM_VERSION=v0.8.0
PROMETHEUS_MODULE_VERSION=v0.316.0        # github.com/prometheus/prometheus (promtool 3.x)
K8S_VERSION=1.36.3                        # k8s.io/kubernetes: OpenAPI spec for the schemas
PROM_OPERATOR_VERSION=v0.85.0             # prometheus-operator: ServiceMonitor/PrometheusRule CRDs
NAMESPACE=streaming

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
CHART="$HERE/tidemark"
CACHE="${TIDEMARK_CACHE:-$HOME/.cache/tidemark}"
BIN="$CACHE/bin"
LOGS="$CACHE/logs"
mkdir -p "$BIN" "$LOGS"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tidemark-helm-test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

say() { echo "[helm/test] $*" >&2; }
die() { say "error: $*"; echo "0 passed, 1 failed"; exit 1; }

# ---- prerequisites ---------------------------------------------------------------------
command -v go >/dev/null || die "go is not installed (needed to build helm, kubeconform, promtool)"
command -v python3 >/dev/null || die "python3 is not installed"
if ! python3 -c 'import yaml' 2>/dev/null; then
  say "installing PyYAML with pip"
  python3 -m pip install --quiet pyyaml >/dev/null 2>&1 \
    || python3 -m pip install --quiet --break-system-packages pyyaml >/dev/null 2>&1 \
    || die "could not pip install pyyaml"
fi

# go_tool NAME PACKAGE VERSION [go install flags...]: builds PACKAGE@VERSION once into
# $BIN/NAME-VERSION and links $BIN/NAME to it.
go_tool() {
  local name=$1 pkg=$2 ver=$3 out="$BIN/$1-$3"
  shift 3
  if [ ! -x "$out" ]; then
    say "building $name $ver from the Go module proxy (nice -n 19; minutes on 2 cores; log: $LOGS/$name.log)"
    local tmp="$BIN/.build-$name"
    rm -rf "$tmp"
    if ! (cd "$WORK" && GOBIN="$tmp" GOFLAGS=-mod=mod nice -n 19 go install "$@" "$pkg@$ver") >"$LOGS/$name.log" 2>&1; then
      tail -n 20 "$LOGS/$name.log" >&2
      rm -rf "$tmp"
      return 1
    fi
    mv "$tmp/$name" "$out" && rm -rf "$tmp"
    say "built $out"
  fi
  ln -sfn "$name-$ver" "$BIN/$name"
}

# The ldflags are those of helm's Makefile: its version, and the Kubernetes version that
# `helm template` assumes without a cluster (client-go v0.37 -> 1.37; else it says 1.20).
go_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37 \
  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" \
  || die "could not build helm"
go_tool kubeconform github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION" || die "could not build kubeconform"
HELM="$BIN/helm-$HELM_VERSION"
KUBECONFORM="$BIN/kubeconform-$KUBECONFORM_VERSION"
PROMTOOL=""
if [ "${TIDEMARK_HELM_PROMTOOL:-}" != skip ]; then
  if go_tool promtool github.com/prometheus/prometheus/cmd/promtool "$PROMETHEUS_MODULE_VERSION"; then
    PROMTOOL="$BIN/promtool-$PROMETHEUS_MODULE_VERSION"
  else
    say "could not build promtool: falling back to the Python PromQL structural check"
  fi
fi

# ---- JSON schemas (no GitHub): from the Kubernetes OpenAPI spec and the CRDs --------------
# mod_dir MODULE@VERSION: downloads a module (zip from the Go module proxy) and prints its dir.
mod_dir() {
  (cd "$WORK" && GOFLAGS=-mod=mod go mod download -json "$1") 2>>"$LOGS/schemas.log" \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error", "no Dir")))'
}
GEN="$HERE/tools/k8s_schemas.py"
GEN_HASH="$(sha256sum "$GEN" | cut -c1-12)"
SCHEMAS="$CACHE/k8s-schemas/v$K8S_VERSION-po$PROM_OPERATOR_VERSION-$GEN_HASH"
if [ ! -f "$SCHEMAS/.complete" ]; then
  say "generating JSON schemas for Kubernetes v$K8S_VERSION and prometheus-operator $PROM_OPERATOR_VERSION into $SCHEMAS"
  K8S_DIR="$(mod_dir "k8s.io/kubernetes@v$K8S_VERSION")" || die "could not download k8s.io/kubernetes@v$K8S_VERSION (see $LOGS/schemas.log)"
  PO_DIR="$(mod_dir "github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR_VERSION")" \
    || die "could not download prometheus-operator@$PROM_OPERATOR_VERSION (see $LOGS/schemas.log)"
  CRDS="$PO_DIR/example/prometheus-operator-crd"
  rm -rf "$SCHEMAS"
  python3 "$GEN" --swagger "$K8S_DIR/api/openapi-spec/swagger.json" \
    --crd "$CRDS/monitoring.coreos.com_servicemonitors.yaml" \
    --crd "$CRDS/monitoring.coreos.com_prometheusrules.yaml" \
    --out "$SCHEMAS" >&2 || die "schema generation failed"
  touch "$SCHEMAS/.complete"
fi
SCHEMA_LOCATION="$SCHEMAS/{{ .ResourceKind }}{{ .KindSuffix }}.json"

say "helm $HELM_VERSION, kubeconform $KUBECONFORM_VERSION, promtool: $([ -n "$PROMTOOL" ] && echo "prometheus module $PROMETHEUS_MODULE_VERSION" || echo "not built"), schemas: $SCHEMAS"

# ---- checks ----------------------------------------------------------------------------
PASS=0; FAIL=0; SKIP=0
# check NAME CMD...: runs CMD, counts it, shows its output when it fails.
check() {
  local name=$1; shift
  local out="$WORK/check.out"
  if "$@" >"$out" 2>&1; then
    PASS=$((PASS + 1)); echo "ok    $name"
  else
    FAIL=$((FAIL + 1)); echo "FAIL  $name"; sed 's/^/      /' "$out" | tail -n 40
  fi
}
# check_fails NAME CMD...: CMD must fail (a negative test).
check_fails() {
  local name=$1; shift
  if "$@" >"$WORK/check.out" 2>&1; then
    FAIL=$((FAIL + 1)); echo "FAIL  $name (was accepted)"
  else
    PASS=$((PASS + 1)); echo "ok    $name"
  fi
}
skip() { SKIP=$((SKIP + 1)); echo "skip  $1"; }

KV=(--kube-version "$K8S_VERSION")
DEF="$WORK/default.yaml"
CI="$WORK/ci.yaml"
CIV="$HERE/ci-values.yaml"

check "helm lint (default values)"   "$HELM" lint --strict "${KV[@]}" "$CHART"
check "helm lint (ci-values.yaml)"   "$HELM" lint --strict "${KV[@]}" "$CHART" -f "$CIV"
# lint_rejects ARGS...: helm lint must fail, and because of values.schema.json.
lint_rejects() {
  local out
  if out="$("$HELM" lint "$CHART" "$@" 2>&1)"; then echo "accepted: $*"; return 1; fi
  grep -q "meet the specifications of the schema" <<<"$out" || { echo "$out"; return 1; }
}
check "schema rejects an unknown key (replicas)"         lint_rejects --set replicas=3
check "schema rejects a wrong type (replicaCount=three)"  lint_rejects --set replicaCount=three
check "schema rejects securityContext.runAsNonRoot=false" lint_rejects --set securityContext.runAsNonRoot=false
check "schema rejects an empty kafka.bootstrap"          lint_rejects --set kafka.bootstrap=
check "schema rejects terminationGracePeriodSeconds=5"   lint_rejects --set terminationGracePeriodSeconds=5
check "schema rejects a bad scrape interval"             lint_rejects --set serviceMonitor.interval=often
check "schema rejects microbatch.every=often (not a duration)" lint_rejects --set microbatch.every=often
check "schema rejects microbatch.deadline=0s (zero)"      lint_rejects --set microbatch.deadline=0s
check "schema rejects financeClose.grace=7 (not a string)" lint_rejects --set financeClose.grace=7
check "schema rejects a 4-field financeClose.schedule"   lint_rejects --set-string "financeClose.schedule=30 7 * *"
check "schema rejects CRON_TZ= in financeClose.schedule"  lint_rejects --set-string "financeClose.schedule=CRON_TZ=UTC 30 22 * * *"
check "schema rejects an unknown microbatch key"          lint_rejects --set microbatch.replicas=2
check "schema rejects a negative microbatch.maxSliceRecords"   lint_rejects --set microbatch.maxSliceRecords=-1
check "schema rejects podLabels app.kubernetes.io/component" lint_rejects --set podLabels.app\\.kubernetes\\.io/component=x
check "schema rejects admin.expose=true without a token Secret" lint_rejects --set admin.expose=true
check "schema rejects an extraVolumeMount over the state volume" lint_rejects --set extraVolumeMounts[0].name=x --set extraVolumeMounts[0].mountPath=/var/lib/tidemark
check "schema rejects probes.readiness.maxLagSeconds=-1" lint_rejects --set probes.readiness.maxLagSeconds=-1
check "schema rejects snapshots.interval=5min (s, m, h only)" lint_rejects --set snapshots.interval=5min
check "schema rejects snapshots.interval=0m (zero)"       lint_rejects --set snapshots.interval=0m
check "schema rejects snapshots.keep=0"                   lint_rejects --set snapshots.keep=0
check "schema rejects snapshots.mountPath over the state volume" lint_rejects --set snapshots.mountPath=/var/lib/tidemark
check "schema rejects staticAssignment=yes (auto, true or false only)" lint_rejects --set staticAssignment=yes
check "schema rejects staticAssignment as the string \"true\" (--set-string)" lint_rejects --set-string staticAssignment=true
check "schema rejects sessionTimeout=30sec (s, m, h only)" lint_rejects --set sessionTimeout=30sec
check "schema rejects sessionTimeout=0s (zero)"           lint_rejects --set sessionTimeout=0s
check "schema rejects sessionTimeout=30 (not a string)"   lint_rejects --set sessionTimeout=30
check "schema rejects standbys=some (auto, none, all or a count only)"   lint_rejects --set standbys=some
check "schema rejects warmupTimeout=5min (s, m, h only)"  lint_rejects --set warmupTimeout=5min
check "schema rejects warmupTimeout=300 (not a string)"   lint_rejects --set warmupTimeout=300
# template_fails_with MESSAGE ARGS...: helm template must fail, and say MESSAGE.
template_fails_with() {
  local msg=$1 out; shift
  if out="$("$HELM" template tidemark "$CHART" --namespace "$NAMESPACE" "${KV[@]}" "$@" 2>&1)"; then echo "accepted: $*"; return 1; fi
  grep -qF "$msg" <<<"$out" || { echo "$out"; return 1; }
}
check "snapshots.enabled without url or existingClaim fails, naming both" \
  template_fails_with "snapshots.enabled needs snapshots.url (a bucket) or snapshots.existingClaim: the name of an existing ReadWriteMany PersistentVolumeClaim" \
  --set snapshots.enabled=true
check "staticAssignment=yes fails in the template too (schema skipped), naming auto, true or false" \
  template_fails_with "staticAssignment must be auto, true or false" --skip-schema-validation --set staticAssignment=yes
check "standbys all + staticAssignment true fails, naming both" \
  template_fails_with "standbys: all needs group-managed assignment, but staticAssignment is true" \
  --set standbys=all --set staticAssignment=true
check "standbys all + staticAssignment true fails with snapshots on too" \
  template_fails_with "standbys: all needs group-managed assignment, but staticAssignment is true" \
  -f "$CIV" --set staticAssignment=true
check "standbys=some fails in the template too (schema skipped), naming what it takes" \
  template_fails_with "standbys must be auto, none, all or a number of copies" --skip-schema-validation --set standbys=some
check "standbys 2 + staticAssignment true fails, naming both" \
  template_fails_with "standbys: 2 needs group-managed assignment, but staticAssignment is true" \
  --set standbys=2 --set staticAssignment=true

# render OUT [helm args...]: helm template into OUT (release "tidemark").
render() { local out=$1; shift; "$HELM" template tidemark "$CHART" --namespace "$NAMESPACE" "${KV[@]}" "$@" >"$out"; }
check "helm template (default values)" render "$DEF"
check "helm template (ci-values.yaml)" render "$CI" -f "$CIV"
# The finance close without a CronJob timeZone: the schedule is then in the controller's zone
# (UTC assumed by the contract check): 22:30 UTC = 07:30 Tokyo.
UTCV="$WORK/utc-close-values.yaml"; UTC="$WORK/utc-close.yaml"
printf 'financeClose:\n  timeZone: ""\n  schedule: "30 22 * * *"\n' >"$UTCV"
check "helm template (ci-values.yaml, finance close without timeZone)" render "$UTC" -f "$CIV" -f "$UTCV"
# Snapshots on the default values, with an h+m interval (the stale alert: 3 x 5400 = 16200 s).
SNAPV="$WORK/snapshots-values.yaml"; SNAP="$WORK/snapshots.yaml"
printf 'snapshots:\n  enabled: true\n  existingClaim: tidemark-snapshots\n  interval: 1h30m\nprometheusRule:\n  enabled: true\n' >"$SNAPV"
check "helm template (default values + snapshots, interval 1h30m)" render "$SNAP" -f "$SNAPV"
# Snapshots in a bucket: the URL as --snapshot-dir, no claim, the credentials Secret as envFrom.
S3V="$WORK/snapshots-s3-values.yaml"; S3="$WORK/snapshots-s3.yaml"
printf 'snapshots:\n  enabled: true\n  url: s3://tidemark-snapshots/orders\n  s3:\n    existingSecret: tidemark-s3\nprometheusRule:\n  enabled: true\n' >"$S3V"
check "helm template (default values + snapshots in s3://)" render "$S3" -f "$S3V"
check "schema rejects snapshots.url=bucket (not a URL of s3, gs or az)" lint_rejects --set snapshots.url=bucket
# Partition assignment: staticAssignment true with snapshots (static although auto would not
# be), and false without snapshots (group-managed, rebuilt from the log).
SNAPSTATV="$WORK/snapshots-static-values.yaml"; SNAPSTAT="$WORK/snapshots-static.yaml"
printf 'staticAssignment: true\n' >"$SNAPSTATV"
check "helm template (default values + snapshots, staticAssignment true)" render "$SNAPSTAT" -f "$SNAPV" -f "$SNAPSTATV"
GROUPV="$WORK/group-values.yaml"; GROUP="$WORK/group.yaml"
printf 'staticAssignment: false\n' >"$GROUPV"
check "helm template (default values, staticAssignment false)" render "$GROUP" -f "$GROUPV"
# Standby tasks without snapshots: auto resolves to group-managed (tidemark refuses --standbys
# all with --replicas), with the alert rules on.
STBYV="$WORK/standbys-values.yaml"; STBY="$WORK/standbys.yaml"
printf 'standbys: all\nprometheusRule:\n  enabled: true\n' >"$STBYV"
check "helm template (default values + standbys all)" render "$STBY" -f "$STBYV"

kc() { "$KUBECONFORM" -strict -summary -output text -schema-location "$SCHEMA_LOCATION" "$@"; }
check "kubeconform -strict (default values)" kc "$DEF"
check "kubeconform -strict (ci-values.yaml, incl. ServiceMonitor/PrometheusRule, micro-batch, finance close)" kc "$CI"
check "kubeconform -strict (finance close without timeZone)" kc "$UTC"
check "kubeconform -strict (default values + snapshots)" kc "$SNAP"
check "kubeconform -strict (default values + snapshots in s3://)" kc "$S3"
check "kubeconform -strict (staticAssignment true + snapshots; false without)" kc "$SNAPSTAT" "$GROUP"
check "kubeconform -strict (default values + standbys all)" kc "$STBY"
sed 's/^  podManagementPolicy:/  podManagmentPolicy:/' "$CI" > "$WORK/typo.yaml"
check_fails "kubeconform rejects a misspelt field (schemas are strict)" kc "$WORK/typo.yaml"

check "chart contract (default values)" python3 "$HERE/tools/check_chart.py" rendered "$DEF" "$CHART/values.yaml"
check "chart contract (ci-values.yaml)" python3 "$HERE/tools/check_chart.py" rendered "$CI" "$CHART/values.yaml" "$CIV"
check "chart contract (finance close without timeZone)" python3 "$HERE/tools/check_chart.py" rendered "$UTC" "$CHART/values.yaml" "$CIV" "$UTCV"
check "chart contract (snapshots: --snapshot-* args, the claim mounted, stale alert at 16200 s)" \
  python3 "$HERE/tools/check_chart.py" rendered "$SNAP" "$CHART/values.yaml" "$SNAPV"
check "chart contract (snapshots in s3://: the URL, no claim, the Secret as envFrom)" \
  python3 "$HERE/tools/check_chart.py" rendered "$S3" "$CHART/values.yaml" "$S3V"
check "chart contract (snapshots, staticAssignment true)" \
  python3 "$HERE/tools/check_chart.py" rendered "$SNAPSTAT" "$CHART/values.yaml" "$SNAPV" "$SNAPSTATV"
check "chart contract (staticAssignment false, no snapshots)" \
  python3 "$HERE/tools/check_chart.py" rendered "$GROUP" "$CHART/values.yaml" "$GROUPV"
check "chart contract (standbys all: env, group-managed, TidemarkStandbyBehind)" \
  python3 "$HERE/tools/check_chart.py" rendered "$STBY" "$CHART/values.yaml" "$STBYV"
# stream_env RENDERED NAME VALUE: the stream container sets NAME to VALUE ("" = not at all).
stream_env() {
  python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
sts = [d for d in docs if d["kind"] == "StatefulSet" and d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "stream"]
env = {e["name"]: e.get("value") for e in sts[0]["spec"]["template"]["spec"]["containers"][0].get("env", [])}
got = env.get(sys.argv[2], "")
sys.exit(0 if got == sys.argv[3] else f"{sys.argv[2]}={got!r}, want {sys.argv[3]!r}")' "$@"
}
check "standbys all renders TIDEMARK_STANDBYS=all" stream_env "$STBY" TIDEMARK_STANDBYS all
check "standbys all renders TIDEMARK_WARMUP_TIMEOUT=5m" stream_env "$STBY" TIDEMARK_WARMUP_TIMEOUT 5m
check "default values render TIDEMARK_STANDBYS=none and no TIDEMARK_WARMUP_TIMEOUT" \
  bash -c "$(declare -f stream_env); stream_env '$DEF' TIDEMARK_STANDBYS none && stream_env '$DEF' TIDEMARK_WARMUP_TIMEOUT ''"
check "ci-values.yaml renders TIDEMARK_WARMUP_TIMEOUT=10m" stream_env "$CI" TIDEMARK_WARMUP_TIMEOUT 10m
check "snapshots on (standbys auto) render TIDEMARK_STANDBYS=1" stream_env "$SNAP" TIDEMARK_STANDBYS 1
check "snapshots + staticAssignment true (standbys auto) render TIDEMARK_STANDBYS=none" \
  stream_env "$SNAPSTAT" TIDEMARK_STANDBYS none
# The assignment each rendering must have, stated here rather than derived from the values.
asg() { python3 "$HERE/tools/check_chart.py" assignment "$@"; }
check "assignment: default values (auto, no snapshots) -> --replicas 3, no --session-timeout" asg "$DEF" static
check "assignment: snapshots + auto -> no --replicas, --session-timeout 30s" asg "$SNAP" group 30s
check "assignment: snapshots + staticAssignment true -> --replicas 3" asg "$SNAPSTAT" static
check "assignment: staticAssignment false, no snapshots -> no --replicas, --session-timeout 30s" asg "$GROUP" group 30s
check "assignment: ci-values.yaml (snapshots, auto) -> no --replicas, --session-timeout 45s" asg "$CI" group 45s
check "assignment: standbys all + auto, no snapshots -> no --replicas, --session-timeout 30s" asg "$STBY" group 30s
# mutate RENDERED OUT PYTHON: applies PYTHON (on the list of documents `docs`) to a rendering.
mutate() {
  python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
exec(sys.argv[3])
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))' "$1" "$2" "$3"
}
contract_of() { python3 "$HERE/tools/check_chart.py" rendered "$1" "$CHART/values.yaml" "$CIV"; }
check_fails "chart contract catches a PDB that also selects the micro-batch pod" bash -c "$(declare -f mutate contract_of); HERE='$HERE' CHART='$CHART' CIV='$CIV';
  mutate '$CI' '$WORK/m1.yaml' '[d[\"spec\"][\"selector\"][\"matchLabels\"].pop(\"app.kubernetes.io/component\") for d in docs if d[\"kind\"] == \"PodDisruptionBudget\"]' && contract_of '$WORK/m1.yaml'"
check_fails "chart contract catches a stream Service that selects the micro-batch pod" bash -c "$(declare -f mutate contract_of); HERE='$HERE' CHART='$CHART' CIV='$CIV';
  mutate '$CI' '$WORK/m2.yaml' '[d[\"spec\"][\"selector\"].pop(\"app.kubernetes.io/component\") for d in docs if d[\"kind\"] == \"Service\" and d[\"metadata\"][\"name\"].endswith(\"-headless\")]' && contract_of '$WORK/m2.yaml'"
check_fails "chart contract catches a stream pod without its snapshot volume" bash -c "$(declare -f mutate); HERE='$HERE' CHART='$CHART';
  mutate '$SNAP' '$WORK/m5.yaml' 'c = [d for d in docs if d[\"kind\"] == \"StatefulSet\"][0][\"spec\"][\"template\"][\"spec\"][\"containers\"][0]
c[\"volumeMounts\"] = [m for m in c[\"volumeMounts\"] if m[\"name\"] != \"snapshots\"]' &&
  python3 '$HERE/tools/check_chart.py' rendered '$WORK/m5.yaml' '$CHART/values.yaml' '$SNAPV'"
check_fails "chart contract catches a static stream without --replicas" bash -c "$(declare -f mutate); HERE='$HERE' CHART='$CHART';
  mutate '$DEF' '$WORK/m6.yaml' 'c = [d for d in docs if d[\"kind\"] == \"StatefulSet\"][0][\"spec\"][\"template\"][\"spec\"][\"containers\"][0]
i = c[\"args\"].index(\"--replicas\"); del c[\"args\"][i:i + 2]' &&
  python3 '$HERE/tools/check_chart.py' rendered '$WORK/m6.yaml' '$CHART/values.yaml'"
check_fails "chart contract catches a group-managed stream that also passes --replicas" bash -c "$(declare -f mutate); HERE='$HERE' CHART='$CHART';
  mutate '$SNAP' '$WORK/m7.yaml' 'c = [d for d in docs if d[\"kind\"] == \"StatefulSet\"][0][\"spec\"][\"template\"][\"spec\"][\"containers\"][0]
c[\"args\"] += [\"--replicas\", \"3\"]' &&
  python3 '$HERE/tools/check_chart.py' rendered '$WORK/m7.yaml' '$CHART/values.yaml' '$SNAPV'"
check_fails "chart contract catches a standby stream without TIDEMARK_WARMUP_TIMEOUT" bash -c "$(declare -f mutate); HERE='$HERE' CHART='$CHART';
  mutate '$STBY' '$WORK/m8.yaml' 'c = [d for d in docs if d[\"kind\"] == \"StatefulSet\"][0][\"spec\"][\"template\"][\"spec\"][\"containers\"][0]
c[\"env\"] = [e for e in c[\"env\"] if e[\"name\"] != \"TIDEMARK_WARMUP_TIMEOUT\"]' &&
  python3 '$HERE/tools/check_chart.py' rendered '$WORK/m8.yaml' '$CHART/values.yaml' '$STBYV'"
check_fails "chart contract catches standbys all with --replicas" bash -c "$(declare -f mutate); HERE='$HERE' CHART='$CHART';
  mutate '$STBY' '$WORK/m9.yaml' 'c = [d for d in docs if d[\"kind\"] == \"StatefulSet\"][0][\"spec\"][\"template\"][\"spec\"][\"containers\"][0]
c[\"args\"] += [\"--replicas\", \"3\"]' &&
  python3 '$HERE/tools/check_chart.py' rendered '$WORK/m9.yaml' '$CHART/values.yaml' '$STBYV'"
check_fails "chart contract catches a CronJob without concurrencyPolicy Forbid" bash -c "
  sed 's/concurrencyPolicy: Forbid/concurrencyPolicy: Allow/' '$CI' > '$WORK/m3.yaml' &&
  python3 '$HERE/tools/check_chart.py' rendered '$WORK/m3.yaml' '$CHART/values.yaml' '$CIV'"
check_fails "chart contract catches a close scheduled before its cutoff (06:30 Tokyo, grace 7h)" bash -c "
  printf 'financeClose:\n  schedule: \\\"30 6 * * *\\\"\n' > '$WORK/early.yaml' &&
  '$HELM' template tidemark '$CHART' --namespace '$NAMESPACE' ${KV[*]} -f '$CIV' -f '$WORK/early.yaml' > '$WORK/m4.yaml' &&
  python3 '$HERE/tools/check_chart.py' rendered '$WORK/m4.yaml' '$CHART/values.yaml' '$CIV' '$WORK/early.yaml'"
check "values.yaml documents every key" python3 "$HERE/tools/check_chart.py" values-doc "$CHART/values.yaml"
if [ -f "$ROOT/topology/examples/orders.toml" ]; then
  check "default topology = topology/examples/orders.toml" python3 -c '
import sys, yaml
v = yaml.safe_load(open(sys.argv[1]))["topology"]
f = open(sys.argv[2]).read()
sys.exit(0 if v == f else "values.yaml topology differs from " + sys.argv[2] + ": copy it again")' \
    "$CHART/values.yaml" "$ROOT/topology/examples/orders.toml"
else
  skip "default topology = topology/examples/orders.toml (file not found)"
fi

# tidemark validate on the rendered topologies, when a binary is around.
TM="${TIDEMARK_BIN:-}"
if [ -z "$TM" ]; then
  for c in "${CARGO_TARGET_DIR:-}" /var/cache/tidemark/target "$CACHE/target" "$ROOT/target"; do
    for p in release debug; do
      [ -n "$c" ] && [ -x "$c/$p/tidemark" ] && { TM="$c/$p/tidemark"; break 2; }
    done
  done
fi
extract_topology() {
  python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and "topology.toml" in d.get("data", {}):
        open(sys.argv[2], "w").write(d["data"]["topology.toml"])' "$1" "$2"
}
if [ -n "$TM" ] && [ -s "$DEF" ] && [ -s "$CI" ]; then
  extract_topology "$DEF" "$WORK/default.toml"; extract_topology "$CI" "$WORK/ci.toml"
  check "tidemark validate (default topology)" "$TM" validate "$WORK/default.toml"
  check "tidemark validate (ci-values topology)" "$TM" validate "$WORK/ci.toml"
  check "tidemark accepts every flag the chart passes (run, microbatch, batch close)" \
    python3 "$HERE/tools/check_chart.py" flags "$CI" "$TM"
  check "tidemark accepts every flag the chart passes (default values: static, --replicas)" \
    python3 "$HERE/tools/check_chart.py" flags "$DEF" "$TM"
  check "tidemark run reads the standby env the chart sets (TIDEMARK_STANDBYS, TIDEMARK_WARMUP_TIMEOUT)" \
    bash -c "help=\"\$('$TM' run --help)\" && grep -q 'env: TIDEMARK_STANDBYS=' <<<\"\$help\" && grep -q 'env: TIDEMARK_WARMUP_TIMEOUT=' <<<\"\$help\""
else
  skip "tidemark validate of the rendered topologies (no tidemark binary; set TIDEMARK_BIN)"
  skip "tidemark accepts every flag the chart passes (no tidemark binary; set TIDEMARK_BIN)"
  skip "tidemark run reads the standby env the chart sets (no tidemark binary; set TIDEMARK_BIN)"
fi

# Alert rules: names, label values, then promtool (or the Python fallback).
RULES="$WORK/rules/rules.yaml"
mkdir -p "$WORK/rules" "$WORK/rules-test"
SANITY=(); [ -z "$PROMTOOL" ] && SANITY=(--sanity)
check "alert rules: metric names and label values${SANITY:+ + Python PromQL structural check}" \
  python3 "$HERE/tools/check_monitoring.py" rules "$CI" "$HERE/metric-names.txt" \
  --out "$RULES" --out-bare "$WORK/rules-test/rules.yaml" "${SANITY[@]}"
if [ -n "$PROMTOOL" ]; then
  check "promtool check rules" "$PROMTOOL" check rules "$RULES"
  cp "$HERE/tests/alerts.test.yaml" "$WORK/rules-test/"
  check "promtool test rules (helm/tests/alerts.test.yaml)" "$PROMTOOL" test rules "$WORK/rules-test/alerts.test.yaml"
else
  skip "promtool check rules / test rules (promtool not built)"
fi
check_fails "alert rules: a metric not in metric-names.txt is caught" bash -c \
  "sed 's/tidemark_backlog_age_seconds{/tidemark_backlog_age_secs{/' '$CI' > '$WORK/badrules.yaml' &&
   python3 '$HERE/tools/check_monitoring.py' rules '$WORK/badrules.yaml' '$HERE/metric-names.txt'"

# Dashboard.
check "dashboard JSON parses, backlog age top row, metric names" \
  python3 "$HERE/tools/check_monitoring.py" dashboard "$CHART/dashboards/tidemark.json" "$HERE/metric-names.txt"
check "dashboard ConfigMap carries the same JSON" python3 -c '
import json, sys, yaml
want = json.load(open(sys.argv[2]))
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and d["metadata"].get("labels", {}).get("grafana_dashboard") == "1":
        sys.exit(0 if json.loads(d["data"]["tidemark.json"]) == want else "dashboard JSON differs")
sys.exit("no dashboard ConfigMap")' "$DEF" "$CHART/dashboards/tidemark.json"

echo
if [ "$SKIP" -gt 0 ]; then
  echo "$PASS passed, $FAIL failed, $SKIP skipped"
else
  echo "$PASS passed, $FAIL failed"
fi
[ "$FAIL" -eq 0 ]
