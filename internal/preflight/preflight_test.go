package preflight

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

const gi = uint64(1 << 30)

func TestDiskSpace(t *testing.T) {
	disks := []NodeDisk{
		{Node: "ok", Filesystem: "imagefs", CapacityBytes: 100 * gi, UsedBytes: 50 * gi, ImageGCHighThresholdPercent: 85},
		{Node: "edge", Filesystem: "imagefs", CapacityBytes: 100 * gi, UsedBytes: 72 * gi, ImageGCHighThresholdPercent: 85}, // 85.00%: allowed
		{Node: "full", Filesystem: "nodefs", CapacityBytes: 100 * gi, UsedBytes: 80 * gi, ImageGCHighThresholdPercent: 85},
		{Node: "strict", Filesystem: "imagefs", CapacityBytes: 100 * gi, UsedBytes: 50 * gi, ImageGCHighThresholdPercent: 60},
		{Node: "empty", Filesystem: "imagefs"},
	}
	var got []string
	for _, v := range DiskSpace(disks, NewImagesSize) {
		if v.Reason != RiskInsufficientDiskSpace {
			t.Errorf("verdict %+v is not of the disk-space check", v)
		}
		if v.Result == v1beta1.CheckFailed {
			got = append(got, v.Message)
		}
	}
	if len(got) != 3 {
		t.Fatalf("got %d problems, want 3: %q", len(got), got)
	}
	for i, want := range []string{`node "full" will reach 93.00% of its nodefs`, `node "strict" will reach 63.00%`, `node "empty": the kubelet reports no imagefs capacity`} {
		if !strings.Contains(got[i], want) {
			t.Errorf("problem %d = %q, want it to contain %q", i, got[i], want)
		}
	}
	if !strings.Contains(got[0], "free at least 8.0 GiB") || !strings.Contains(got[0], "skip-garbage-collection-threshold-check") {
		t.Errorf("message does not say what to do: %q", got[0])
	}
}

func cert(cn string, notAfter time.Time) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, NotAfter: notAfter}
}

func TestCertExpiry(t *testing.T) {
	now := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	week := 7 * 24 * time.Hour
	served := func(days ...float64) []ServedCert {
		var out []ServedCert
		for i, d := range days {
			out = append(out, ServedCert{Address: "[fd00::1]:6443", Cert: cert("kube-apiserver-"+string(rune('a'+i)), now.Add(time.Duration(d*24)*time.Hour))})
		}
		return out
	}
	tests := []struct {
		name   string
		certs  []ServedCert
		min    time.Duration
		result v1beta1.CheckResult
		want   string
	}{
		{"all far", served(365, 30), week, v1beta1.CheckPassed, `"kube-apiserver-b" served at [fd00::1]:6443 expires at`},
		{"exactly the minimum is enough", served(7), week, v1beta1.CheckPassed, "after the required 7 days"},
		{"earliest too close", served(365, 3, 5), week, v1beta1.CheckFailed, `"kube-apiserver-b" served at [fd00::1]:6443 expires in 3.0 days`},
		{"expired", served(-2), week, v1beta1.CheckFailed, "expired 2.0 days ago"},
		{"custom minimum", served(20), 30 * 24 * time.Hour, v1beta1.CheckFailed, "less than the required 30 days"},
		{"nothing served", nil, week, v1beta1.CheckPending, "no certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CertExpiry(tt.certs, now, tt.min)
			if got.Reason != RiskCertificateExpiring || got.Result != tt.result || !strings.Contains(got.Message, tt.want) {
				t.Errorf("CertExpiry = %+v, want %s with %q", got, tt.result, tt.want)
			}
		})
	}
}

func TestEndpointAddressesIsIPv6Safe(t *testing.T) {
	slices := []discoveryv1.EndpointSlice{{
		Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443)}, {Port: nil}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1", "fd00::2"}}},
	}, {
		Ports:     []discoveryv1.EndpointPort{{Port: ptr.To[int32](9345)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.3"}}},
	}}
	got := strings.Join(EndpointAddresses(slices), " ")
	if got != "10.0.0.1:6443 [fd00::2]:6443 10.0.0.3:9345" {
		t.Errorf("EndpointAddresses = %q", got)
	}
}

type fakeKubelet map[string]string

func (f fakeKubelet) Get(_ context.Context, node, path string) ([]byte, error) {
	body, ok := f[node+"/"+path]
	if !ok {
		return nil, errors.New("connection refused")
	}
	return []byte(body), nil
}

func TestGatherNodeDisk(t *testing.T) {
	k := fakeKubelet{
		"img/stats/summary":    `{"node":{"fs":{"capacityBytes":100,"usedBytes":10},"runtime":{"imageFs":{"capacityBytes":200,"usedBytes":20}}}}`,
		"img/configz":          `{"kubeletconfig":{"imageGCHighThresholdPercent":70}}`,
		"node/stats/summary":   `{"node":{"fs":{"capacityBytes":100,"usedBytes":10}}}`,
		"node/configz":         `{"kubeletconfig":{}}`,
		"bad/stats/summary":    `not json`,
		"nofs/stats/summary":   `{"node":{}}`,
		"noconf/stats/summary": `{"node":{"fs":{"capacityBytes":100,"usedBytes":10}}}`,
	}
	ctx := context.Background()
	d, err := GatherNodeDisk(ctx, k, "img")
	if err != nil || d.Filesystem != "imagefs" || d.CapacityBytes != 200 || d.UsedBytes != 20 || d.ImageGCHighThresholdPercent != 70 {
		t.Errorf("imagefs node: %+v, %v", d, err)
	}
	d, err = GatherNodeDisk(ctx, k, "node")
	if err != nil || d.Filesystem != "nodefs" || d.CapacityBytes != 100 || d.ImageGCHighThresholdPercent != DefaultImageGCHighThresholdPercent {
		t.Errorf("nodefs node: %+v, %v", d, err)
	}
	for node, want := range map[string]string{
		"bad":     `node "bad" returned an unreadable /stats/summary`,
		"nofs":    `node "nofs" reports no file system capacity`,
		"noconf":  `reading the kubelet's /configz of node "noconf"`,
		"missing": `reading the kubelet's /stats/summary of node "missing": connection refused`,
	} {
		if _, err := GatherNodeDisk(ctx, k, node); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("node %s: error %v, want %q", node, err, want)
		}
	}
}

func TestGatherServedCerts(t *testing.T) {
	c := cert("a", time.Now())
	dial := func(_ context.Context, addr string) ([]*x509.Certificate, error) {
		if addr == "down:1" {
			return nil, errors.New("refused")
		}
		return []*x509.Certificate{c, c}, nil
	}
	certs, errs := GatherServedCerts(context.Background(), dial, []string{"up:1", "down:1"})
	if len(certs) != 2 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "API server at down:1") {
		t.Errorf("certs %d, errs %v", len(certs), errs)
	}
}
