{{/* The release's resource name: the release name, or release-vigil when it lacks "vigil". */}}
{{- define "vigil.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: app.kubernetes.io/name stays "vigil" so `job="vigil"` holds for the rules. */}}
{{- define "vigil.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vigil.labels" -}}
{{ include "vigil.selectorLabels" . }}
app.kubernetes.io/component: prober
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
region: {{ required "set region (VIGIL_REGION), e.g. --set region=eu-west-1" .Values.region }}
{{- end -}}

{{/* vigil.toml: values.config, or the chart's copy of deploy/k8s/base/vigil.toml. */}}
{{- define "vigil.config" -}}
{{- if .Values.config -}}
{{ .Values.config }}
{{- else -}}
{{ .Files.Get "files/vigil.toml" }}
{{- end -}}
{{- end -}}
