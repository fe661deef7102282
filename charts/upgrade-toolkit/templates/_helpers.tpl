{{/*
upgrade-toolkit.namespace is the release's namespace, which must be
harvester-system: the toolkit works there, and its roles name it.
*/}}
{{- define "upgrade-toolkit.namespace" -}}
{{- if ne .Release.Namespace "harvester-system" -}}
{{- fail (printf "upgrade-toolkit installs into harvester-system, the namespace it works in, not %q: use --namespace harvester-system" .Release.Namespace) -}}
{{- end -}}
{{- .Release.Namespace -}}
{{- end -}}

{{- define "upgrade-toolkit.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: upgrade-toolkit
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The manager's pods. */}}
{{- define "upgrade-toolkit.selectorLabels" -}}
app.kubernetes.io/name: upgrade-toolkit
app.kubernetes.io/component: manager
{{- end -}}

{{/* The Service of the manager's metrics, as ServiceMonitors select it. */}}
{{- define "upgrade-toolkit.metricsLabels" -}}
app.kubernetes.io/name: upgrade-toolkit
app.kubernetes.io/component: metrics
{{- end -}}

{{/* The manager's service account. */}}
{{- define "upgrade-toolkit.serviceAccount" -}}
upgrade-toolkit
{{- end -}}

{{/*
upgrade-toolkit.roles renders the ClusterRole and Roles of a role file that
`make manifests` generated from the code's +kubebuilder:rbac markers, and
binds each to a service account of the release's namespace.
Arguments: (list $ <file under files/> <service account>).
*/}}
{{- define "upgrade-toolkit.roles" -}}
{{- $root := index . 0 -}}
{{- $account := index . 2 -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" ($root.Files.Get (index . 1)) -1 }}
{{- $role := fromYaml $doc }}
{{- if $role.kind }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ $role.kind }}
metadata:
  name: {{ $role.metadata.name }}
  {{- with $role.metadata.namespace }}
  namespace: {{ . }}
  {{- end }}
  labels:
    {{- include "upgrade-toolkit.labels" $root | nindent 4 }}
{{- if $role.rules }}
rules:
{{- toYaml $role.rules | nindent 0 }}
{{- else }}
rules: []
{{- end }}
{{- if $account }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ $role.kind }}Binding
metadata:
  name: {{ $role.metadata.name }}
  {{- with $role.metadata.namespace }}
  namespace: {{ . }}
  {{- end }}
  labels:
    {{- include "upgrade-toolkit.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: {{ $role.kind }}
  name: {{ $role.metadata.name }}
subjects:
- kind: ServiceAccount
  name: {{ $account }}
  namespace: {{ include "upgrade-toolkit.namespace" $root }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The manager's image: image.repository:image.tag, from imageMirror when it is
set, under the same repository path as the manager rewrites the workloads'
images (the registry host dropped; Docker Hub's library/ added to a
one-component Docker Hub name).
*/}}
{{- define "upgrade-toolkit.managerImage" -}}
{{- $repo := .Values.image.repository -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.imageMirror -}}
{{- $parts := splitList "/" $repo -}}
{{- $hub := true -}}
{{- if and (gt (len $parts) 1) (regexMatch "[.:]|^localhost$" (first $parts)) -}}
{{- $hub = has (first $parts) (list "docker.io" "index.docker.io") -}}
{{- $parts = rest $parts -}}
{{- end -}}
{{- if and $hub (eq (len $parts) 1) -}}
{{- $parts = prepend $parts "library" -}}
{{- end -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" .Values.imageMirror) (join "/" $parts) -}}
{{- end -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
