#!/usr/bin/env bash
# kustomize-build.sh - print the installer manifests: config/default with the
# manager's image set. `make build-installer` writes them to
# dist/install.yaml; `make deploy` applies them.
#
# Usage: hack/kustomize-build.sh KUSTOMIZE IMAGE
#   IMAGE is repository[:tag] or repository@digest.
set -euo pipefail

kustomize=${1:?KUSTOMIZE}
image=${2:?IMAGE}
config=$(cd "$(dirname "$0")/../config" && pwd)

# A registry's port is not a tag: only a colon in the last path element is.
name=$image tag=latest digest=''
if [[ $image == *@* ]]; then
  name=${image%@*} digest=${image#*@}
  tag=''
elif [[ ${image##*/} == *:* ]]; then
  name=${image%:*} tag=${image##*:}
fi

# A throwaway overlay next to config/default: kustomize takes bases by
# relative path only.
overlay=$(mktemp -d "$config/.installer.XXXXXX")
trap 'rm -rf "$overlay"' EXIT
{
  echo "resources:"
  echo "- ../default"
  echo "images:"
  echo "- name: rancher/harvester-upgrade-toolkit"
  echo "  newName: $name"
  if [[ -n $tag ]]; then echo "  newTag: \"$tag\""; fi
  if [[ -n $digest ]]; then echo "  digest: $digest"; fi
} >"$overlay/kustomization.yaml"
"$kustomize" build "$overlay"
