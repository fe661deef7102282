package images

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Registries is what Harvester's containerd-registry setting holds: the
// registries.yaml that Harvester writes to every node for RKE2's
// containerd, as JSON in the setting's value (wharfie's registries.Registry
// with Go's field names: Mirrors, Configs).
type Registries struct {
	// Mirrors are, by registry host ("docker.io", or "*" for every
	// registry), the endpoints containerd pulls that registry's images
	// from.
	Mirrors map[string]RegistryMirror `json:"Mirrors"`
	// Configs are, by registry host, the credentials and TLS settings the
	// nodes use for it; their content does not matter here.
	Configs map[string]json.RawMessage `json:"Configs"`
}

// RegistryMirror is one registry's mirror endpoints.
type RegistryMirror struct {
	Endpoints []string `json:"Endpoints"`
}

// ParseRegistries reads the value of the containerd-registry setting; an
// empty value is no registry configuration.
func ParseRegistries(value string) (Registries, error) {
	var r Registries
	if strings.TrimSpace(value) == "" {
		return r, nil
	}
	if err := json.Unmarshal([]byte(value), &r); err != nil {
		return Registries{}, fmt.Errorf("the containerd-registry setting is not the JSON Harvester writes ({\"Mirrors\": {...}, \"Configs\": {...}}): %w", err)
	}
	return r, nil
}

// Pulls says how the nodes can pull an image through this configuration:
// a mirror of its registry (or of every registry, "*") with an endpoint, or
// a configuration of the registry itself. ok is false when the
// configuration says nothing of the image's registry: on an air-gapped
// cluster, nothing pulls it.
func (r Registries) Pulls(ref string) (how string, ok bool) {
	host, err := registryOf(ref)
	if err != nil {
		return "", false
	}
	for _, key := range []string{host, "*"} {
		if m, found := r.Mirrors[key]; found && len(m.Endpoints) > 0 {
			return fmt.Sprintf("through containerd-registry's mirror of %s (%s)", key, strings.Join(m.Endpoints, ", ")), true
		}
	}
	if _, found := r.Configs[host]; found {
		return fmt.Sprintf("from %s, which containerd-registry configures", host), true
	}
	return "", false
}

// MirrorHosts are the hosts of the mirror endpoints containerd tries for
// a registry's images: those of its own mirror, else of the mirror of
// every registry ("*").
func (r Registries) MirrorHosts(registry string) []string {
	m, ok := r.Mirrors[registry]
	if !ok || len(m.Endpoints) == 0 {
		m = r.Mirrors["*"]
	}
	out := make([]string, 0, len(m.Endpoints))
	for _, e := range m.Endpoints {
		out = append(out, endpointHost(e))
	}
	return out
}

// Knows reports whether the configuration names a registry host, as a
// registry it configures or as a mirror endpoint: the nodes then have its
// TLS settings and credentials, if it needs any.
func (r Registries) Knows(host string) bool {
	if _, ok := r.Configs[host]; ok {
		return true
	}
	if _, ok := r.Mirrors[host]; ok {
		return true
	}
	for _, m := range r.Mirrors {
		if slices.ContainsFunc(m.Endpoints, func(e string) bool { return endpointHost(e) == host }) {
			return true
		}
	}
	return false
}

// endpointHost is the host[:port] of a mirror endpoint URL.
func endpointHost(endpoint string) string {
	if _, rest, ok := strings.Cut(endpoint, "://"); ok {
		endpoint = rest
	}
	host, _, _ := strings.Cut(endpoint, "/")
	return host
}
