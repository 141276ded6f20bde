{{/* The image of every ovnhost container. */}}
{{- define "ovnhost.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
