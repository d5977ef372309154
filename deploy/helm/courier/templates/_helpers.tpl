{{- define "courier.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "courier.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "courier.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "courier.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "courier.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "courier.fullname" .) -}}
{{- end -}}

{{/* The environment of every courier container: the ConfigMap, the Secret, and its address. */}}
{{- define "courier.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "courier.fullname" .root }}
  - secretRef:
      name: {{ include "courier.secretName" .root }}
env:
  - name: COURIER_HTTP_ADDR
    value: {{ printf "0.0.0.0:%d" (int .port) | quote }}
{{- end -}}

{{- define "courier.tlsVolume" -}}
{{- if .Values.temporal.tls.existingSecret }}
volumes:
  - name: temporal-tls
    secret:
      secretName: {{ .Values.temporal.tls.existingSecret }}
{{- end }}
{{- end -}}

{{- define "courier.tlsMount" -}}
{{- if .Values.temporal.tls.existingSecret }}
volumeMounts:
  - name: temporal-tls
    mountPath: /etc/courier/temporal-tls
    readOnly: true
{{- end }}
{{- end -}}
