package webhook

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CertSecretName is the Secret in the manager's namespace that holds the
// webhook's CA and serving certificate, shared by every replica.
const CertSecretName = "upgrade-toolkit-webhook-server-cert"

// The files the webhook server reads from its certificate directory, as the
// Secret names them.
const (
	certFile = "tls.crt"
	keyFile  = "tls.key"
)

// certRotatorName names the rotation controller; controller names are
// unique per process, so one manager per process serves the webhook.
const certRotatorName = "webhook-cert-rotator"

// certResync re-delivers the Secret to the certificate writer, which
// rewrites files that went missing or failed to be written.
const certResync = time.Minute

// The permissions the certificate rotation needs. cert-controller's rotator
// watches every Secret of the manager's namespace and every webhook
// configuration, through a cache of its own.
//
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=secrets,verbs=list;watch;create;update
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=list;watch;update

// setupCertificates makes the manager issue and rotate the webhook's
// certificates with cert-controller's rotator: a CA and a serving
// certificate for the webhook Service, kept in CertSecretName, renewed well
// before they expire, with the CA written into the caBundle of the
// ValidatingWebhookConfiguration. Every replica copies the Secret's
// certificate into its certificate directory. The returned channel is
// closed once the files are there and the caBundle is patched.
func setupCertificates(mgr ctrl.Manager, namespace string, wo Options) (<-chan struct{}, error) {
	key := types.NamespacedName{Namespace: namespace, Name: CertSecretName}
	// The rotator fills the Secret but does not create it.
	if err := ensureSecret(mgr.GetClient(), key); err != nil {
		return nil, err
	}
	service := fmt.Sprintf("%s.%s.svc", wo.ServiceName, namespace)
	extra := []string{service + ".cluster.local"}
	if wo.Host != "" && net.ParseIP(wo.Host) == nil {
		extra = append(extra, wo.Host)
	}
	ready := make(chan struct{})
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      key,
		CertDir:        wo.CertDir,
		CAName:         "upgrade-toolkit-webhook-ca",
		CAOrganization: "harvester",
		DNSName:        service,
		ExtraDNSNames:  extra,
		IsReady:        ready,
		Webhooks:       []rotator.WebhookInfo{{Name: wo.ConfigurationName, Type: rotator.Validating}},
		FieldOwner:     "upgrade-toolkit",
		ControllerName: certRotatorName,
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the webhook's certificate rotation: %w", err)
	}
	w, err := newCertWriter(mgr, key, wo.CertDir)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(w); err != nil {
		return nil, err
	}
	return ready, nil
}

func ensureSecret(c client.Client, key types.NamespacedName) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Type: corev1.SecretTypeOpaque}
	if err := c.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the webhook certificate Secret %s: %w", key, err)
	}
	return nil
}

// certWriter copies the serving certificate and key from the Secret into the
// webhook server's certificate directory whenever the Secret changes; the
// server notices the new files and serves the new certificate.
type certWriter struct {
	cache cache.Cache
	key   types.NamespacedName
	dir   string
}

func newCertWriter(mgr ctrl.Manager, key types.NamespacedName, dir string) (*certWriter, error) {
	// A cache of this one Secret rather than of every Secret in the cluster.
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:     mgr.GetScheme(),
		Mapper:     mgr.GetRESTMapper(),
		SyncPeriod: ptr.To(certResync),
		ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {
			Namespaces: map[string]cache.Config{key.Namespace: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", key.Name),
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the webhook certificate cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, err
	}
	return &certWriter{cache: c, key: key, dir: dir}, nil
}

func (w *certWriter) Start(ctx context.Context) error {
	informer, err := w.cache.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		return fmt.Errorf("watching the webhook certificate Secret: %w", err)
	}
	log := ctrl.Log.WithName("webhook-cert-writer")
	write := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok || s.Namespace != w.key.Namespace || s.Name != w.key.Name {
			return
		}
		if err := writeCertFiles(w.dir, s.Data); err != nil {
			log.Error(err, "writing the webhook certificate; retrying on the next resync", "dir", w.dir)
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    write,
		UpdateFunc: func(_, obj any) { write(obj) },
	}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func (w *certWriter) NeedLeaderElection() bool { return false }

// writeCertFiles writes the certificate and key of a filled Secret into dir,
// each file atomically and only when it differs, the key first.
func writeCertFiles(dir string, data map[string][]byte) error {
	if len(data[certFile]) == 0 || len(data[keyFile]) == 0 {
		return nil // not issued yet
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, name := range []string{keyFile, certFile} {
		path := filepath.Join(dir, name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data[name]) {
			continue
		}
		if err := writeFileAtomically(path, data[name]); err != nil {
			return err
		}
	}
	return nil
}

func writeFileAtomically(path string, content []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(content); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
