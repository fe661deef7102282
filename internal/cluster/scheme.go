package cluster

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	upgradev1beta1 "github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/catalogv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/helmv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
)

// addToolkitKinds registers the UpgradePlan API and the foreign kinds.
func addToolkitKinds(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{
		upgradev1beta1.AddToScheme,
		harvesterv1beta1.AddToScheme,
		provisioningv1.AddToScheme,
		managementv3.AddToScheme,
		upgradev1.AddToScheme,
		capiv1beta1.AddToScheme,
		kubevirtv1.AddToScheme,
		longhornv1beta2.AddToScheme,
		catalogv1.AddToScheme,
		fleetv1alpha1.AddToScheme,
		helmv1.AddToScheme,
		apiextensionsv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// The toolkit's kinds join client-go's scheme, which client-go fills with
// every built-in kind as the process starts (the clientset and
// controller-runtime link it in any case): a scheme of its own held all of
// those a second time (about 1 MiB of the manager's peak, measured).
// Registered here, before any client can read the scheme.
func init() { utilruntime.Must(addToolkitKinds(clientgoscheme.Scheme)) }

// Scheme returns the scheme of the built-in kinds, the UpgradePlan API
// and every foreign kind the toolkit uses: client-go's, shared by every
// caller and read concurrently, so nothing may register into it.
func Scheme() *runtime.Scheme { return clientgoscheme.Scheme }
