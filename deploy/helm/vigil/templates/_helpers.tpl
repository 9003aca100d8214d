{{/* The release's resource name: fullnameOverride, else <release>-<nameOverride or "vigil">
(just the release name when it already contains that). */}}
{{- define "vigil.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: app.kubernetes.io/name stays the chart's name (nameOverride changes only
resource names) so `job="vigil"` holds for the rules. */}}
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

{{/* The alert channels' Secret, required once a channel that reads it is on. */}}
{{- define "vigil.alertsSecret" -}}
{{- required "alerts.slack/alerts.pagerduty read their key from a Secret: set alerts.existingSecret" .Values.alerts.existingSecret -}}
{{- end -}}

{{/* vigil.toml: values.config as is, or the chart's files/vigil.toml with the alert channels
the `alerts` values turn on. */}}
{{- define "vigil.config" -}}
{{- if .Values.config -}}
{{ .Values.config }}
{{- else -}}
{{ .Files.Get "files/vigil.toml" }}
{{- with .Values.alerts }}
{{- if or .alertmanager.url .slack .pagerduty }}
# ---- alert channels turned on by the chart's `alerts` values
{{- end }}
{{- if .alertmanager.url }}

[[alerts.alertmanager]]
url_env = "ALERTMANAGER_URL"
{{- end }}
{{- if .slack }}

[[alerts.slack]]
webhook_url_env = "SLACK_WEBHOOK_URL"
{{- end }}
{{- if .pagerduty }}

[[alerts.pagerduty]]
routing_key_env = "PAGERDUTY_ROUTING_KEY"
{{- end }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* The Alertmanager's TCP port, from alerts.alertmanager.url (80/443 by scheme when absent). */}}
{{- define "vigil.alertmanagerPort" -}}
{{- $u := urlParse .Values.alerts.alertmanager.url -}}
{{- $hostPort := splitList ":" $u.host -}}
{{- if gt (len $hostPort) 1 -}}
{{- last $hostPort -}}
{{- else if eq $u.scheme "https" -}}
443
{{- else -}}
80
{{- end -}}
{{- end -}}

{{/* Secret files: a list of {secret, key} the pod reads, each mounted at /run/secrets/vigil/<key>. */}}
{{- define "vigil.secretFiles" -}}
{{- $files := list -}}
{{- with .Values.database.existingSecret }}
{{- $files = append $files (dict "secret" . "key" $.Values.database.key "var" "DATABASE_URL") -}}
{{- end }}
{{- with .Values.apiToken.existingSecret }}
{{- $files = append $files (dict "secret" . "key" $.Values.apiToken.key "var" "VIGIL_API_TOKEN") -}}
{{- end }}
{{- with .Values.providerKeys.existingSecret }}
{{- range $.Values.providerKeys.keys }}
{{- $files = append $files (dict "secret" $.Values.providerKeys.existingSecret "key" . "var" .) -}}
{{- end }}
{{- end }}
{{- if .Values.alerts.slack }}
{{- $files = append $files (dict "secret" (include "vigil.alertsSecret" .) "key" "SLACK_WEBHOOK_URL" "var" "SLACK_WEBHOOK_URL") -}}
{{- end }}
{{- if .Values.alerts.pagerduty }}
{{- $files = append $files (dict "secret" (include "vigil.alertsSecret" .) "key" "PAGERDUTY_ROUTING_KEY" "var" "PAGERDUTY_ROUTING_KEY") -}}
{{- end }}
{{- toJson $files -}}
{{- end -}}

{{/* The ConfigMap holding the chain order: the one named, else the chart's own (which needs `order`). */}}
{{- define "vigil.chainOrderConfigMap" -}}
{{- if .Values.chainOrder.existingConfigMap -}}
{{- .Values.chainOrder.existingConfigMap -}}
{{- else -}}
{{- $_ := required "chainOrder.variable is set: set chainOrder.order (the list) or chainOrder.existingConfigMap" .Values.chainOrder.order -}}
{{- include "vigil.fullname" . }}-chain-order
{{- end -}}
{{- end }}

{{/*
Replicas of the region: .Values.replicas with a shared PostgreSQL (database.existingSecret), one
with SQLite (each pod's own file: two would each probe everything and page twice).
*/}}
{{- define "vigil.replicas" -}}
{{- if .Values.database.existingSecret }}{{ .Values.replicas }}{{ else }}1{{ end }}
{{- end -}}
