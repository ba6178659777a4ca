{{/* The objects' base name: the release's, or fullnameOverride. */}}
{{- define "rsdriver.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* The driver's name, checked: a DNS subdomain in lower case, at most 63 characters (as
kubeletplugin.start checks it: it goes into socket and directory paths). */}}
{{- define "rsdriver.driver" -}}
{{- $driver := required "driver is required: your driver's name, e.g. gpu.example.com" .Values.driver -}}
{{- if or (gt (len $driver) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" $driver)) -}}
{{- fail (printf "driver %q is not a DNS subdomain in lower case of at most 63 characters" $driver) -}}
{{- end -}}
{{- $driver -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "rsdriver.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The selector labels of a component: (list $ "kubelet-plugin"). */}}
{{- define "rsdriver.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ $.Chart.Name }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* A component's image: (list $ .Values.publisher.image). The global image with the
component's overrides; a digest wins over the tag. */}}
{{- define "rsdriver.image" -}}
{{- $ := index . 0 -}}
{{- $image := mergeOverwrite (deepCopy $.Values.image) (index . 1) -}}
{{- $repository := required "image.repository is required: your driver's image (docs/helm.md says what it must contain)" $image.repository -}}
{{- if $image.digest -}}
{{ $repository }}@{{ $image.digest }}
{{- else -}}
{{ $repository }}:{{ required "image.tag (or image.digest) is required: pin your driver's image" $image.tag }}
{{- end -}}
{{- end -}}

{{- define "rsdriver.pullPolicy" -}}
{{- $ := index . 0 -}}
{{- (mergeOverwrite (deepCopy $.Values.image) (index . 1)).pullPolicy -}}
{{- end -}}

{{/* The ServiceAccount names. */}}
{{- define "rsdriver.kubeletPlugin.name" -}}
{{ include "rsdriver.fullname" . }}-kubelet-plugin
{{- end -}}
{{- define "rsdriver.publisher.name" -}}
{{ include "rsdriver.fullname" . }}-publisher
{{- end -}}

{{/* The publisher's Lease: publish's default (resourceslice-<driver>) unless named. */}}
{{- define "rsdriver.leaseName" -}}
{{- default (printf "resourceslice-%s" (include "rsdriver.driver" .)) .Values.publisher.leaderElection.leaseName -}}
{{- end -}}
