{{/* Image of the fluence binaries. */}}
{{- define "fluence.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Labels every object carries; component selectors add app.kubernetes.io/component. */}}
{{- define "fluence.labels" -}}
app.kubernetes.io/name: fluence
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The restrictive container security context every fluence container uses. */}}
{{- define "fluence.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: ["ALL"]}
{{- end -}}

{{/* Where the extender listens: the pod IP only when its Service is on. */}}
{{- define "fluence.extenderBind" -}}
{{- if .Values.extender.service.enabled -}}
0.0.0.0:{{ .Values.extender.service.port }}
{{- else -}}
127.0.0.1:{{ .Values.extender.service.port }}
{{- end -}}
{{- end -}}

{{/* A probe of an extender path from inside the container (it may listen on loopback). */}}
{{- define "fluence.extenderProbe" -}}
exec:
  command:
    - python
    - -c
    - "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:{{ .root.Values.extender.service.port }}{{ .path }}', timeout=3).status != 200)"
# Starting Python takes more than the default 1 s on a busy node.
timeoutSeconds: 5
{{- end -}}
