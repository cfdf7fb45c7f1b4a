{{/* Name of the chart, or nameOverride. */}}
{{- define "runway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: prefix of every resource of the release. */}}
{{- define "runway.fullname" -}}
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

{{/* Labels of every resource. */}}
{{- define "runway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "runway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: runway
{{- end }}

{{/* Labels of the `helm test` objects: not the operator's selector labels, so that neither
the Services nor the Deployment's ReplicaSet ever select the test Pod. */}}
{{- define "runway.testLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "runway.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: helm-test
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: runway
{{- end }}

{{/* Labels that select the operator pods. */}}
{{- define "runway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "runway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The operator's ServiceAccount. */}}
{{- define "runway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "runway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The user name the API server gives the operator's ServiceAccount. */}}
{{- define "runway.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "runway.serviceAccountName" .) }}
{{- end }}

{{/* The Secret holding the requestState key. */}}
{{- define "runway.stateKeySecretName" -}}
{{- default (printf "%s-state-key" (include "runway.fullname" .)) .Values.stateKey.existingSecret }}
{{- end }}

{{/* The image reference: repository with digest, or with tag (default appVersion). */}}
{{- define "runway.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Host names the MCP endpoint accepts: the Service's in-cluster names, then allowedHosts. */}}
{{- define "runway.allowedHosts" -}}
{{- $svc := include "runway.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) }}
{{- concat $hosts .Values.mcp.allowedHosts | uniq | toJson }}
{{- end }}
