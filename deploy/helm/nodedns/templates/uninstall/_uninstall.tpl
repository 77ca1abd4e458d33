{{/*
Shared by the pre-delete hooks. The hooks' pods carry their own
app.kubernetes.io/name, so that the agents' selector (which the
stop-agents step waits on) never matches them.
*/}}
{{- define "nodedns.uninstall.name" -}}
{{- printf "%s-uninstall" (include "nodedns.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nodedns.cleanup.name" -}}
{{- printf "%s-cleanup" (include "nodedns.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nodedns.uninstall.annotations" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ .weight | quote }}
# Kept when it fails, for its logs; the next `helm uninstall` replaces it.
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{- define "nodedns.uninstall.labels" -}}
app.kubernetes.io/name: {{ include "nodedns.name" . }}-uninstall
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
{{- end }}

{{- define "nodedns.cleanup.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodedns.name" . }}-cleanup
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The agents' local IPs and link, as the cleanup command's flags. */}}
{{- define "nodedns.cleanup.args" -}}
{{- $cfg := include "nodedns.config" . | fromYaml }}
{{- $ips := list }}
{{- range (get $cfg "local-ip" | default list) }}{{ $ips = append $ips (toString .) }}{{ end -}}
- --local-ip={{ join "," $ips }}
- --interface={{ get $cfg "interface" | default "nodelocaldns" }}
{{- end }}

{{/* The Jobs' container security: no privilege at all. */}}
{{- define "nodedns.uninstall.securityContext" -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65534
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* The agents' pod selector in kubectl -l syntax. */}}
{{- define "nodedns.selector" -}}
{{- $pairs := list }}
{{- range $k, $v := (include "nodedns.selectorLabels" . | fromYaml) }}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* The cleanup pods' container security: root for iptables, only the
capabilities `nodedns cleanup` uses (NET_ADMIN: link and rules; NET_RAW:
iptables-legacy). */}}
{{- define "nodedns.cleanup.securityContext" -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsUser: 0
capabilities:
  drop: ["ALL"]
  add: ["NET_ADMIN", "NET_RAW"]
{{- end }}
