// Package webhook is the admission webhook of UpgradePlans: it refuses plans
// that cannot succeed or would put data at risk, changes that a running
// upgrade cannot take, and deletions at the wrong moment. It gathers facts
// and asks internal/preflight for the verdict. The manager serves it over
// TLS with certificates it issues and rotates itself.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
)

// Defaults of the manager's webhook flags, matching config/webhook.
const (
	DefaultServiceName       = "upgrade-toolkit-webhook-service"
	DefaultConfigurationName = "upgrade-toolkit-validating-webhook-configuration"
)

// Options configure the admission webhook server and its certificates.
type Options struct {
	// Enabled serves the webhooks; off for local runs (ENABLE_WEBHOOKS=false).
	Enabled bool
	// Host is the address the server binds, "" for every interface. A host
	// name (not an IP) is also written into the serving certificate.
	Host string
	// Port is the port the server listens on.
	Port int
	// CertDir is where the manager writes the serving certificate and key.
	CertDir string
	// ServiceName is the Service in the manager's namespace in front of the
	// server; the serving certificate is issued for it.
	ServiceName string
	// ConfigurationName is the ValidatingWebhookConfiguration whose caBundle
	// the manager keeps current.
	ConfigurationName string
	// Alerts, when set, gives the alerts firing, for the risk
	// CriticalAlertFiring.
	Alerts preflight.AlertSource
}

// Setup adds the UpgradePlan webhook and its certificate rotation to the
// manager, unless opts.Enabled is false. namespace is the manager's, which
// holds the certificate Secret; upgradeLog says whether the manager captures
// the upgrade's logs (a plan that asks for them is warned when it does
// not). The webhook is registered, and its server started, once the
// certificates are in place and the caBundle patched; until then the
// manager's readiness check fails.
func Setup(mgr ctrl.Manager, namespace string, opts Options, upgradeLog bool) error {
	if !opts.Enabled {
		return nil
	}
	if namespace == "" || opts.ServiceName == "" || opts.ConfigurationName == "" || opts.CertDir == "" {
		return errors.New("the webhook needs the manager's namespace, its Service name, its ValidatingWebhookConfiguration name and a certificate directory")
	}
	certsReady, err := setupCertificates(mgr, namespace, opts)
	if err != nil {
		return err
	}
	served := make(chan struct{})
	register := func() error {
		err := ctrl.NewWebhookManagedBy(mgr).For(&v1beta1.UpgradePlan{}).
			WithValidator(&planValidator{reader: mgr.GetAPIReader(), configuration: opts.ConfigurationName, upgradeLog: upgradeLog, alerts: opts.Alerts}).
			Complete()
		close(served)
		return err
	}
	if err := mgr.Add(&afterReady{ready: certsReady, run: register}); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("webhook", func(req *http.Request) error {
		select {
		case <-served:
			return mgr.GetWebhookServer().StartedChecker()(req)
		default:
			return errors.New("the webhook's certificates are not in place yet")
		}
	})
}

// afterReady runs a function once ready is closed, on every replica.
type afterReady struct {
	ready <-chan struct{}
	run   func() error
}

func (a *afterReady) Start(ctx context.Context) error {
	select {
	case <-a.ready:
		return a.run()
	case <-ctx.Done():
		return nil
	}
}

func (a *afterReady) NeedLeaderElection() bool { return false }

// The webhook configuration and the permissions its checks need: they read
// (see preflight.GatherAdmissionFacts) straight from the API server.
//
// +kubebuilder:webhook:path=/validate-management-harvesterhci-io-v1beta1-upgradeplan,mutating=false,failurePolicy=fail,sideEffects=None,groups=management.harvesterhci.io,resources=upgradeplans,verbs=create;update;delete,versions=v1beta1,name=vupgradeplan.management.harvesterhci.io,admissionReviewVersions=v1,timeoutSeconds=30
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans,verbs=list
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=harvester-system,resources=versions;virtualmachineimages,verbs=get
// +kubebuilder:rbac:groups=harvesterhci.io,resources=virtualmachinebackups;schedulevmbackups;addons,verbs=list
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=list
// +kubebuilder:rbac:groups=provisioning.cattle.io,namespace=fleet-local,resources=clusters,verbs=get
// +kubebuilder:rbac:groups=cluster.x-k8s.io,namespace=fleet-local,resources=machines,verbs=list
// +kubebuilder:rbac:groups=management.cattle.io,namespace=fleet-local,resources=managedcharts,verbs=list
// +kubebuilder:rbac:groups=longhorn.io,namespace=longhorn-system,resources=volumes,verbs=list
// +kubebuilder:rbac:groups=cluster.x-k8s.io,namespace=fleet-local,resources=clusters,verbs=get
// +kubebuilder:rbac:groups=fleet.cattle.io,namespace=fleet-local,resources=bundles,verbs=list
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=kube-node-lease,resources=leases,verbs=list
// +kubebuilder:rbac:groups="",resources=pods,verbs=list

// planValidator admits UpgradePlans.
type planValidator struct {
	// reader goes to the API server: admission wants the current state.
	reader client.Reader
	// configuration is the ValidatingWebhookConfiguration, named in advice.
	configuration string
	// upgradeLog: the manager captures the upgrade's logs.
	upgradeLog bool
	// alerts gives the alerts firing; nil when no Alertmanager is set.
	alerts preflight.AlertSource
}

var _ admission.CustomValidator = &planValidator{}

func (v *planValidator) ValidateCreate(ctx context.Context, obj runtime.Object) (admission.Warnings, error) {
	plan, err := asPlan(obj)
	if err != nil {
		return nil, err
	}
	var facts *preflight.AdmissionFacts
	if !preflight.AdmissionChecksSkipped(plan) && !preflight.AdmissionChecksDeferred(plan) {
		if facts, err = preflight.GatherAdmissionFacts(ctx, v.reader, plan, v.alerts, time.Now()); err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("reading the cluster's state to check the plan: %w; "+
				"retry, or annotate the plan with %s=\"true\" to create it unchecked", err, v1beta1.AnnotationSkipWebhook))
		}
	}
	warnings, err := verdict(plan, preflight.AdmitCreate(plan, facts))
	return append(warnings, logWarnings(plan, v.upgradeLog)...), err
}

// logWarnings warns when a plan asks for its logs and the manager keeps
// none.
func logWarnings(plan *v1beta1.UpgradePlan, upgradeLog bool) admission.Warnings {
	if plan.Spec.LogEnabled != nil && *plan.Spec.LogEnabled && !upgradeLog {
		return admission.Warnings{"spec.logEnabled is true, but the manager runs with --upgrade-log=false (chart value upgradeLog.enabled): " +
			"no log of this plan will be kept; enable it in the chart before the upgrade starts"}
	}
	return nil
}

func (v *planValidator) ValidateUpdate(ctx context.Context, oldObj, newObj runtime.Object) (admission.Warnings, error) {
	before, err := asPlan(oldObj)
	if err != nil {
		return nil, err
	}
	after, err := asPlan(newObj)
	if err != nil {
		return nil, err
	}
	var nodes []string
	if preflight.UpdateNeedsNodes(before, after) {
		if nodes, err = preflight.AdmissionManagedNodeNames(ctx, v.reader); err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("reading the managed nodes to check pauseNodes: %w; retry", err))
		}
	}
	return verdict(after, preflight.AdmitUpdate(before, after, nodes))
}

func (v *planValidator) ValidateDelete(_ context.Context, obj runtime.Object) (admission.Warnings, error) {
	plan, err := asPlan(obj)
	if err != nil {
		return nil, err
	}
	return verdict(plan, preflight.AdmitDelete(plan, v.configuration))
}

func asPlan(obj runtime.Object) (*v1beta1.UpgradePlan, error) {
	plan, ok := obj.(*v1beta1.UpgradePlan)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an UpgradePlan, got %T", obj))
	}
	return plan, nil
}

// verdict turns a result into the answer: a 422 Invalid listing every
// failure, with the warnings either way.
func verdict(plan *v1beta1.UpgradePlan, r preflight.AdmissionResult) (admission.Warnings, error) {
	if r.Allowed() {
		return r.Warnings(), nil
	}
	gk := v1beta1.GroupVersion.WithKind("UpgradePlan").GroupKind()
	return r.Warnings(), apierrors.NewInvalid(gk, plan.Name, r.Errors())
}
