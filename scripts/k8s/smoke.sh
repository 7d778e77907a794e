#!/usr/bin/env bash
# Smoke check of the control plane started by scripts/k8s/up.sh, through the API only (curl +
# jq, as the admin): the real Job and CronJob controllers, the scheduler, and kwok's pod Stages
# (deploy/kwok/). In a fresh namespace:
#   1. a Job with 1 completion              -> condition Complete=True, status.succeeded=1
#   2. a Job, kubefacts.test/exit: error     -> condition Failed=True, reason BackoffLimitExceeded
#   3. a Job, kubefacts.test/exit: oomkilled -> Failed; its pod's container terminated with
#                                               reason OOMKilled, exit code 137
#   4. a CronJob "*/1 * * * *"               -> creates a Job within 70 s
#   5. the namespace is deleted              -> gone (pods deleted by kwok's pod-delete Stage)
# Prints each result; exits non-zero on the first failure.
# Usage: scripts/k8s/smoke.sh [--keep]   (--keep: leave the namespace in place)
set -euo pipefail
# shellcheck source=scripts/k8s/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KEEP=0
[[ "${1:-}" == "--keep" ]] && KEEP=1
[[ -f "$K8S_RUN/env" ]] || fail smoke "no $K8S_RUN/env: run scripts/k8s/up.sh first"
for tool in curl jq; do command -v "$tool" >/dev/null 2>&1 || fail smoke "'$tool' not found on PATH"; done
NS="kubefacts-smoke-$(date +%s)"
SMOKE_LOG="$K8S_LOGS/smoke.log"
T_SMOKE="$(now)"
ok() { printf 'smoke: ok   %-44s %s\n' "$1" "$2"; }
bad() {
  printf 'smoke: FAIL %-44s %s\n' "$1" "$2" >&2
  printf 'smoke: API objects of namespace %s are in %s; component logs in %s\n' "$NS" "$SMOKE_LOG" "$K8S_LOGS" >&2
  {
    printf '\n===== %s: jobs =====\n' "$(date -u +%FT%TZ)"
    kapi GET "/apis/batch/v1/namespaces/$NS/jobs" | jq . || true
    printf '===== pods =====\n'
    kapi GET "/api/v1/namespaces/$NS/pods" | jq . || true
    printf '===== events =====\n'
    kapi GET "/api/v1/namespaces/$NS/events" | jq -r '.items[] | "\(.lastTimestamp // .eventTime) \(.involvedObject.kind)/\(.involvedObject.name) \(.reason): \(.message)"' || true
  } >>"$SMOKE_LOG" 2>&1
  exit 1
}
post() { kapi POST "$1" -H 'Content-Type: application/json' --data-binary @- >>"$SMOKE_LOG" 2>&1 || bad "create $1" "the API server refused it (see $SMOKE_LOG)"; }
# wait_jq WHAT TIMEOUT PATH JQ: polls GET PATH until JQ is true; prints the seconds taken.
wait_jq() {
  local what="$1" timeout="$2" path="$3" expr="$4" t0
  t0="$(now)"
  until kapi GET "$path" 2>/dev/null | jq -e "$expr" >/dev/null 2>&1; do
    [[ "$(elapsed "$t0" | cut -d. -f1)" -lt "$timeout" ]] || bad "$what" "not after $timeout s (GET $path, want: $expr)"
    sleep 0.5
  done
  elapsed "$t0"
}
# job NAME EXIT-ANNOTATION|"" BACKOFF-LIMIT: the JSON of a one-pod Job.
job() {
  jq -n --arg name "$1" --arg exit "$2" --argjson backoff "$3" '{
    apiVersion: "batch/v1", kind: "Job", metadata: {name: $name},
    spec: {completions: 1, parallelism: 1, backoffLimit: $backoff,
      template: {
        metadata: {annotations: (if $exit == "" then {} else {"kubefacts.test/exit": $exit} end)},
        spec: {restartPolicy: "Never", terminationGracePeriodSeconds: 1,
          containers: [{name: "main", image: "kubefacts.test/fake:1", command: ["true"]}]}}}}'
}

kapi GET /readyz >/dev/null 2>&1 || fail smoke "the API server at $(cat "$K8S_RUN/server") does not answer /readyz (is the control plane up?)"
: >"$SMOKE_LOG"
jq -n --arg ns "$NS" '{apiVersion: "v1", kind: "Namespace", metadata: {name: $ns}}' | post /api/v1/namespaces
t="$(wait_jq "namespace $NS service account" 60 "/api/v1/namespaces/$NS/serviceaccounts/default" '.metadata.name == "default"')"
ok "namespace $NS" "default ServiceAccount after $t s"

BASE="/apis/batch/v1/namespaces/$NS"
# pod_end JOB WANT: the Job's pod ended as WANT ("<phase> <reason> exitCode=<code>").
pod_end() {
  local job="$1" want="$2" got
  got="$(kapi GET "/api/v1/namespaces/$NS/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3D$job" |
    jq -r '[.items[0].status.phase, (.items[0].status.containerStatuses[0].state.terminated | "\(.reason) exitCode=\(.exitCode)")] | join(" ")')"
  [[ "$got" == "$want" ]] || bad "$job pod" "phase/terminated: '$got', want '$want'"
  ok "$job pod" "$got"
}
job job-ok "" 6 | post "$BASE/jobs"
job job-error error 0 | post "$BASE/jobs"
job job-oom oomkilled 0 | post "$BASE/jobs"

t="$(wait_jq "job-ok Complete" 90 "$BASE/jobs/job-ok" \
  'any(.status.conditions[]?; .type == "Complete" and .status == "True") and .status.succeeded == 1')"
ok "job-ok: Complete=True, succeeded=1" "after $t s"
pod_end job-ok "Succeeded Completed exitCode=0"

t="$(wait_jq "job-error Failed" 90 "$BASE/jobs/job-error" \
  'any(.status.conditions[]?; .type == "Failed" and .status == "True" and .reason == "BackoffLimitExceeded")')"
ok "job-error: Failed=True, BackoffLimitExceeded" "after $t s"
pod_end job-error "Failed Error exitCode=1"

t="$(wait_jq "job-oom Failed" 90 "$BASE/jobs/job-oom" \
  'any(.status.conditions[]?; .type == "Failed" and .status == "True")')"
ok "job-oom: Failed=True" "after $t s"
pod_end job-oom "Failed OOMKilled exitCode=137"

jq -n '{apiVersion: "batch/v1", kind: "CronJob", metadata: {name: "cron"},
  spec: {schedule: "*/1 * * * *", concurrencyPolicy: "Forbid", jobTemplate: {spec: {backoffLimit: 0, template: {
    spec: {restartPolicy: "Never", containers: [{name: "main", image: "kubefacts.test/fake:1"}]}}}}}}' | post "$BASE/cronjobs"
t="$(wait_jq "cronjob creates a Job" 75 "$BASE/jobs" \
  '[.items[] | select(any(.metadata.ownerReferences[]?; .kind == "CronJob" and .name == "cron"))] | length >= 1')"
cron_job="$(kapi GET "$BASE/jobs" | jq -r '[.items[] | select(any(.metadata.ownerReferences[]?; .kind == "CronJob"))][0].metadata.name')"
ok "cronjob */1: created Job $cron_job" "after $t s"
t="$(wait_jq "cron Job Complete" 60 "$BASE/jobs/$cron_job" 'any(.status.conditions[]?; .type == "Complete" and .status == "True")')"
ok "cronjob's Job $cron_job: Complete=True" "after $t s more"

if [[ "$KEEP" == 1 ]]; then
  ok "namespace kept (--keep)" "$NS"
else
  kapi DELETE "/api/v1/namespaces/$NS" >>"$SMOKE_LOG" 2>&1 || bad "delete namespace $NS" "refused (see $SMOKE_LOG)"
  t0="$(now)"
  while kapi GET "/api/v1/namespaces/$NS" >/dev/null 2>&1; do
    [[ "$(elapsed "$t0" | cut -d. -f1)" -lt 90 ]] || bad "namespace $NS deleted" "still there after 90 s"
    sleep 0.5
  done
  ok "namespace $NS deleted (jobs, pods, gone)" "after $(elapsed "$t0") s"
fi
printf 'smoke: all checks passed in %s s\n' "$(elapsed "$T_SMOKE")"
