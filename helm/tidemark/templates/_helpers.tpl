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
