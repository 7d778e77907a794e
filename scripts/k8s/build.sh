#!/usr/bin/env bash
# Builds (once, cached under ~/.cache/kubefacts/k8s/<k8s-version>/bin/) the binaries of a real Kubernetes
# control plane, from source fetched through the Go module proxy:
#   - kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  (k8s.io/kubernetes)
#   - etcd                                                              (go.etcd.io/etcd/server/v3)
#   - kwok                                                              (sigs.k8s.io/kwok)
#   - helm (for the chart in deploy/helm/; not part of the control plane) (helm.sh/helm/v4)
# k8s.io/kubernetes cannot be `go install`ed (its go.mod pins its staging modules k8s.io/api,
# client-go, ... at v0.0.0 and replaces them with ./staging paths), and etcd's and kwok's go.mod
# carry replace directives too, so each is built from a tiny wrapper module generated under
# ~/.cache/kubefacts/k8s/<k8s-version>/src/ (never in git). For Kubernetes the wrapper replaces every staging
# module that k8s.io/kubernetes requires with its published v0.Y.Z.
# A stamp per binary, keyed by the versions and the build recipe, makes a second run a no-op.
# Environment: KUBEFACTS_K8S_VERSION (default v1.34.4), KUBEFACTS_ETCD_VERSION (v3.6.4),
# KUBEFACTS_KWOK_VERSION (v0.8.0), KUBEFACTS_HELM_VERSION (v4.3.2). Go's own caches (GOMODCACHE,
# GOCACHE) stay where go puts them.
# Usage: scripts/k8s/build.sh [--quiet]
set -euo pipefail
# shellcheck source=scripts/k8s/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUIET=0
[[ "${1:-}" == "--quiet" ]] && QUIET=1
say() { [[ "$QUIET" == 1 ]] || info "$@"; }

# Bump when the way the binaries are built changes: every stamp then mismatches.
RECIPE=1
NICE=(nice -n 10)
export CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"

for tool in go curl sha256sum awk; do
  command -v "$tool" >/dev/null 2>&1 || fail prerequisites "'$tool' not found on PATH (the binaries are built with Go >= 1.24 from the module proxy)"
done
[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] ||
  fail prerequisites "KUBEFACTS_K8S_VERSION must look like v1.Y.Z, not '$K8S_VERSION'"
K8S_MINOR="${BASH_REMATCH[1]}"
STAGING_VERSION="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
GO_VERSION="$(go env GOVERSION)"

SRC="$K8S_HOME/src"
BUILD_LOGS="$K8S_HOME/logs"
mkdir -p "$K8S_BIN" "$SRC" "$BUILD_LOGS"

stamp_want() { # NAME MODULE-VERSION
  printf '%s %s recipe=%s go=%s cgo=0 trimpath\n' "$1" "$2" "$RECIPE" "$GO_VERSION"
}
is_cached() { # NAME MODULE-VERSION
  [[ -x "$K8S_BIN/$1" && -f "$K8S_BIN/.$1.stamp" && "$(cat "$K8S_BIN/.$1.stamp")" == "$(stamp_want "$1" "$2")" ]]
}
write_stamp() { stamp_want "$1" "$2" >"$K8S_BIN/.$1.stamp"; }

# use_go_mod DIR: makes DIR/go.mod.want the wrapper's go.mod when it changed (then go.sum is
# resolved again); an unchanged one keeps go.mod and go.sum as Go left them.
use_go_mod() {
  local dir="$1"
  if ! cmp -s "$dir/go.mod.want" "$dir/go.mod.src" 2>/dev/null; then
    cp "$dir/go.mod.want" "$dir/go.mod"
    cp "$dir/go.mod.want" "$dir/go.mod.src"
    rm -f "$dir/go.sum"
  fi
  rm -f "$dir/go.mod.want"
}

# go_build COMPONENT LOG WRAPPER-DIR OUTPUT PACKAGE LDFLAGS: one binary, timed, niced.
go_build() {
  local component="$1" log="$2" dir="$3" out="$4" pkg="$5" ldflags="$6" t0
  t0="$(now)"
  (cd "$dir" && "${NICE[@]}" go build -trimpath -ldflags "$ldflags" -o "$out.part" "$pkg") >>"$log" 2>&1 ||
    fail "$component" "go build $pkg failed" "$log"
  mv "$out.part" "$out"
  say "$component: compiled $pkg in $(elapsed "$t0") s"
}

# go_fetch COMPONENT LOG WRAPPER-DIR PACKAGE...: resolves and downloads every module the packages
# need (fills go.sum), timed apart from the compile.
go_fetch() {
  local component="$1" log="$2" dir="$3" t0
  shift 3
  t0="$(now)"
  (cd "$dir" && go list -deps "$@" >/dev/null) >>"$log" 2>&1 ||
    fail "$component" "resolving/downloading the modules of $* failed (GOPROXY=$GOPROXY)" "$log"
  say "$component: modules resolved and downloaded in $(elapsed "$t0") s"
}

# ------------------------------------------------------------------------------------------
# Kubernetes: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
# ------------------------------------------------------------------------------------------
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
build_kubernetes() {
  local name missing=()
  for name in "${K8S_CMDS[@]}"; do
    is_cached "$name" "$K8S_VERSION" || missing+=("$name")
  done
  if [[ "${#missing[@]}" == 0 ]]; then
    say "kubernetes $K8S_VERSION (${K8S_CMDS[*]}): cached"
    return 0
  fi
  local dir="$SRC/kubernetes" log="$BUILD_LOGS/kubernetes.log" t0 info_json gomod commit date
  mkdir -p "$dir"
  : >"$log"
  t0="$(now)"
  info_json="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" 2>>"$log")" ||
    fail kubernetes "go mod download k8s.io/kubernetes@$K8S_VERSION failed (is it a published version?)" "$log"
  say "kubernetes: k8s.io/kubernetes@$K8S_VERSION source downloaded in $(elapsed "$t0") s"
  gomod="$(jq -r .GoMod <<<"$info_json")"
  commit="$(jq -r '.Origin.Hash // "unknown"' <<<"$info_json")"
  date="$(jq -r '.Time // empty' <<<"$info_json")"
  [[ -f "$gomod" ]] || fail kubernetes "no go.mod for k8s.io/kubernetes@$K8S_VERSION in the module cache" "$log"
  # The staging modules: replaced with ./staging/src/... in Kubernetes' go.mod and required
  # there (at v0.0.0). Only required ones get a replace line: a few replaced samples
  # (sample-controller, ...) are not published for every version.
  local -a staging=()
  mapfile -t staging < <(awk '
    /=> \.\/staging\/src\// { replaced[$1] = 1 }
    $2 == "v0.0.0" { required[$1] = 1 }
    /^require k8s\.io\/[^ ]+ v0\.0\.0/ { required[$2] = 1 }
    END { for (m in replaced) if (m in required) print m }' "$gomod" | sort)
  [[ "${#staging[@]}" -gt 10 ]] ||
    fail kubernetes "found only ${#staging[@]} staging modules in $gomod; its layout changed?" "$log"
  {
    printf '// generated by scripts/k8s/build.sh: builds k8s.io/kubernetes %s as a dependency\n' "$K8S_VERSION"
    printf 'module kubefacts.local/k8s-build\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
    for name in "${staging[@]}"; do printf '\t%s => %s %s\n' "$name" "$name" "$STAGING_VERSION"; done
    printf ')\n'
  } >"$dir/go.mod.want"
  use_go_mod "$dir"
  say "kubernetes: wrapper module $dir/go.mod (${#staging[@]} staging modules at $STAGING_VERSION)"
  local -a pkgs=()
  for name in "${K8S_CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$name"); done
  go_fetch kubernetes "$log" "$dir" "${pkgs[@]}"
  local ldflags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR"
    ldflags+=" -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=clean"
    [[ -n "$date" ]] && ldflags+=" -X $pkg.buildDate=$date"
  done
  for name in "${missing[@]}"; do
    go_build "$name" "$log" "$dir" "$K8S_BIN/$name" "k8s.io/kubernetes/cmd/$name" "$ldflags"
  done
  local got
  got="$("$K8S_BIN/kube-apiserver" --version 2>>"$log")" || fail kube-apiserver "kube-apiserver --version failed" "$log"
  [[ "$got" == "Kubernetes $K8S_VERSION" ]] ||
    fail kube-apiserver "kube-apiserver --version prints '$got', expected 'Kubernetes $K8S_VERSION'" "$log"
  for name in "${missing[@]}"; do write_stamp "$name" "$K8S_VERSION"; done
  say "kubernetes $K8S_VERSION: built ${missing[*]} in $(elapsed "$t0") s"
}

# ------------------------------------------------------------------------------------------
# etcd and kwok: one binary each, from a wrapper module requiring the project (both go.mods
# carry replace directives, so no `go install @version`).
# build_single NAME VERSION MODULE PACKAGE LDFLAGS [MAIN_IMPORT]: with MAIN_IMPORT, the
# wrapper gets a main.go calling that package's Main (etcd's server module has no main
# package to build) and PACKAGE is ".". The binary must report VERSION in `--version`.
# ------------------------------------------------------------------------------------------
build_single() {
  local name="$1" version="$2" module="$3" pkg="$4" ldflags="$5" main_import="${6:-}"
  if is_cached "$name" "$version"; then
    say "$name $version: cached"
    return 0
  fi
  local dir="$SRC/$name" log="$BUILD_LOGS/$name.log" t0
  mkdir -p "$dir"
  : >"$log"
  t0="$(now)"
  printf '// generated by scripts/k8s/build.sh\nmodule kubefacts.local/%s-build\n\ngo 1.24.0\n\nrequire %s %s\n' \
    "$name" "$module" "$version" >"$dir/go.mod.want"
  use_go_mod "$dir"
  if [[ -n "$main_import" ]]; then
    printf '%s\n' "// generated by scripts/k8s/build.sh: the $name binary" 'package main' '' \
      'import (' '	"os"' '' "	\"$main_import\"" ')' '' "func main() { ${main_import##*/}.Main(os.Args) }" >"$dir/main.go"
  fi
  go_fetch "$name" "$log" "$dir" "$pkg"
  go_build "$name" "$log" "$dir" "$K8S_BIN/$name" "$pkg" "$ldflags"
  "$K8S_BIN/$name" --version >>"$log" 2>&1 || fail "$name" "$name --version failed" "$log"
  grep -q -F -- "${version#v}" "$log" || fail "$name" "$name --version does not report ${version#v}" "$log"
  write_stamp "$name" "$version"
  say "$name $version: built in $(elapsed "$t0") s"
}

# ------------------------------------------------------------------------------------------
# helm: its go.mod has no replace directives, but it is built from the same kind of wrapper
# (one go.mod per tool, Go's caches shared). Its version lives in an internal package that
# -X can still set; with no gitCommit, `helm version --short` prints exactly the version,
# which is what is checked (helm has no --version flag).
# ------------------------------------------------------------------------------------------
build_helm() {
  local version="$HELM_VERSION" name=helm
  if is_cached "$name" "$version"; then
    say "helm $version: cached"
    return 0
  fi
  [[ "$version" =~ ^v4\. ]] || fail helm "KUBEFACTS_HELM_VERSION must be a helm.sh/helm/v4 version (v4.Y.Z), not '$version'"
  local dir="$SRC/$name" log="$BUILD_LOGS/$name.log" t0 got
  mkdir -p "$dir"
  : >"$log"
  t0="$(now)"
  printf '// generated by scripts/k8s/build.sh\nmodule kubefacts.local/%s-build\n\ngo 1.26.0\n\nrequire helm.sh/helm/v4 %s\n' \
    "$name" "$version" >"$dir/go.mod.want"
  use_go_mod "$dir"
  go_fetch "$name" "$log" "$dir" helm.sh/helm/v4/cmd/helm
  go_build "$name" "$log" "$dir" "$K8S_BIN/$name" helm.sh/helm/v4/cmd/helm \
    "-s -w -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
  got="$(HOME="$dir" "$K8S_BIN/$name" version --short 2>>"$log")" || fail "$name" "helm version --short failed" "$log"
  [[ "$got" == "$version" ]] || fail "$name" "helm version --short prints '$got', expected '$version'" "$log"
  write_stamp "$name" "$version"
  say "helm $version: built in $(elapsed "$t0") s"
}

command -v jq >/dev/null 2>&1 || fail prerequisites "'jq' not found on PATH (apt-get install jq)"
T_BUILD="$(now)"
build_single etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 . "-s -w" go.etcd.io/etcd/server/v3/etcdmain
build_single kwok "$KWOK_VERSION" sigs.k8s.io/kwok sigs.k8s.io/kwok/cmd/kwok \
  "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
build_kubernetes
build_helm
say "binaries ready in $K8S_BIN ($(elapsed "$T_BUILD") s): $(cd "$K8S_BIN" && echo *)"
