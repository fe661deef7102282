package cluster

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Helm keeps each revision of a release in a Secret of the release's
// namespace, named sh.helm.release.v1.<release>.v<revision>, of type
// helm.sh/release.v1, labelled owner=helm, name=<release>,
// version=<revision> and status=<status>. Its data "release" is the release
// as JSON, gzipped, then base64-encoded (on top of the Secret's own
// encoding).
const (
	HelmReleaseSecretType = "helm.sh/release.v1"
	helmReleaseKey        = "release"
	labelHelmOwner        = "owner"
	labelHelmName         = "name"
	labelHelmVersion      = "version"
	labelHelmStatus       = "status"
	// HelmStatusDeployed is the status of a release's current revision.
	HelmStatusDeployed = "deployed"
)

// HelmRelease is one revision of a Helm release, reduced to what the
// toolkit reads: the chart and app versions, the status and the values.
type HelmRelease struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Revision is Helm's version of the release (1, 2, ...).
	Revision int             `json:"version"`
	Info     HelmReleaseInfo `json:"info"`
	Chart    HelmChart       `json:"chart"`
	// Config holds the values given to this revision (helm get values).
	Config map[string]any `json:"config,omitempty"`
}

// HelmReleaseInfo is the revision's status and time.
type HelmReleaseInfo struct {
	// Status is deployed, superseded, failed, pending-install,
	// pending-upgrade, pending-rollback, ...
	Status       string    `json:"status"`
	LastDeployed time.Time `json:"last_deployed"`
}

// HelmChart is the chart of a revision.
type HelmChart struct {
	Metadata HelmChartMetadata `json:"metadata"`
	// Values are the chart's default values (values.yaml).
	Values map[string]any `json:"values,omitempty"`
}

// HelmChartMetadata names the chart.
type HelmChartMetadata struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	AppVersion string `json:"appVersion,omitempty"`
}

// ChartRef is <chart>-<version>, as `helm history` shows the chart.
func (r *HelmRelease) ChartRef() string {
	return r.Chart.Metadata.Name + "-" + r.Chart.Metadata.Version
}

// Values are the revision's computed values (helm get values --all): the
// chart's defaults with the given values merged over them.
func (r *HelmRelease) Values() map[string]any {
	return mergeValues(r.Chart.Values, r.Config)
}

// mergeValues merges over into base, maps recursively, as Helm coalesces
// values; neither argument is changed.
func mergeValues(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = mergeValues(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// HelmReleaseSecret is the Secret Helm keeps for a revision.
func HelmReleaseSecret(r *HelmRelease) (*corev1.Secret, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: r.Namespace,
			Name:      fmt.Sprintf("sh.helm.release.v1.%s.v%d", r.Name, r.Revision),
			Labels: map[string]string{
				labelHelmOwner: "helm", labelHelmName: r.Name,
				labelHelmVersion: strconv.Itoa(r.Revision), labelHelmStatus: r.Info.Status,
			},
		},
		Type: HelmReleaseSecretType,
		Data: map[string][]byte{helmReleaseKey: []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))},
	}, nil
}

// DecodeHelmRelease reads a revision from its Secret.
func DecodeHelmRelease(s *corev1.Secret) (*HelmRelease, error) {
	raw, err := base64.StdEncoding.DecodeString(string(s.Data[helmReleaseKey]))
	if err != nil {
		return nil, fmt.Errorf("reading the Helm release Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if len(raw) > 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("reading the Helm release Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("reading the Helm release Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	r := &HelmRelease{}
	if err := json.Unmarshal(raw, r); err != nil {
		return nil, fmt.Errorf("reading the Helm release Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return r, nil
}

// LatestHelmRelease returns the newest revision of a release (the last line
// of `helm history`), nil when the release does not exist.
func LatestHelmRelease(ctx context.Context, c client.Reader, namespace, name string) (*HelmRelease, error) {
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace(namespace), client.MatchingLabels{labelHelmOwner: "helm", labelHelmName: name}); err != nil {
		return nil, fmt.Errorf("listing the revisions of Helm release %s/%s: %w", namespace, name, err)
	}
	var newest *corev1.Secret
	newestRev := -1
	for i := range secrets.Items {
		rev, err := strconv.Atoi(secrets.Items[i].Labels[labelHelmVersion])
		if err == nil && rev > newestRev {
			newest, newestRev = &secrets.Items[i], rev
		}
	}
	if newest == nil {
		return nil, nil
	}
	return DecodeHelmRelease(newest)
}
