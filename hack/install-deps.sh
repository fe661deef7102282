#!/usr/bin/env bash
# install-deps.sh - install the Debian packages the tests need, when missing.
set -euo pipefail

# command -> Debian package
declare -A wanted=(
  [xorriso]=xorriso # builds the release ISOs the repo tests serve
  [nginx]=nginx     # the repo benchmark's reference server
)

missing=()
for cmd in "${!wanted[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${wanted[$cmd]}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
echo "installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
