#!/usr/bin/env bash
# envtest.sh - provide etcd and kube-apiserver for controller-runtime's envtest
# and print the directory to use as KUBEBUILDER_ASSETS.
#
# Usage: hack/envtest.sh OUTDIR K8S_VERSION SETUP_ENVTEST_VERSION
#
# 1. If OUTDIR already holds the binaries, print their directory (no network).
# 2. Else try the standard download tool, setup-envtest (needs GitHub/GCS).
# 3. Else build both binaries from source through the Go module proxy
#    (hack/build-envtest-bins.sh; ~4 minutes cold on 2 cores, cached after).
# Both paths use the same layout: OUTDIR/k8s/<version>-<os>-<arch>/.
set -euo pipefail

outdir=${1:?OUTDIR}
k8s=${2:?K8S_VERSION}
setup_version=${3:?SETUP_ENVTEST_VERSION}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
assets="$outdir/k8s/$k8s-$(go env GOOS)-$(go env GOARCH)"

log() { printf '[envtest] %s\n' "$*" >&2; }

if [[ -x $assets/kube-apiserver && -x $assets/etcd ]]; then
  echo "$assets"
  exit 0
fi

if [[ ${ENVTEST_SKIP_DOWNLOAD:-} != 1 ]]; then
  setup="$outdir/setup-envtest-$setup_version"
  if [[ ! -x $setup ]]; then
    GOBIN="$outdir/.tmp" go install "sigs.k8s.io/controller-runtime/tools/setup-envtest@$setup_version" >&2 \
      && mv "$outdir/.tmp/setup-envtest" "$setup" || true
  fi
  if [[ -x $setup ]]; then
    log "trying to download envtest $k8s with setup-envtest"
    if path=$(timeout 120 "$setup" use "$k8s" --bin-dir "$outdir" -p path 2>/dev/null) \
       && [[ -x $path/kube-apiserver && -x $path/etcd ]]; then
      echo "$path"
      exit 0
    fi
    log "download failed (no access to the release buckets); building from source instead"
  fi
fi

"$here/build-envtest-bins.sh" "$outdir" "$k8s"
