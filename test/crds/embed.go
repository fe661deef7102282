// Package crds embeds the CRD fixtures of the foreign kinds the toolkit reads
// and writes, generated from internal/cluster/apis by `make manifests`, for
// the tests and the simulator's control plane.
package crds

import "embed"

// Files holds *.yaml.
//
//go:embed *.yaml
var Files embed.FS
