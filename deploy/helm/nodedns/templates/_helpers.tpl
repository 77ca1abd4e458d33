{{/*
The chart's name, and the full name every object of a release is called
by: the release name, or "nodedns" alone when the release name contains it
(`helm install nodedns ...` gives objects called nodedns).
*/}}
{{- define "nodedns.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nodedns.fullname" -}}
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

{{/*
Labels. The selector is the name and instance only: it is immutable on a
DaemonSet, so nothing that changes with an upgrade may be in it. The chart
version and managed-by labels are left out on purpose: the chart's default
rendering is also the plain manifest deploy/daemonset.yaml, applied with
kubectl.
*/}}
{{- define "nodedns.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodedns.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nodedns.labels" -}}
{{ include "nodedns.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
{{- end }}

{{- define "nodedns.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "nodedns.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "nodedns.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
nodedns.upstreamEnv: the environment variable Kubernetes gives pods for the
kube-dns-upstream Service's ClusterIP (service links: NAME_SERVICE_HOST).
*/}}
{{- define "nodedns.upstreamEnv" -}}
{{- printf "%s_SERVICE_HOST" (.Values.kubeDNS.upstreamService.name | upper | replace "-" "_") }}
{{- end }}

{{/*
nodedns.config: the agent's effective configuration as YAML (a dict), from
.Values.config plus what kubeDNS adds, after the checks that would
otherwise only fail on the nodes.
*/}}
{{- define "nodedns.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- $k := .Values.kubeDNS }}
{{- $pod := eq .Values.networkMode "pod" }}
{{- if $pod }}
{{- /* The agent's network-mode follows networkMode: the DaemonSet's shape depends on it. */}}
{{- if and (hasKey $cfg "network-mode") (ne (toString (get $cfg "network-mode")) "pod") }}
{{- fail (printf "config.network-mode %v contradicts networkMode pod: set networkMode only" (get $cfg "network-mode")) }}
{{- end }}
{{- $_ := set $cfg "network-mode" "pod" }}
{{- else if and (hasKey $cfg "network-mode") (ne (toString (get $cfg "network-mode")) "host") }}
{{- fail (printf "config.network-mode %v: set networkMode (host or pod) instead: the DaemonSet's shape depends on it" (get $cfg "network-mode")) }}
{{- end }}
{{- /* local-ip: a list, or a comma-separated string as the agent also takes */}}
{{- $ips := list }}
{{- $raw := get $cfg "local-ip" | default list }}
{{- if kindIs "string" $raw }}{{ $raw = splitList "," $raw }}{{ end }}
{{- range $raw }}{{ if trim (toString .) }}{{ $ips = append $ips (trim (toString .)) }}{{ end }}{{ end }}
{{- if and $k.intercept (not $pod) }}
{{- if not $k.clusterIP }}
{{- fail "kubeDNS.intercept needs kubeDNS.clusterIP: the kube-dns Service's ClusterIP (kubectl -n kube-system get svc kube-dns -o jsonpath='{.spec.clusterIP}')" }}
{{- end }}
{{- end }}
{{- /* Pod mode: local-ip lists the redirect's frontends (never bound), the kube-dns ClusterIP among them when known, so that the agent refuses them as upstreams. */}}
{{- if and (or $k.intercept $pod) $k.clusterIP }}
{{- if not (has (toString $k.clusterIP) $ips) }}{{ $ips = append $ips (toString $k.clusterIP) }}{{ end }}
{{- end }}
{{- if $ips }}{{ $_ := set $cfg "local-ip" $ips }}{{ end }}
{{- if or $k.intercept $pod }}
{{- $dns := get $cfg "cluster-dns" | default "" | toString }}
{{- if and $dns (or (eq $dns (toString $k.clusterIP)) (hasPrefix (printf "%s:" $k.clusterIP) $dns) (hasPrefix (printf "[%s]" $k.clusterIP) $dns)) }}
{{- fail (printf "config.cluster-dns %s is the kube-dns ClusterIP, which the agent intercepts (or, in pod mode, the redirect sends back to it): that is a loop; leave it empty (the chart points it at the %s Service) or name another address of the central DNS" $dns $k.upstreamService.name) }}
{{- end }}
{{- if and $k.upstreamService.create (not $dns) $k.upstreamService.clusterIP }}
{{- $_ := set $cfg "cluster-dns" (toString $k.upstreamService.clusterIP) }}
{{- end }}
{{- end }}
{{- if not (hasPrefix "/run/nodedns/" (get $cfg "admin-socket" | default "" | toString)) }}
{{- fail "config.admin-socket must be a path in /run/nodedns/ (the pod's writable directory): the probes use it" }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
nodedns.clusterDNSArg: the --cluster-dns flag pointing at the
kube-dns-upstream Service through its environment variable, when the chart
manages that Service and its ClusterIP is not known at render time.
*/}}
{{- define "nodedns.clusterDNSArg" -}}
{{- $k := .Values.kubeDNS }}
{{- if and (or $k.intercept (eq .Values.networkMode "pod")) $k.upstreamService.create (not $k.upstreamService.clusterIP) (not (get .Values.config "cluster-dns")) }}
{{- if ne .Release.Namespace $k.namespace }}
{{- fail (printf "kubeDNS.upstreamService: the release namespace %s is not kubeDNS.namespace %s, so the agent cannot learn the %s Service's ClusterIP from its environment; set kubeDNS.upstreamService.clusterIP (a free address of the Service range) or config.cluster-dns" .Release.Namespace $k.namespace $k.upstreamService.name) }}
{{- end }}
{{- printf "--cluster-dns=$(%s)" (include "nodedns.upstreamEnv" .) }}
{{- end }}
{{- end }}

{{/*
nodedns.configKey renders one key of the configuration file, then removes
it from the dict so that the rest can be written after the documented
ones. Lists of scalars are written in flow style, maps in block style.
When the key is unset and an example is given, the example is written as
a comment. Arguments: dict "cfg" CONFIG "key" KEY ["example" TEXT].
*/}}
{{- define "nodedns.configKey" -}}
{{- if hasKey .cfg .key }}
{{- $v := get .cfg .key }}
{{- if or (kindIs "map" $v) (and (kindIs "slice" $v) $v (kindIs "map" (first $v))) }}
{{- printf "%s:\n%s" .key (toYaml $v | indent 2) }}
{{- else if kindIs "slice" $v }}
{{- printf "%s: %s" .key (toJson $v) }}
{{- else }}
{{- printf "%s: %s" .key (toYaml $v | trim) }}
{{- end }}
{{- $_ := unset .cfg .key }}
{{- else if .example }}
{{- printf "# %s: %s" .key .example }}
{{- end }}
{{- end }}
