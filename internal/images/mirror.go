package images

import (
	"fmt"
	"net"
	"strings"

	"github.com/distribution/reference"
)

// Mirror is a registry that holds a copy of every image the upgrade's
// workloads run (the manager's --image-mirror, the chart's imageMirror):
// each image is pulled from it under the same repository path, as a mirror
// endpoint of Harvester's containerd-registry setting serves docker.io's
// images. The zero Mirror rewrites nothing.
type Mirror struct {
	// host is the registry's host[:port]; prefix a path under it, e.g. a
	// Harbor project ("" for none).
	host, prefix string
}

// ParseMirror reads a mirror: a registry host with an optional port and
// path, e.g. registry.example.com:5000 or harbor.example.com/harvester.
// The empty string is no mirror.
func ParseMirror(s string) (Mirror, error) {
	if s == "" {
		return Mirror{}, nil
	}
	bad := func(why string) (Mirror, error) {
		return Mirror{}, fmt.Errorf("image mirror %q: %s; give a registry host with an optional port and path, e.g. registry.example.com:5000 or harbor.example.com/harvester", s, why)
	}
	if strings.Contains(s, "://") {
		return bad("drop the scheme: the nodes' containerd chooses HTTPS or HTTP from Harvester's containerd-registry setting")
	}
	s = strings.TrimSuffix(s, "/")
	host, prefix, _ := strings.Cut(s, "/")
	if host == "" {
		return bad("no registry host")
	}
	h := host
	if hh, port, err := net.SplitHostPort(host); err == nil {
		if port == "" {
			return bad("empty port")
		}
		h = hh
	}
	if h != "localhost" && !strings.Contains(h, ".") && net.ParseIP(h) == nil {
		return bad(fmt.Sprintf("%q is not a registry host: it has no dot or port, so it would be read as a Docker Hub namespace", host))
	}
	// An image path below the mirror must make a valid reference: no tag,
	// digest or upper case in it.
	if _, err := reference.ParseNormalizedNamed(s + "/x/y:z"); err != nil {
		return bad(err.Error())
	}
	return Mirror{host: host, prefix: prefix}, nil
}

// IsZero reports whether there is no mirror.
func (m Mirror) IsZero() bool { return m.host == "" }

// Host is the mirror's registry host[:port].
func (m Mirror) Host() string { return m.host }

func (m Mirror) String() string {
	if m.prefix == "" {
		return m.host
	}
	return m.host + "/" + m.prefix
}

// Rewrite gives the mirror's copy of an image: its registry is replaced by
// the mirror, its repository path, tag and digest kept
// (docker.io/rancher/x:v1 becomes <mirror>/rancher/x:v1). Without a mirror,
// or for a reference that does not parse, ref is returned as is.
func (m Mirror) Rewrite(ref string) string {
	if m.IsZero() {
		return ref
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	out := m.String() + "/" + reference.Path(named)
	if t, ok := named.(reference.Tagged); ok {
		out += ":" + t.Tag()
	}
	if d, ok := named.(reference.Digested); ok {
		out += "@" + d.Digest().String()
	}
	return out
}
