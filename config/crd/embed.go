// Package crd embeds the toolkit's generated CRDs, so that the binary (the
// demo's embedded control plane) and the tests install exactly what
// `make manifests` generated.
package crd

import "embed"

// Bases holds bases/*.yaml.
//
//go:embed bases/*.yaml
var Bases embed.FS
