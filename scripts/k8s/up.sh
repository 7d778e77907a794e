#!/usr/bin/env bash
# Starts a real Kubernetes control plane on loopback, with no container runtime:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler (all controllers real) and
#   kwok, which plays the kubelet for fake Nodes (annotation kwok.x-k8s.io/node=fake): it marks
#   them Ready and moves their pods through the Stages in deploy/kwok/ (Running, then
#   Succeeded or Failed as the pod's kubefacts.test/exit annotation says).
# Builds the binaries first (scripts/k8s/build.sh, cached). Every run starts from a fresh, empty
# .cache/k8s/run/ (new CA and certificates, free ports, empty etcd) and writes .cache/k8s/run/env,
# a sourceable file with the KUBEFACTS_K8S_* variables and KUBEFACTS_HELM (the helm binary
# build.sh built, for tests/helm_chart.rs and the chart's end-to-end test). Logs: .cache/k8s/run/logs/<name>.log.
# Stop with scripts/k8s/down.sh; stop/start one piece with scripts/k8s/ctl.sh.
# Environment: KUBEFACTS_K8S_NODES (fake nodes, default 2), KUBEFACTS_K8S_READY_TIMEOUT (s, 120),
# and build.sh's version overrides. See docs/K8S_TESTING.md.
set -euo pipefail
# shellcheck source=scripts/k8s/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NODE_COUNT="${KUBEFACTS_K8S_NODES:-2}"
[[ "$NODE_COUNT" =~ ^[1-9][0-9]?$ ]] || fail prerequisites "KUBEFACTS_K8S_NODES must be 1..99, not '$NODE_COUNT'"
for tool in curl openssl python3 jq setsid; do
  command -v "$tool" >/dev/null 2>&1 || fail prerequisites "'$tool' not found on PATH"
done

T_UP="$(now)"
"$K8S_SCRIPTS/build.sh"
T_START="$(now)"

# ------------------------------------------------------------------------------------------
# 0. A previous run? Stop it, then start from an empty run dir.
# ------------------------------------------------------------------------------------------
if [[ -d "$K8S_RUN" ]]; then
  "$K8S_SCRIPTS/down.sh" --quiet
fi
rm -rf "$K8S_RUN"
mkdir -p "$K8S_RUN/pki" "$K8S_RUN/cmd" "$K8S_LOGS" "$K8S_RUN/etcd" "$K8S_RUN/kubeconfig" \
  "$K8S_RUN/kube-apiserver" "$K8S_RUN/kube-controller-manager" "$K8S_RUN/kube-scheduler" "$K8S_RUN/kwok"
: >"$K8S_PIDS"

on_exit() {
  local rc=$?
  if [[ "$rc" != 0 ]]; then
    "$K8S_SCRIPTS/down.sh" --quiet || true
  fi
}
trap on_exit EXIT

# ------------------------------------------------------------------------------------------
# 1. PKI: a CA, the API server's serving certificate, client certificates, the service-account
#    key pair. ECDSA P-256 for certificates (fast to make), RSA for service-account tokens.
# ------------------------------------------------------------------------------------------
PKI="$K8S_RUN/pki"
PKI_LOG="$K8S_LOGS/pki.log"
T_PKI="$(now)"
ec_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" >>"$PKI_LOG" 2>&1; }
# cert NAME SUBJECT EXTENSIONS: NAME.key + NAME.crt signed by the CA.
cert() {
  local name="$1" subj="$2" ext="$3"
  ec_key "$PKI/$name.key" || fail pki "openssl could not make the key of $name" "$PKI_LOG"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" >>"$PKI_LOG" 2>&1 ||
    fail pki "openssl could not make the CSR of $name ($subj)" "$PKI_LOG"
  printf '%s\n' "$ext" >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 30 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" >>"$PKI_LOG" 2>&1 ||
    fail pki "openssl could not sign the certificate of $name ($subj)" "$PKI_LOG"
  rm -f "$PKI/$name.csr"
}
ec_key "$PKI/ca.key" || fail pki "openssl could not make the CA key" "$PKI_LOG"
openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=kubefacts-test-ca" -days 30 -sha256 \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
  -out "$PKI/ca.crt" >>"$PKI_LOG" 2>&1 || fail pki "openssl could not make the CA certificate" "$PKI_LOG"
CLIENT_EXT=$'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
cert kube-apiserver "/CN=kube-apiserver" $'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local'
cert admin "/O=system:masters/CN=kubefacts-admin" "$CLIENT_EXT"
cert kube-controller-manager "/CN=system:kube-controller-manager" "$CLIENT_EXT"
cert kube-scheduler "/CN=system:kube-scheduler" "$CLIENT_EXT"
# kwok plays the kubelet of every fake node and patches pod and node status: admin rights.
cert kwok "/O=system:masters/CN=kwok" "$CLIENT_EXT"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" >>"$PKI_LOG" 2>&1 ||
  fail pki "openssl could not make the service-account signing key" "$PKI_LOG"
openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" >>"$PKI_LOG" 2>&1 ||
  fail pki "openssl could not extract the service-account public key" "$PKI_LOG"
chmod 600 "$PKI"/*.key
info "pki: CA, serving and client certificates, service-account keys in $PKI ($(elapsed "$T_PKI") s)"

# ------------------------------------------------------------------------------------------
# 2. Ports and kubeconfigs.
# ------------------------------------------------------------------------------------------
read -r ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KCM_PORT SCHEDULER_PORT KWOK_PORT < <(free_ports 6)
[[ -n "$KWOK_PORT" ]] || fail prerequisites "could not pick free loopback ports with python3"
SERVER="https://127.0.0.1:$APISERVER_PORT"
ETCD_URL="http://127.0.0.1:$ETCD_PORT"
printf '%s\n' "$SERVER" >"$K8S_RUN/server"

# kubeconfig NAME: $K8S_RUN/kubeconfig/NAME with the client certificate pki/NAME.{crt,key}.
kubeconfig() {
  cat >"$K8S_RUN/kubeconfig/$1" <<KUBECONFIG
# generated by scripts/k8s/up.sh
apiVersion: v1
kind: Config
clusters:
- name: kubefacts
  cluster:
    server: $SERVER
    certificate-authority: $PKI/ca.crt
users:
- name: $1
  user:
    client-certificate: $PKI/$1.crt
    client-key: $PKI/$1.key
contexts:
- name: kubefacts
  context:
    cluster: kubefacts
    user: $1
current-context: kubefacts
KUBECONFIG
}
for name in admin kube-controller-manager kube-scheduler kwok; do kubeconfig "$name"; done
ADMIN_KUBECONFIG="$K8S_RUN/kubeconfig/admin"

# ------------------------------------------------------------------------------------------
# 3. The command lines (stored, so that ctl.sh can restart a piece with the same flags).
# ------------------------------------------------------------------------------------------
# store NAME [VAR=VALUE...] -- ARGV...: writes $K8S_RUN/cmd/NAME.sh, which execs ARGV.
store() {
  local name="$1" script="$K8S_RUN/cmd/$1.sh"
  shift
  local -a envs=()
  while [[ "$1" != "--" ]]; do envs+=("$1"); shift; done
  shift
  {
    printf '# generated by scripts/k8s/up.sh: how %s is started (scripts/k8s/ctl.sh start %s)\n' "$name" "$name"
    printf 'cd %q\n' "$K8S_RUN/$name"
    printf 'exec'
    [[ "${#envs[@]}" == 0 ]] || printf ' env %s' "$(printf '%q ' "${envs[@]}")"
    printf ' %q' "$@"
    printf '\n'
  } >"$script"
}

store etcd -- "$K8S_BIN/etcd" --name=kubefacts --data-dir="$K8S_RUN/etcd/data" \
  --listen-client-urls="$ETCD_URL" --advertise-client-urls="$ETCD_URL" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="kubefacts=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state=new \
  --unsafe-no-fsync=true --log-level=warn

store kube-apiserver -- "$K8S_BIN/kube-apiserver" \
  --etcd-servers="$ETCD_URL" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
  --cert-dir="$K8S_RUN/kube-apiserver" \
  --tls-cert-file="$PKI/kube-apiserver.crt" --tls-private-key-file="$PKI/kube-apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --authorization-mode=Node,RBAC \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --allow-privileged=true --profiling=false

store kube-controller-manager -- "$K8S_BIN/kube-controller-manager" \
  --kubeconfig="$K8S_RUN/kubeconfig/kube-controller-manager" \
  --authentication-kubeconfig="$K8S_RUN/kubeconfig/kube-controller-manager" \
  --authorization-kubeconfig="$K8S_RUN/kubeconfig/kube-controller-manager" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --cert-dir="$K8S_RUN/kube-controller-manager" \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --use-service-account-credentials=true --leader-elect=true --controllers='*' \
  --cluster-name=kubefacts --profiling=false

store kube-scheduler -- "$K8S_BIN/kube-scheduler" \
  --kubeconfig="$K8S_RUN/kubeconfig/kube-scheduler" \
  --authentication-kubeconfig="$K8S_RUN/kubeconfig/kube-scheduler" \
  --authorization-kubeconfig="$K8S_RUN/kubeconfig/kube-scheduler" \
  --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --cert-dir="$K8S_RUN/kube-scheduler" \
  --leader-elect=true --profiling=false

# kwok: the Stages from deploy/kwok/ in one config file (they replace kwok's defaults for nodes
# and pods). HOME points into the run dir so that no ~/.kwok/kwok.yaml is read.
KWOK_CONFIG="$K8S_RUN/kwok/kwok.yaml"
shopt -s nullglob
stage_files=("$KWOK_STAGES"/*.yaml)
shopt -u nullglob
[[ "${#stage_files[@]}" -gt 0 ]] || fail kwok "no Stage files in $KWOK_STAGES"
for f in "${stage_files[@]}"; do printf -- '---\n# from %s\n' "${f#"$REPO_ROOT"/}"; cat "$f"; done >"$KWOK_CONFIG"
store kwok HOME="$K8S_RUN/kwok" -- "$K8S_BIN/kwok" \
  --kubeconfig="$K8S_RUN/kubeconfig/kwok" --config="$KWOK_CONFIG" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --server-address="127.0.0.1:$KWOK_PORT" --cidr=10.244.0.0/16 --node-ip=10.0.1.1

# ------------------------------------------------------------------------------------------
# 4. Start and wait. Each wait also checks that no started process died; a death or a
#    timeout names the piece and prints the end of its log.
# ------------------------------------------------------------------------------------------
STARTED=()
start() { launch "$1"; STARTED+=("$1"); T_OF["$1"]="$(now)"; }
declare -A T_OF=()

check_alive() {
  local name
  for name in "${STARTED[@]}"; do
    is_running "$name" || fail "$name" "the $name process exited (see its log)" "$K8S_LOGS/$name.log"
  done
}
# await NAME WHAT COMMAND...: polls COMMAND until it succeeds; NAME is blamed on a timeout.
await() {
  local name="$1" what="$2" t0
  shift 2
  t0="$(now)"
  until "$@" >/dev/null 2>&1; do
    check_alive
    if [[ "$(elapsed "$t0" | cut -d. -f1)" -ge "$READY_TIMEOUT" ]]; then
      fail "$name" "not ready after $READY_TIMEOUT s (waiting for: $what)" "$K8S_LOGS/$name.log"
    fi
    sleep 0.2
  done
  check_alive
  info "$name: $what ($(elapsed "${T_OF[$name]:-$t0}") s after its start)"
}

etcd_healthy() { curl -sf --max-time 2 "$ETCD_URL/health" | jq -e '.health == "true"'; }
apiserver_ready() {
  [[ "$(curl -sf --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$SERVER/readyz")" == ok ]]
}
healthz() { [[ "$(curl -sk --max-time 2 "https://127.0.0.1:$1/healthz")" == ok ]]; }
lease_held() {
  kapi GET "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/$1" | jq -e '(.spec.holderIdentity // "") != ""'
}
node_name() { printf 'kwok-node-%s' "$1"; }
nodes_ready() {
  local n
  kapi GET "/api/v1/nodes?labelSelector=type%3Dkwok" >"$K8S_RUN/nodes.json" || return 1
  n="$(jq '[.items[] | select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))] | length' "$K8S_RUN/nodes.json")"
  [[ "$n" == "$NODE_COUNT" ]]
}
create_node() {
  local name
  name="$(node_name "$1")"
  jq -n --arg name "$name" '{
    apiVersion: "v1", kind: "Node",
    metadata: {
      name: $name,
      annotations: {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
      labels: {"type": "kwok", "kubernetes.io/hostname": $name, "kubernetes.io/os": "linux",
               "kubernetes.io/arch": "amd64", "kubernetes.io/role": "agent", "node-role.kubernetes.io/agent": ""}
    },
    spec: {},
    status: {allocatable: {cpu: "32", memory: "256Gi", pods: "110"},
             capacity: {cpu: "32", memory: "256Gi", pods: "110"}}
  }' | kapi POST /api/v1/nodes -H 'Content-Type: application/json' --data-binary @- >>"$K8S_LOGS/nodes.log" 2>&1 ||
    fail nodes "could not create Node $name" "$K8S_LOGS/nodes.log"
}

start etcd
await etcd "healthy on $ETCD_URL" etcd_healthy
start kube-apiserver
await kube-apiserver "/readyz ok on $SERVER" apiserver_ready
start kube-controller-manager
start kube-scheduler
start kwok
for i in $(seq 1 "$NODE_COUNT"); do create_node "$i"; done
await kube-controller-manager "/healthz ok on 127.0.0.1:$KCM_PORT" healthz "$KCM_PORT"
await kube-scheduler "/healthz ok on 127.0.0.1:$SCHEDULER_PORT" healthz "$SCHEDULER_PORT"
await kube-controller-manager "holds Lease kube-system/kube-controller-manager" lease_held kube-controller-manager
await kube-scheduler "holds Lease kube-system/kube-scheduler" lease_held kube-scheduler
await kwok "$NODE_COUNT fake node(s) Ready" nodes_ready
READY_SECONDS="$(elapsed "$T_START")"

# ------------------------------------------------------------------------------------------
# 5. The env file.
# ------------------------------------------------------------------------------------------
{
  printf '# generated by scripts/k8s/up.sh at %s; source it: . .cache/k8s/run/env\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  for kv in \
    "KUBEFACTS_K8S_KUBECONFIG=$ADMIN_KUBECONFIG" \
    "KUBEFACTS_K8S_SERVER=$SERVER" \
    "KUBEFACTS_K8S_CA=$PKI/ca.crt" \
    "KUBEFACTS_K8S_ADMIN_CERT=$PKI/admin.crt" \
    "KUBEFACTS_K8S_ADMIN_KEY=$PKI/admin.key" \
    "KUBEFACTS_K8S_BIN=$K8S_BIN" \
    "KUBEFACTS_K8S_KUBECTL=$K8S_BIN/kubectl" \
    "KUBEFACTS_HELM=$K8S_BIN/helm" \
    "KUBEFACTS_K8S_VERSION=$K8S_VERSION" \
    "KUBEFACTS_K8S_ETCD=$ETCD_URL" \
    "KUBEFACTS_K8S_NODES=$(for i in $(seq 1 "$NODE_COUNT"); do printf '%s ' "$(node_name "$i")"; done | sed 's/ $//')" \
    "KUBEFACTS_K8S_RUN_DIR=$K8S_RUN" \
    "KUBEFACTS_K8S_LOGS=$K8S_LOGS" \
    "KUBEFACTS_K8S_PIDS=$K8S_PIDS" \
    "KUBEFACTS_K8S_CTL=$K8S_SCRIPTS/ctl.sh" \
    "KUBEFACTS_K8S_KCM_HEALTHZ=https://127.0.0.1:$KCM_PORT/healthz" \
    "KUBEFACTS_K8S_SCHEDULER_HEALTHZ=https://127.0.0.1:$SCHEDULER_PORT/healthz" \
    "KUBEFACTS_K8S_KCM_LEASE_SECONDS=15" \
    "KUBEFACTS_K8S_READY_SECONDS=$READY_SECONDS"; do
    printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"
  done
} >"$K8S_RUN/env.part"
mv "$K8S_RUN/env.part" "$K8S_RUN/env"
info "control plane ready in $READY_SECONDS s (start to ready; $(elapsed "$T_UP") s with the build check); env: source $K8S_RUN/env"
