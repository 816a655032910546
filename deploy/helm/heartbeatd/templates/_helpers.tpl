{{/* The name of the chart's objects: the release's name, with "heartbeatd" unless it already says so. */}}
{{- define "heartbeatd.fullname" -}}
{{- if contains "heartbeatd" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-heartbeatd" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "heartbeatd.selectorLabels" -}}
app.kubernetes.io/name: heartbeatd
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "heartbeatd.labels" -}}
{{ include "heartbeatd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "heartbeatd.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "heartbeatd.fullname" .) -}}
{{- end -}}

{{/*
The secret files heartbeatd reads, as "key=VARIABLE" lines: every key of the chart's Secret that has a
value, or every key of secrets.existingSecretKeys for an existing Secret. VARIABLE is the *_FILE
override of the config key it fills.
*/}}
{{- define "heartbeatd.secretFiles" -}}
{{- $vars := dict "api-token" "HEARTBEATD_HTTP_TOKEN_FILE" "redis-password" "HEARTBEATD_REDIS_PASSWORD_FILE" "mqtt-password" "HEARTBEATD_INGEST_MQTT_PASSWORD_FILE" "kafka-ingest-password" "HEARTBEATD_INGEST_KAFKA_SASL_PASSWORD_FILE" "kafka-events-password" "HEARTBEATD_EVENTS_KAFKA_SASL_PASSWORD_FILE" -}}
{{- $keys := list -}}
{{- if .Values.secrets.existingSecret -}}
{{- $keys = .Values.secrets.existingSecretKeys -}}
{{- if not (has "api-token" $keys) -}}
{{- fail "secrets.existingSecretKeys must hold api-token: heartbeatd serves its API on 0.0.0.0 only with a token" -}}
{{- end -}}
{{- else -}}
{{- $keys = list "api-token" -}}
{{- range $key, $value := dict "redis-password" .Values.secrets.redisPassword "mqtt-password" .Values.secrets.mqttPassword "kafka-ingest-password" .Values.secrets.kafkaIngestPassword "kafka-events-password" .Values.secrets.kafkaEventsPassword -}}
{{- if $value -}}{{- $keys = append $keys $key -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- range $key := $keys }}
{{- if not (hasKey $vars $key) -}}
{{- fail (printf "secrets.existingSecretKeys: unknown key %q (api-token, redis-password, mqtt-password, kafka-ingest-password, kafka-events-password)" $key) -}}
{{- end }}
{{ $key }}={{ get $vars $key }}
{{- end -}}
{{- end -}}

{{/* heartbeatd.config is .Values.config with http.tokens from apiTokens, each secret a mounted file. */}}
{{- define "heartbeatd.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if .Values.apiTokens -}}
{{- $tokens := list -}}
{{- range .Values.apiTokens -}}
{{- if not (and .name .role .secretName) -}}
{{- fail "apiTokens: each entry needs name, role and secretName (the Secret holding its token)" -}}
{{- end -}}
{{- $t := dict "name" .name "role" .role "token_file" (printf "/etc/heartbeatd/tokens/%s" .name) -}}
{{- if .scope -}}{{- $_ := set $t "scope" .scope -}}{{- end -}}
{{- $tokens = append $tokens $t -}}
{{- end -}}
{{- $http := get $cfg "http" | default dict -}}
{{- $_ := set $http "tokens" $tokens -}}
{{- $_ := set $cfg "http" $http -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
