package webhook_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/manager"
	"github.com/harvester/upgrade-toolkit/internal/webhook"
)

func certSecret(t *testing.T) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(ctxFor(t), client.ObjectKey{Namespace: opts.Namespace, Name: webhook.CertSecretName}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func caBundle(t *testing.T) []byte {
	t.Helper()
	vwc := &admissionv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctxFor(t), client.ObjectKey{Name: opts.Webhook.ConfigurationName}, vwc); err != nil {
		t.Fatal(err)
	}
	return vwc.Webhooks[0].ClientConfig.CABundle
}

func parseCert(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(pemBytes)
	if b == nil {
		t.Fatalf("no PEM block in %q", pemBytes)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// servedCert is the certificate the webhook server presents now.
func servedCert() (*x509.Certificate, error) {
	addr := net.JoinHostPort(opts.Webhook.Host, strconv.Itoa(opts.Webhook.Port))
	// No verification: this only reads the certificate; the checks verify it.
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// checkCertsInPlace: the Secret's serving certificate is valid for long,
// signed by its CA, written to the cert dir, served, and its CA is the
// webhook configuration's caBundle.
func checkCertsInPlace(s *corev1.Secret, bundle []byte) error {
	ca, cert := s.Data["ca.crt"], s.Data["tls.crt"]
	if !bytes.Equal(bundle, ca) {
		return fmt.Errorf("caBundle is not the Secret's CA")
	}
	onDisk, err := os.ReadFile(filepath.Join(opts.Webhook.CertDir, "tls.crt"))
	if err != nil || !bytes.Equal(onDisk, cert) {
		return fmt.Errorf("cert dir does not hold the Secret's certificate (%v)", err)
	}
	served, err := servedCert()
	if err != nil {
		return err
	}
	b, _ := pem.Decode(cert)
	if b == nil || !bytes.Equal(served.Raw, b.Bytes) {
		return fmt.Errorf("the server does not serve the Secret's certificate yet")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	if _, err := served.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: pool}); err != nil {
		return fmt.Errorf("served certificate does not verify against the CA: %w", err)
	}
	if left := time.Until(served.NotAfter); left < 300*24*time.Hour {
		return fmt.Errorf("served certificate expires in %s", left)
	}
	return nil
}

func TestNearExpiryCertificatesAreReplacedAtStart(t *testing.T) {
	s := certSecret(t)
	if bytes.Equal(s.Data["ca.crt"], seededCA) {
		t.Fatal("the near-expiry CA found at start is still in the Secret")
	}
	eventually(t, 30*time.Second, func() error { return checkCertsInPlace(certSecret(t), caBundle(t)) })
	cert := parseCert(t, certSecret(t).Data["tls.crt"])
	service := webhook.DefaultServiceName + "." + cluster.HarvesterNamespace + ".svc"
	for _, name := range []string{service, service + ".cluster.local", "localhost"} {
		if !slices.Contains(cert.DNSNames, name) {
			t.Errorf("serving certificate names %v, not %s", cert.DNSNames, name)
		}
	}
}

func TestCertificatesAreRotatedWhileRunning(t *testing.T) {
	// A Secret that got close to expiry while the manager runs (here:
	// written by hand).
	data, err := issue(10 * 24 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s := certSecret(t)
	s.Data = data
	if err := env.Client.Update(ctxFor(t), s); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() error {
		s := certSecret(t)
		if bytes.Equal(s.Data["ca.crt"], data["ca.crt"]) {
			return fmt.Errorf("the near-expiry CA is still in the Secret")
		}
		return checkCertsInPlace(s, caBundle(t))
	})
	// The API server trusts the new CA: the webhook still answers.
	p := plan("after-rotation")
	p.Annotations = map[string]string{v1beta1.AnnotationAllowDeletion: "perhaps"}
	eventually(t, 30*time.Second, func() error {
		err := env.Client.Create(ctxFor(t), p)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(`must be "true" or "false"`)) {
			return fmt.Errorf("the webhook did not answer after rotation: %v", err)
		}
		return nil
	})
}

func TestAResetCABundleIsPatchedAgain(t *testing.T) {
	vwc := &admissionv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctxFor(t), client.ObjectKey{Name: opts.Webhook.ConfigurationName}, vwc); err != nil {
		t.Fatal(err)
	}
	vwc.Webhooks[0].ClientConfig.CABundle = nil
	if err := env.Client.Update(ctxFor(t), vwc); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if !bytes.Equal(caBundle(t), certSecret(t).Data["ca.crt"]) {
			return fmt.Errorf("caBundle not restored")
		}
		return nil
	})
}

func TestDisabledWebhookSetsNothingUp(t *testing.T) {
	disabled := opts
	disabled.Namespace = "default"
	disabled.Webhook.Enabled = false
	if _, err := manager.New(env.Config, disabled); err != nil {
		t.Fatalf("manager without webhooks: %v", err)
	}
	err := env.Client.Get(ctxFor(t), client.ObjectKey{Namespace: "default", Name: webhook.CertSecretName}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("with webhooks disabled the certificate Secret was touched: %v", err)
	}
}
