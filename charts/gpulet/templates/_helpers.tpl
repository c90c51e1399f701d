{{/*
The labels every gpulet object carries; the DaemonSet's selector uses them too, so they are the
same as deploy/base's and an install can move between kustomize and Helm.
*/}}
{{- define "gpulet.labels" -}}
app.kubernetes.io/name: gpulet
{{- end }}

{{/*
The image reference: repository@digest when a digest is set (the image is then pinned, as
`make image` prints it), else repository:tag, the tag defaulting to the chart's appVersion.
*/}}
{{- define "gpulet.image" -}}
{{- if .Values.image.digest -}}
{{- if not (hasPrefix "sha256:" .Values.image.digest) -}}
{{- fail (printf "image.digest %q is not a digest: it must look like sha256:<64 hex digits> (make image prints it)" .Values.image.digest) -}}
{{- end -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
gpulet's configuration file: `config` from the values, with the DRA driver's section when
dra.enabled. gpulet fills every key left out with its default (`gpulet serve --print-config`).
*/}}
{{- define "gpulet.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.dra.enabled -}}
{{- $_ := set $config "dra" (merge (dict "enabled" true) .Values.dra.config) -}}
{{- end -}}
version: v1
{{ toYaml $config }}
{{- end }}
