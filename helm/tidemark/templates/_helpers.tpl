{{/*
Chart name, truncated to 63 characters (DNS label limit).
*/}}
{{- define "tidemark.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full resource name prefix. StatefulSet pod names append "-<ordinal>" and the
controller-revision-hash label appends more, so keep it to 52 characters.
*/}}
{{- define "tidemark.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tidemark.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every resource.
*/}}
{{- define "tidemark.labels" -}}
helm.sh/chart: {{ include "tidemark.chart" . }}
{{ include "tidemark.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tidemark
{{- end }}

{{/*
Selector labels (immutable in a StatefulSet: never add to these).
*/}}
{{- define "tidemark.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tidemark.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tidemark.headlessServiceName" -}}
{{- printf "%s-headless" (include "tidemark.fullname" .) }}
{{- end }}

{{- define "tidemark.metricsServiceName" -}}
{{- printf "%s-metrics" (include "tidemark.fullname" .) }}
{{- end }}

{{- define "tidemark.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tidemark.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tidemark.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
PromQL label matchers selecting this release's series. The ServiceMonitor scrapes the
metrics Service, so Prometheus labels the targets job="<metrics Service>", namespace="<ns>".
*/}}
{{- define "tidemark.promSelector" -}}
{{- if .Values.prometheusRule.selector }}
{{- .Values.prometheusRule.selector }}
{{- else }}
{{- printf "job=%q, namespace=%q" (include "tidemark.metricsServiceName" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
Seconds in a duration of h, m and s parts ("90s", "5m", "1h30m"), as a string (atoi it).
Argument: the duration. Fails on anything else (values.schema.json allows only these).
*/}}
{{- define "tidemark.durationSeconds" -}}
{{- $d := toString . }}
{{- if not (regexMatch "^([0-9]+[hms])+$" $d) }}
{{- fail (printf "%q is not a duration of h, m and s parts (e.g. 90s, 5m, 1h30m)" $d) }}
{{- end }}
{{- $unit := dict "h" 3600 "m" 60 "s" 1 }}
{{- $total := 0 }}
{{- range regexFindAll "[0-9]+[hms]" $d -1 }}
{{- $total = add $total (mul (regexFind "^[0-9]+" . | atoi) (get $unit (regexFind "[hms]$" .))) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
Standby tasks, as --standbys takes them: "all", a number of copies ("1", "2", ...), or ""
when none. auto is 1 with snapshots.enabled (unless staticAssignment is true: tidemark
refuses standbys with --replicas) and none without. Any other value fails
(values.schema.json rejects it too; this covers --skip-schema-validation).
*/}}
{{- define "tidemark.standbys" -}}
{{- $v := "auto" }}
{{- if hasKey .Values "standbys" }}{{ $v = toString .Values.standbys }}{{ end }}
{{- if eq $v "auto" }}
{{- if and .Values.snapshots.enabled (ne (toString .Values.staticAssignment) "true") }}1{{ end }}
{{- else if eq $v "all" }}all
{{- else if regexMatch "^[1-9][0-9]*$" $v }}{{ $v }}
{{- else if not (or (eq $v "none") (eq $v "0")) }}
{{- fail (printf "standbys must be auto, none, all or a number of copies (not %q)" $v) }}
{{- end }}
{{- end }}

{{/*
How the stream's partitions are assigned: "true" when static (pod k owns partition p iff
p % replicaCount == k, `--replicas`), "" when the consumer group manages them (no
`--replicas`, `--session-timeout`). staticAssignment true/false (booleans) as given; "auto"
is static without snapshots (a moved partition would replay its log from offset 0) and
group-managed with them (a moved partition is restored from a snapshot) or with standbys
(standby tasks follow the group's moves). Static assignment with standbys all fails: tidemark
refuses --standbys all with --replicas. Any other value fails (values.schema.json rejects it
too; this covers --skip-schema-validation and the string "true" of `--set-string`).
*/}}
{{- define "tidemark.staticAssignment" -}}
{{- $v := .Values.staticAssignment }}
{{- $standbys := include "tidemark.standbys" . }}
{{- if kindIs "bool" $v }}
{{- if and $v $standbys }}
{{- fail (printf "standbys: %s needs group-managed assignment, but staticAssignment is true (static, --replicas): set staticAssignment to auto or false, or standbys to none" $standbys) }}
{{- end }}
{{- if $v }}true{{ end }}
{{- else if eq (toString $v) "auto" }}
{{- if not (or .Values.snapshots.enabled $standbys) }}true{{ end }}
{{- else }}
{{- fail (printf "staticAssignment must be auto, true or false (true/false as YAML booleans, unquoted; not the string %q)" (toString $v)) }}
{{- end }}
{{- end }}

{{/*
Workloads. Every pod carries app.kubernetes.io/component: "stream" (the `tidemark run`
StatefulSet), "microbatch" or "finance-close", and the stream's Services, PDB and
anti-affinity select component=stream, so they never pick up a micro-batch or close pod.
The stream StatefulSet's own spec.selector stays tidemark.selectorLabels (immutable); the
other pods are owned by their own controllers, which a StatefulSet never adopts from.
*/}}
{{- define "tidemark.streamSelectorLabels" -}}
{{ include "tidemark.selectorLabels" . }}
app.kubernetes.io/component: stream
{{- end }}

{{- define "tidemark.microbatchSelectorLabels" -}}
{{ include "tidemark.selectorLabels" . }}
app.kubernetes.io/component: microbatch
{{- end }}

{{/*
The micro-batch StatefulSet (and its Service): 52 characters at most, like the fullname.
*/}}
{{- define "tidemark.microbatchName" -}}
{{- printf "%s-microbatch" (include "tidemark.fullname" . | trunc 41 | trimSuffix "-") }}
{{- end }}

{{/*
The finance close CronJob: 52 characters at most (its Jobs append 11).
*/}}
{{- define "tidemark.financeCloseName" -}}
{{- printf "%s-finance-close" (include "tidemark.fullname" . | trunc 38 | trimSuffix "-") }}
{{- end }}

{{/*
Pod template annotation: roll the pods when the topology changes.
*/}}
{{- define "tidemark.topologyChecksum" -}}
checksum/topology: {{ include (print $.Template.BasePath "/configmap-topology.yaml") . | sha256sum }}
{{- end }}

{{/*
Pod template annotations: roll the pods when a Secret or ConfigMap they read only at start
changes: the Kafka client Secret (librdkafka reads its files once) and every Secret or
ConfigMap of extraVolumes (e.g. a webhook CA bundle). Not the webhook signing key or the
admin token: tidemark re-reads those while running, so rotating them needs no restart. The
data is read from the cluster at install/upgrade (lookup); `helm template` has no cluster and
hashes nothing, which is stable.
*/}}
{{- define "tidemark.secretChecksums" -}}
{{- $ns := .Release.Namespace }}
{{- with .Values.kafka.clientConfig.existingSecret }}
checksum/secret-kafka-client: {{ (lookup "v1" "Secret" $ns .).data | toJson | sha256sum }}
{{- end }}
{{- range .Values.extraVolumes }}
{{- if and .secret .secret.secretName }}
checksum/volume-{{ .name }}: {{ (lookup "v1" "Secret" $ns .secret.secretName).data | toJson | sha256sum }}
{{- else if and .configMap .configMap.name }}
checksum/volume-{{ .name }}: {{ (lookup "v1" "ConfigMap" $ns .configMap.name).data | toJson | sha256sum }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Pod spec fields shared by every tidemark pod: ServiceAccount, pull secrets, priority, pod
security context.
*/}}
{{- define "tidemark.podCommon" -}}
serviceAccountName: {{ include "tidemark.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/*
Node selector and tolerations of every tidemark pod.
*/}}
{{- define "tidemark.podPlacement" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
Image of every tidemark container.
*/}}
{{- define "tidemark.containerImage" -}}
image: {{ include "tidemark.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end }}

{{/*
Kafka client settings on the command line: the mounted properties file, when a Secret is set.
*/}}
{{- define "tidemark.kafkaArgs" -}}
{{- if .Values.kafka.clientConfig.existingSecret }}
- --kafka-config
- /etc/tidemark/kafka/client.properties
{{- end }}
{{- end }}

{{/*
Environment shared by every tidemark container: the bootstrap servers, the log filter and
values.extraEnv (last).
*/}}
{{- define "tidemark.commonEnv" -}}
- name: TIDEMARK_BOOTSTRAP
  value: {{ .Values.kafka.bootstrap | quote }}
- name: TIDEMARK_LOG
  value: {{ .Values.logLevel | quote }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Volume mounts shared by every tidemark container: the topology ConfigMap, /tmp, and the
Kafka client Secret (all read-only but /tmp).
*/}}
{{- define "tidemark.commonVolumeMounts" -}}
- name: topology
  mountPath: /etc/tidemark/topology
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .Values.kafka.clientConfig.existingSecret }}
- name: kafka-client
  mountPath: /etc/tidemark/kafka
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The volumes behind tidemark.commonVolumeMounts.
*/}}
{{- define "tidemark.commonVolumes" -}}
- name: topology
  configMap:
    name: {{ include "tidemark.fullname" . }}-topology
    items:
      - key: topology.toml
        path: topology.toml
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- with .Values.kafka.clientConfig.existingSecret }}
- name: kafka-client
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: {{ $.Values.kafka.clientConfig.key }}
        path: client.properties
      {{- range $.Values.kafka.clientConfig.extraKeys }}
      - key: {{ . }}
        path: {{ . }}
      {{- end }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
An HTTP probe on the port named http. Argument: dict "path" PATH "probe" VALUES (periodSeconds,
timeoutSeconds, failureThreshold, optional initialDelaySeconds).
*/}}
{{- define "tidemark.httpProbe" -}}
httpGet:
  path: {{ .path }}
  port: http
{{- if hasKey .probe "initialDelaySeconds" }}
initialDelaySeconds: {{ .probe.initialDelaySeconds }}
{{- end }}
periodSeconds: {{ .probe.periodSeconds }}
timeoutSeconds: {{ .probe.timeoutSeconds }}
failureThreshold: {{ .probe.failureThreshold }}
{{- end }}

{{/*
A RocksDB state volume claim template named "state". Argument: dict "p" PERSISTENCE-VALUES
"labels" SELECTOR-LABELS-YAML.
*/}}
{{- define "tidemark.stateClaim" -}}
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata:
    name: state
    labels:
      {{- .labels | nindent 6 }}
    {{- with .p.annotations }}
    annotations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
  spec:
    accessModes:
      {{- toYaml .p.accessModes | nindent 6 }}
    {{- if .p.storageClass }}
    {{- if eq "-" .p.storageClass }}
    storageClassName: ""
    {{- else }}
    storageClassName: {{ .p.storageClass | quote }}
    {{- end }}
    {{- end }}
    resources:
      requests:
        storage: {{ .p.size | quote }}
{{- end }}
