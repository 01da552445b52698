{{/* Chart name, overridable. */}}
{{- define "failoverd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: release-chart, unless the release name already contains the chart name. */}}
{{- define "failoverd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "failoverd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "failoverd.labels" -}}
helm.sh/chart: {{ include "failoverd.chart" . }}
{{ include "failoverd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "failoverd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "failoverd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "failoverd.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The ConfigMap holding the config files. */}}
{{- define "failoverd.configMapName" -}}
{{- default (printf "%s-config" (include "failoverd.fullname" .)) .Values.config.existingConfigMap }}
{{- end }}

{{/* failoverctl flags to reach this failoverd from inside its pod. */}}
{{- define "failoverd.localCtlArgs" -}}
- --server
- {{ if .Values.tls.enabled }}localhost{{ else }}127.0.0.1{{ end }}:{{ .Values.service.grpcPort }}
{{- if .Values.tls.enabled }}
- --tls-ca
- /etc/failoverd/tls/{{ if .Values.tls.clientAuth }}ca.crt{{ else }}tls.crt{{ end }}
{{- if .Values.tls.clientAuth }}
- --tls-cert
- /etc/failoverd/tls/tls.crt
- --tls-key
- /etc/failoverd/tls/tls.key
{{- end }}
{{- end }}
{{- end }}

{{/* The exec probe command used when TLS is on (the kubelet's gRPC probe has no TLS). */}}
{{- define "failoverd.healthCommand" -}}
- failoverctl
{{ include "failoverd.localCtlArgs" . }}
- health
{{- end }}

{{/* The ServiceAccount the pods run as. */}}
{{- define "failoverd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "failoverd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Host names the HTTP port answers: the Service's, then the user's. */}}
{{- define "failoverd.httpHosts" -}}
{{- $svc := include "failoverd.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- join "," (concat $hosts .Values.http.allowedHosts) -}}
{{- end }}
