package cluster_test

import (
	"context"
	"encoding/base64"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/jobtest"
)

// TestLatestHelmRelease reads Helm's release Secrets as `helm history`
// would: the newest revision (by number, not by name), its chart and
// computed values; an uncompressed release is read too.
func TestLatestHelmRelease(t *testing.T) {
	ctx := context.Background()
	ns := jobtest.Namespace(t, env.Client)
	if rel, err := cluster.LatestHelmRelease(ctx, env.Client, ns, "fleet"); rel != nil || err != nil {
		t.Fatalf("no release: %v, %v", rel, err)
	}
	for _, rev := range []int{1, 2, 10} {
		s, err := cluster.HelmReleaseSecret(&cluster.HelmRelease{Name: "fleet", Namespace: ns, Revision: rev,
			Info: cluster.HelmReleaseInfo{Status: "superseded"},
			Chart: cluster.HelmChart{Metadata: cluster.HelmChartMetadata{Name: "fleet", Version: "108.0.0+up0.14.0", AppVersion: "0.14.0"},
				Values: map[string]any{"image": map[string]any{"repository": "rancher/fleet", "tag": "v0.14.0"}, "debug": false}},
			Config: map[string]any{"image": map[string]any{"tag": "v0.14.1"}}})
		if err != nil {
			t.Fatal(err)
		}
		if rev == 10 {
			s.Labels["status"] = cluster.HelmStatusDeployed
		}
		must(t, env.Client.Create(ctx, s))
	}
	rel, err := cluster.LatestHelmRelease(ctx, env.Client, ns, "fleet")
	if err != nil || rel == nil {
		t.Fatalf("LatestHelmRelease: %v, %v", rel, err)
	}
	values := rel.Values()
	image, _ := values["image"].(map[string]any)
	if rel.Revision != 10 || rel.ChartRef() != "fleet-108.0.0+up0.14.0" || image["tag"] != "v0.14.1" || image["repository"] != "rancher/fleet" || values["debug"] != false {
		t.Errorf("revision %d, chart %s, values %v", rel.Revision, rel.ChartRef(), values)
	}

	plain := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sh.helm.release.v1.plain.v1", Labels: map[string]string{"owner": "helm", "name": "plain", "version": "1"}},
		Type: cluster.HelmReleaseSecretType,
		Data: map[string][]byte{"release": []byte(base64.StdEncoding.EncodeToString([]byte(`{"name":"plain","version":1,"info":{"status":"deployed"},"chart":{"metadata":{"name":"plain","version":"1.0.0"}}}`)))}}
	must(t, env.Client.Create(ctx, plain))
	if rel, err := cluster.LatestHelmRelease(ctx, env.Client, ns, "plain"); err != nil || rel.Info.Status != "deployed" || rel.ChartRef() != "plain-1.0.0" {
		t.Errorf("an uncompressed release: %+v, %v", rel, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
