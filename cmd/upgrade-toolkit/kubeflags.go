package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// clusterFlags are kubectl's flags for reaching a cluster (--kubeconfig,
// --context, --cluster, --user, -n, --as, --request-timeout, ...), read as
// kubectl reads them: the flags, then $KUBECONFIG or ~/.kube/config, then
// the pod's service account.
type clusterFlags struct {
	kube *genericclioptions.ConfigFlags
}

// addClusterFlags gives cmd kubectl's flags for reaching a cluster; -n
// only to the commands people run (the manager's --namespace is where it
// runs, and the jobs act where their plan says).
func addClusterFlags(cmd *cobra.Command, namespace bool) *clusterFlags {
	kube := genericclioptions.NewConfigFlags(true)
	kube.CacheDir = nil // nothing here uses discovery's cache
	if !namespace {
		kube.Namespace = nil
	}
	kube.AddFlags(cmd.Flags())
	return &clusterFlags{kube: kube}
}

// config is the client configuration the flags name.
func (f *clusterFlags) config() (*rest.Config, error) {
	cfg, err := f.kube.ToRESTConfig()
	if err != nil {
		return nil, &exitError{code: exitUnreachable, err: fmt.Errorf("no cluster to ask: %w (pass --kubeconfig and --context, or set KUBECONFIG)", err)}
	}
	// With no kubeconfig at all client-go would try localhost:8080; say
	// what is missing instead.
	if raw, err := f.kube.ToRawKubeConfigLoader().RawConfig(); err == nil && len(raw.Contexts) == 0 &&
		*f.kube.APIServer == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, &exitError{code: exitUnreachable, err: errors.New("no cluster to ask: no kubeconfig (pass --kubeconfig, set KUBECONFIG or write ~/.kube/config)")}
	}
	// As controller-runtime's GetConfig: client-go's default of 5 requests
	// a second would throttle the manager.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 20, 30
	}
	return cfg, nil
}

// client is a client of the toolkit's scheme that reads from the API
// server directly.
func (f *clusterFlags) client() (client.Client, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: cluster.Scheme()})
}

// check refuses, as usage errors, a --request-timeout that is no duration
// and a namespace the command cannot act in: plans and their logs are
// cluster-scoped and the toolkit works in harvester-system, so -n may name
// only that one (kubectl habits often add it). A context's own namespace
// is no choice of the user's here and is ignored.
func (f *clusterFlags) check(cmd *cobra.Command) error {
	if t := *f.kube.Timeout; t != "" {
		if _, err := strconv.Atoi(t); err != nil {
			if _, err := time.ParseDuration(t); err != nil {
				return usageError("--request-timeout %q: give a duration such as 30s or 2m (0 waits forever)", t)
			}
		}
	}
	flag := cmd.Flags().Lookup("namespace")
	if f.kube.Namespace == nil || flag == nil || !flag.Changed || *f.kube.Namespace == cluster.HarvesterNamespace {
		return nil
	}
	return usageError("-n %q: UpgradePlans and UpgradeLogs are cluster-scoped and the toolkit works in %s; leave out -n or give -n %s",
		*f.kube.Namespace, cluster.HarvesterNamespace, cluster.HarvesterNamespace)
}
