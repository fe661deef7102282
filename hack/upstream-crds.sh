#!/usr/bin/env bash
# upstream-crds.sh - write the real CRDs of the foreign kinds (Harvester,
# Rancher, Longhorn, Cluster API, system-upgrade-controller, KubeVirt) into
# OUTDIR, from their upstream modules through the Go module proxy
# (hack/crdgen says which), and print OUTDIR.
#
# Usage: hack/upstream-crds.sh OUTDIR
#
# The result is cached: OUTDIR/.stamp records the generator's inputs, and a
# second run with the same inputs returns at once, without network.
set -euo pipefail

outdir=${1:?OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
gen="$here/crdgen"
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
log() { printf '[upstream-crds] %s\n' "$*" >&2; }

stamp=$(cat "$gen"/go.mod "$gen"/go.sum "$gen"/*.go | sha256sum | cut -c1-16)
if [[ -f $outdir/.stamp && $(cat "$outdir/.stamp") == "$stamp" ]]; then
  echo "$outdir"
  exit 0
fi

if command -v flock >/dev/null; then
  exec 9>"$outdir/.lock"
  flock 9
fi
t0=$SECONDS
log "generating the upstream CRDs (hack/crdgen) into $outdir"
tmp=$(mktemp -d "$outdir/.tmp-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The generator is its own module (it needs Rancher's and wrangler's
# dependencies, not the toolkit's); the project's go.work or vendor
# settings must not leak into it.
(cd "$gen" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go run . -out "$tmp")
rm -f "$outdir"/*.yaml
mv "$tmp"/*.yaml "$outdir/"
echo "$stamp" > "$outdir/.stamp"
log "done in $((SECONDS - t0))s: $(ls "$outdir"/*.yaml | wc -l) CRDs"
echo "$outdir"
