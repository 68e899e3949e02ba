{{- define "groupwarden.fullname" -}}
{{- printf "%s" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "groupwarden.labels" -}}
app.kubernetes.io/name: groupwarden
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "groupwarden.selectorLabels" -}}
app.kubernetes.io/name: groupwarden
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "groupwarden.serviceAccountName" -}}
{{- default (include "groupwarden.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The rules the operator uses in the namespaces it watches (docs/operator.md "RBAC"). */}}
{{- define "groupwarden.policyRules" -}}
- apiGroups: [groupwarden.io]
  resources: [consumergrouppolicies]
  verbs: [get, list, watch]
- apiGroups: [groupwarden.io]
  resources: [consumergrouppolicies/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if .Values.rbac.secrets.enabled }}
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
  {{- with .Values.rbac.secrets.resourceNames }}
  resourceNames:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}
