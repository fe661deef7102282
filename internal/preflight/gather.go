package preflight

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kubelet reads a node's kubelet endpoints.
type Kubelet interface {
	// Get returns the body of GET <path> on the node's kubelet.
	Get(ctx context.Context, node, path string) ([]byte, error)
}

// ProxyKubelet reaches kubelets through the API server's node proxy, so the
// manager needs no network path to the nodes and no kubelet credentials.
type ProxyKubelet struct{ Kube kubernetes.Interface }

// Get implements Kubelet.
func (k ProxyKubelet) Get(ctx context.Context, node, path string) ([]byte, error) {
	return k.Kube.CoreV1().RESTClient().Get().
		Resource("nodes").Name(node).SubResource("proxy").Suffix(path).
		Do(ctx).Raw()
}

// The parts of the kubelet's /stats/summary and /configz the check reads.
type statsSummary struct {
	Node struct {
		Fs      *fsStats `json:"fs"`
		Runtime *struct {
			ImageFs *fsStats `json:"imageFs"`
		} `json:"runtime"`
	} `json:"node"`
}

type fsStats struct {
	CapacityBytes *uint64 `json:"capacityBytes"`
	UsedBytes     *uint64 `json:"usedBytes"`
}

type configz struct {
	KubeletConfig struct {
		ImageGCHighThresholdPercent *int `json:"imageGCHighThresholdPercent"`
	} `json:"kubeletconfig"`
}

// GatherNodeDisk reads a node's image file system usage (imagefs, or nodefs
// when the kubelet reports no separate image file system) and its image
// garbage collection threshold.
func GatherNodeDisk(ctx context.Context, k Kubelet, node string) (NodeDisk, error) {
	d := NodeDisk{Node: node, ImageGCHighThresholdPercent: DefaultImageGCHighThresholdPercent}
	raw, err := k.Get(ctx, node, "stats/summary")
	if err != nil {
		return d, fmt.Errorf("reading the kubelet's /stats/summary of node %q: %w", node, err)
	}
	var sum statsSummary
	if err := json.Unmarshal(raw, &sum); err != nil {
		return d, fmt.Errorf("the kubelet of node %q returned an unreadable /stats/summary: %w", node, err)
	}
	fs, name := sum.Node.Fs, "nodefs"
	if sum.Node.Runtime != nil && sum.Node.Runtime.ImageFs != nil && sum.Node.Runtime.ImageFs.CapacityBytes != nil {
		fs, name = sum.Node.Runtime.ImageFs, "imagefs"
	}
	if fs == nil || fs.CapacityBytes == nil || fs.UsedBytes == nil {
		return d, fmt.Errorf("the kubelet of node %q reports no file system capacity and usage in /stats/summary", node)
	}
	d.Filesystem, d.CapacityBytes, d.UsedBytes = name, *fs.CapacityBytes, *fs.UsedBytes

	raw, err = k.Get(ctx, node, "configz")
	if err != nil {
		return d, fmt.Errorf("reading the kubelet's /configz of node %q: %w", node, err)
	}
	var cfg configz
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return d, fmt.Errorf("the kubelet of node %q returned an unreadable /configz: %w", node, err)
	}
	if t := cfg.KubeletConfig.ImageGCHighThresholdPercent; t != nil {
		d.ImageGCHighThresholdPercent = *t
	}
	return d, nil
}

// CertDialer returns the certificate chain served at host:port.
type CertDialer func(ctx context.Context, address string) ([]*x509.Certificate, error)

// DialCerts connects with TLS and returns the peer's certificates. The chain
// is not verified: the check reads expiry dates, it sends nothing.
func DialCerts(ctx context.Context, address string) ([]*x509.Certificate, error) {
	d := tls.Dialer{
		NetDialer: &net.Dialer{Timeout: 10 * time.Second},
		//nolint:gosec // only the certificates' dates are read; no data is exchanged
		Config: &tls.Config{InsecureSkipVerify: true},
	}
	conn, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates, nil
}

// APIServerAddresses returns the host:port of every endpoint of the
// default/kubernetes Service, with the ports the EndpointSlices publish.
func APIServerAddresses(ctx context.Context, c client.Reader) ([]string, error) {
	var slices discoveryv1.EndpointSliceList
	if err := c.List(ctx, &slices, client.InNamespace("default"),
		client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of default/kubernetes: %w", err)
	}
	addrs := EndpointAddresses(slices.Items)
	if len(addrs) == 0 {
		return nil, errors.New("the EndpointSlices of default/kubernetes list no address and port")
	}
	return addrs, nil
}

// EndpointAddresses joins every endpoint address of the slices with every
// port they publish, IPv6-safe.
func EndpointAddresses(slices []discoveryv1.EndpointSlice) []string {
	var addrs []string
	for _, s := range slices {
		for _, p := range s.Ports {
			if p.Port == nil {
				continue
			}
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					addrs = append(addrs, net.JoinHostPort(a, strconv.Itoa(int(*p.Port))))
				}
			}
		}
	}
	return addrs
}

// GatherServedCerts dials every address and collects the certificates
// served. An address that cannot be reached is reported in errs; the check
// needs at least one certificate.
func GatherServedCerts(ctx context.Context, dial CertDialer, addrs []string) (certs []ServedCert, errs []error) {
	for _, a := range addrs {
		chain, err := dial(ctx, a)
		if err != nil {
			errs = append(errs, fmt.Errorf("connecting to the API server at %s: %w", a, err))
			continue
		}
		for _, c := range chain {
			certs = append(certs, ServedCert{Address: a, Cert: c})
		}
	}
	return certs, errs
}
