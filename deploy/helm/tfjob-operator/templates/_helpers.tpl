{{/* Chart name. */}}
{{- define "tfjob-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name, used for every object. */}}
{{- define "tfjob-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tfjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tfjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tfjob-operator.labels" -}}
{{ include "tfjob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "tfjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tfjob-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Backends whose objects the operator creates: the default plus the additional ones. */}}
{{- define "tfjob-operator.backends" -}}
{{- prepend .Values.gang.additionalBackends .Values.gang.backend | uniq | join "," -}}
{{- end -}}

{{- define "tfjob-operator.webhookServiceName" -}}
{{- printf "%s-webhook" (include "tfjob-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the webhook configurations (validating and mutating share it). */}}
{{- define "tfjob-operator.webhookConfigName" -}}
{{- printf "%s.tfjob.dev" (include "tfjob-operator.fullname" .) -}}
{{- end -}}

{{- define "tfjob-operator.leaseName" -}}
{{- include "tfjob-operator.fullname" . -}}
{{- end -}}

{{- define "tfjob-operator.certSecretName" -}}
{{- printf "%s-webhook-cert" (include "tfjob-operator.fullname" .) -}}
{{- end -}}
