{{/* The chart's name, 63 characters at most. */}}
{{- define "kubefacts.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every object's name: fullnameOverride, else the release name when it contains
the chart's name (release "kubefacts" → "kubefacts"), else <release>-<chart>. Suffixes such
as "-watcher" are added to it, so it is cut to 52 characters.
*/}}
{{- define "kubefacts.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kubefacts.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "kubefacts.labels" -}}
helm.sh/chart: {{ include "kubefacts.chart" . }}
{{ include "kubefacts.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubefacts
{{- end -}}

{{- define "kubefacts.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubefacts.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of one component's objects: (dict "ctx" $ "component" "watcher"). */}}
{{- define "kubefacts.componentLabels" -}}
{{ include "kubefacts.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kubefacts.componentSelectorLabels" -}}
{{ include "kubefacts.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The watcher's ServiceAccount and its leader-election Lease. */}}
{{- define "kubefacts.watcherName" -}}
{{- printf "%s-watcher" (include "kubefacts.fullname" .) -}}
{{- end -}}
{{- define "kubefacts.cleanerName" -}}
{{- printf "%s-cleaner" (include "kubefacts.fullname" .) -}}
{{- end -}}
{{- define "kubefacts.leaseName" -}}
{{- default (include "kubefacts.watcherName" .) .Values.watch.leaseName -}}
{{- end -}}

{{- define "kubefacts.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Whether the brokers are reached with SASL / with TLS. */}}
{{- define "kubefacts.sasl" -}}
{{- if hasPrefix "sasl_" .Values.kafka.securityProtocol }}true{{ end -}}
{{- end -}}

{{/* The pipeline file (pipeline.override, else rendered from the values). */}}
{{- define "kubefacts.pipeline" -}}
{{- $p := .Values.pipeline -}}
{{- if $p.override -}}
{{ $p.override }}
{{- else -}}
# Rendered by the kubefacts Helm chart from its values; every key not set here keeps its
# built-in default (pipelines/default.toml). Credentials are not in this file: each
# component reads them from its own mounted Secret (KUBEFACTS_KAFKA_* variables).
cluster = {{ $p.cluster | toJson }}

[topics]
prefix = {{ $p.topicPrefix | toJson }}

[topics.retention]
inputs_ms = {{ int64 $p.inputRetentionMs }}

[process]
application_id = {{ $p.applicationId | toJson }}
num_stream_threads = {{ int .Values.process.numStreamThreads }}
create_topics = {{ $p.createTopics }}
partitions = {{ int $p.partitions }}

[watch]
namespaces = {{ .Values.watch.namespaces | toJson }}
leases = {{ .Values.watch.leases | toJson }}

[watch.leader]
lease_name = {{ include "kubefacts.leaseName" . | toJson }}
{{- with .Values.kafka.properties }}

[kafka.properties]
{{- range $k, $v := . }}
{{ $k | toJson }} = {{ $v | toString | toJson }}
{{- end }}
{{- end }}
{{- with $p.extra }}

{{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Volumes of the secrets a component reads: (dict "ctx" $ "component" "watcher"). */}}
{{- define "kubefacts.secretVolumes" -}}
{{- $v := .ctx.Values -}}
{{- with $v.kafka.tls.caSecret }}
- name: kafka-ca
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: {{ $v.kafka.tls.caKey }}
        path: ca.crt
{{- end }}
{{- with $v.kafka.tls.clientSecret }}
- name: kafka-client-tls
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: {{ $v.kafka.tls.certificateKey }}
        path: tls.crt
      - key: {{ $v.kafka.tls.keyKey }}
        path: tls.key
{{- end }}
{{- if include "kubefacts.sasl" .ctx }}
{{- $c := index $v.kafka.sasl .component }}
- name: kafka-sasl
  secret:
    secretName: {{ required (printf "kafka.sasl.%s.existingSecret: the Secret holding the %s's Kafka password (securityProtocol is %s)" .component .component $v.kafka.securityProtocol) $c.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $c.passwordKey }}
        path: password
{{- end }}
{{- with $v.registry.caSecret }}
- name: registry-ca
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: {{ $v.registry.caKey }}
        path: ca.crt
{{- end }}
{{- if $v.registry.username }}
- name: registry-password
  secret:
    secretName: {{ required "registry.existingSecret: the Secret holding the registry password (registry.username is set)" $v.registry.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $v.registry.passwordKey }}
        path: password
{{- end }}
{{- end -}}

{{- define "kubefacts.secretMounts" -}}
{{- $v := .ctx.Values -}}
{{- if $v.kafka.tls.caSecret }}
- name: kafka-ca
  mountPath: /etc/kubefacts/kafka-ca
  readOnly: true
{{- end }}
{{- if $v.kafka.tls.clientSecret }}
- name: kafka-client-tls
  mountPath: /etc/kubefacts/kafka-client-tls
  readOnly: true
{{- end }}
{{- if include "kubefacts.sasl" .ctx }}
- name: kafka-sasl
  mountPath: /etc/kubefacts/kafka-sasl
  readOnly: true
{{- end }}
{{- if $v.registry.caSecret }}
- name: registry-ca
  mountPath: /etc/kubefacts/registry-ca
  readOnly: true
{{- end }}
{{- if $v.registry.username }}
- name: registry-password
  mountPath: /etc/kubefacts/registry-password
  readOnly: true
{{- end }}
{{- end -}}

{{/*
The environment of a component's container: (dict "ctx" $ "component" "watcher" "values"
.Values.watch). Kafka and
registry settings are KUBEFACTS_* variables (each overrides the pipeline file's [kafka]
key); secrets are only ever file paths.
*/}}
{{- define "kubefacts.env" -}}
{{- $v := .ctx.Values -}}
- name: KUBEFACTS_INSTANCE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: KUBEFACTS_BOOTSTRAP
  value: {{ $v.kafka.bootstrap | quote }}
- name: KUBEFACTS_KAFKA_SECURITY_PROTOCOL
  value: {{ $v.kafka.securityProtocol | quote }}
{{- if $v.kafka.tls.caSecret }}
- name: KUBEFACTS_KAFKA_CA_FILE
  value: /etc/kubefacts/kafka-ca/ca.crt
{{- end }}
{{- if $v.kafka.tls.clientSecret }}
- name: KUBEFACTS_KAFKA_CERTIFICATE_FILE
  value: /etc/kubefacts/kafka-client-tls/tls.crt
- name: KUBEFACTS_KAFKA_KEY_FILE
  value: /etc/kubefacts/kafka-client-tls/tls.key
{{- end }}
{{- if include "kubefacts.sasl" .ctx }}
{{- $c := index $v.kafka.sasl .component }}
- name: KUBEFACTS_KAFKA_SASL_MECHANISM
  value: {{ $v.kafka.sasl.mechanism | quote }}
- name: KUBEFACTS_KAFKA_SASL_USERNAME
  value: {{ required (printf "kafka.sasl.%s.username" .component) $c.username | quote }}
- name: KUBEFACTS_KAFKA_SASL_PASSWORD_FILE
  value: /etc/kubefacts/kafka-sasl/password
{{- end }}
{{- if $v.registry.url }}
- name: KUBEFACTS_REGISTRY
  value: {{ $v.registry.url | quote }}
{{- end }}
{{- if $v.registry.caSecret }}
- name: KUBEFACTS_REGISTRY_CA_FILE
  value: /etc/kubefacts/registry-ca/ca.crt
{{- end }}
{{- if $v.registry.username }}
- name: KUBEFACTS_REGISTRY_USERNAME
  value: {{ $v.registry.username | quote }}
- name: KUBEFACTS_REGISTRY_PASSWORD_FILE
  value: /etc/kubefacts/registry-password/password
{{- end }}
{{- with $v.logLevel }}
- name: RUST_LOG
  value: {{ . | quote }}
{{- end }}
{{- with .values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The three probes, on the metrics port. */}}
{{- define "kubefacts.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: metrics
  {{- toYaml .Values.probes.startup | nindent 2 }}
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  {{- toYaml .Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  {{- toYaml .Values.probes.readiness | nindent 2 }}
{{- end -}}

{{/* Pod-level settings shared by every workload. */}}
{{- define "kubefacts.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pod template metadata: (dict "ctx" $ "component" "watcher"). */}}
{{- define "kubefacts.podMetadata" -}}
labels:
  {{- include "kubefacts.componentLabels" . | nindent 2 }}
  {{- with .ctx.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  # Rolls the pods when the pipeline file changes.
  checksum/pipeline: {{ include "kubefacts.pipeline" .ctx | sha256sum }}
  {{- with .ctx.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/*
The kubefacts container of a component: (dict "ctx" $ "component" "watcher" "values"
.Values.watch "args" (list "watch" ...)); args start with the verb (the image's entrypoint
is the kubefacts binary).
*/}}
{{- define "kubefacts.container" -}}
{{- $v := .ctx.Values -}}
- name: {{ .component }}
  image: {{ include "kubefacts.image" .ctx | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
    {{- toYaml .args | nindent 4 }}
    - --config
    - /etc/kubefacts/pipeline.toml
    - --metrics-addr
    - {{ printf "0.0.0.0:%d" (int $v.metricsPort) | quote }}
    - --log-format
    - {{ $v.logFormat }}
    {{- with .values.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  env:
    {{- include "kubefacts.env" . | nindent 4 }}
  ports:
    - name: metrics
      containerPort: {{ $v.metricsPort }}
      protocol: TCP
  {{- include "kubefacts.probes" .ctx | nindent 2 }}
  resources:
    {{- toYaml .values.resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
  volumeMounts:
    - name: pipeline
      mountPath: /etc/kubefacts/pipeline.toml
      subPath: pipeline.toml
      readOnly: true
    - name: tmp
      mountPath: /tmp
    {{- with include "kubefacts.secretMounts" . | trim }}
    {{- . | nindent 4 }}
    {{- end }}
{{- end -}}

{{- define "kubefacts.volumes" -}}
- name: pipeline
  configMap:
    name: {{ include "kubefacts.fullname" .ctx }}-pipeline
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- include "kubefacts.secretVolumes" . }}
{{- end -}}

{{/* The metrics Service of a component (headless; also a StatefulSet's governing Service). */}}
{{- define "kubefacts.metricsService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "kubefacts.fullname" .ctx }}-{{ .component }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "kubefacts.componentLabels" . | nindent 4 }}
spec:
  clusterIP: None
  # Scraped also while not ready (a restoring process reports its restore).
  publishNotReadyAddresses: true
  selector:
    {{- include "kubefacts.componentSelectorLabels" . | nindent 4 }}
  ports:
    - name: metrics
      port: {{ .ctx.Values.metricsPort }}
      targetPort: metrics
      protocol: TCP
{{- end -}}
