{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "prefix-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name; kept short enough for the "-redis" suffix. */}}
{{- define "prefix-gateway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 56 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 56 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 56 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "prefix-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "prefix-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "prefix-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "prefix-gateway.labels" -}}
helm.sh/chart: {{ include "prefix-gateway.chart" . }}
{{ include "prefix-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: prefix-gateway
{{- end -}}

{{- define "prefix-gateway.redis.fullname" -}}
{{- printf "%s-redis" (include "prefix-gateway.fullname" .) -}}
{{- end -}}

{{- define "prefix-gateway.redis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "prefix-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end -}}

{{- define "prefix-gateway.redis.labels" -}}
helm.sh/chart: {{ include "prefix-gateway.chart" . }}
{{ include "prefix-gateway.redis.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: prefix-gateway
{{- end -}}

{{- define "prefix-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "prefix-gateway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "prefix-gateway.secretName" -}}
{{- default (include "prefix-gateway.fullname" .) .Values.secret.existingSecret -}}
{{- end -}}

{{- define "prefix-gateway.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* True (non-empty) when the gateway gets a REDIS_URL: in-chart Redis or an external one. */}}
{{- define "prefix-gateway.redis.configured" -}}
{{- if or .Values.redis.enabled .Values.redis.external.url .Values.redis.external.existingSecret -}}true{{- end -}}
{{- end -}}

{{/*
The policy as written to the ConfigMap: values.policy with server.host/port defaulted for a pod, the
/metrics listener on the pod's address (${POD_IP}, from the downward API: the scraper reaches it, the
loopback default would not), behind the metrics token when metrics.token names a Secret,
redis.url pointing at ${REDIS_URL} when a Redis is configured and the policy names none, and the
SQLite ledger in the writable ledger volume when the policy names no path (a relative path would
resolve against the policy's own read-only directory).
*/}}
{{- define "prefix-gateway.policy" -}}
{{- $policy := deepCopy .Values.policy -}}
{{- $server := merge (deepCopy (default (dict) $policy.server)) (dict "host" "0.0.0.0" "port" 8080) -}}
{{- $_ := set $server "metrics_port" (include "prefix-gateway.metricsPort" . | int) -}}
{{- if not $server.metrics_host -}}
{{- $_ := set $server "metrics_host" "${POD_IP}" -}}
{{- end -}}
{{- if .Values.metrics.token.existingSecret -}}
{{- $_ := set $server "metrics_token_env" "PREFIX_GATEWAY_METRICS_TOKEN" -}}
{{- end -}}
{{- $_ := set $policy "server" $server -}}
{{- $billing := deepCopy (default (dict) $policy.billing) -}}
{{- $ledger := deepCopy (default (dict) $billing.ledger) -}}
{{- if and (ne (toString (default "sqlite" $ledger.kind)) "redis") (not $ledger.path) -}}
{{- $_ := set $ledger "path" (printf "%s/ledger.db" .Values.storage.ledgerPath) -}}
{{- $_ := set $billing "ledger" $ledger -}}
{{- $_ := set $policy "billing" $billing -}}
{{- end -}}
{{- if include "prefix-gateway.redis.configured" . -}}
{{- $redis := deepCopy (default (dict) $policy.redis) -}}
{{- if not $redis.url -}}
{{- $_ := set $redis "url" "${REDIS_URL}" -}}
{{- end -}}
{{- $_ := set $policy "redis" $redis -}}
{{- end -}}
{{- toYaml $policy -}}
{{- end -}}

{{- define "prefix-gateway.port" -}}
{{- $server := default (dict) .Values.policy.server -}}
{{- default 8080 $server.port | int -}}
{{- end -}}

{{/* The gateway's separate /metrics listener (policy.server.metrics_port; the API port answers
/metrics only with the admin token). A pod always has one: null or absent means 29000. */}}
{{- define "prefix-gateway.metricsPort" -}}
{{- $server := default (dict) .Values.policy.server -}}
{{- default 29000 $server.metrics_port | int -}}
{{- end -}}

{{/* Seconds the gateway drains after SIGTERM (policy.server.drain_timeout_s). */}}
{{- define "prefix-gateway.drainSeconds" -}}
{{- $server := default (dict) .Values.policy.server -}}
{{- if hasKey $server "drain_timeout_s" -}}
{{- $server.drain_timeout_s | float64 | ceil | int -}}
{{- else -}}
{{- .Values.shutdown.defaultDrainSeconds | int -}}
{{- end -}}
{{- end -}}

{{- define "prefix-gateway.terminationGracePeriodSeconds" -}}
{{- if not (kindIs "invalid" .Values.shutdown.terminationGracePeriodSeconds) -}}
{{- .Values.shutdown.terminationGracePeriodSeconds | int -}}
{{- else -}}
{{- add .Values.shutdown.preStopSleepSeconds (include "prefix-gateway.drainSeconds" . | int) .Values.shutdown.extraGraceSeconds -}}
{{- end -}}
{{- end -}}
