package upgradelog

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// Redacted replaces every value of a Secret in an archive.
const Redacted = "REDACTED"

// ArchiveFiles are the files an archive holds besides the logs (under
// logs/<namespace>/<pod>/<container>.log), all under a directory named
// after the plan.
var ArchiveFiles = []string{
	"upgradeplan.yaml", "events.yaml", "upgradelog.yaml", "jobs.yaml", "plans.yaml",
	"nodes.txt", "vm-ledger.txt", "version.yaml", "release-metadata.yaml", "machine-plan-secrets.yaml", "toolkit-version.txt",
	"nodes.yaml", "vms.yaml", "vmis.yaml", "longhorn-volumes.yaml", "provisioning-cluster.yaml", "machines.yaml", ManagerLogFile,
}

// Archive writes a support bundle of the plan as a .tar.gz to w: the plan,
// its events, every captured log, the Jobs and system-upgrade-controller
// Plans still there, each node's timeline, the Harvester Version, the
// release metadata, Rancher's machine-plan Secrets with their data redacted
// (their annotations are the drain-hook handshake), the toolkit's version,
// the cluster's objects the upgrade moves (clusterObjects) and the manager's
// recent log (managerLog; nil when there is none to read). No Secret value
// is ever written. Missing parts (no UpgradeLog, a Version deleted, a kind
// the cluster does not serve) are noted in their file, not fatal.
func Archive(ctx context.Context, c client.Reader, managerLog ManagerLog, plan, toolkitVersion string, now time.Time, w io.Writer) error {
	p := &v1beta1.UpgradePlan{}
	if err := c.Get(ctx, client.ObjectKey{Name: plan}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("there is no UpgradePlan %s (kubectl get upgradeplans lists them)", plan)
		}
		return err
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	add := func(name string, data []byte) error {
		return tw.WriteHeader(&tar.Header{Name: path.Join(plan, name), Mode: 0o644, Size: int64(len(data)), ModTime: now, Typeflag: tar.TypeReg}) //nolint:gosec // a name built from object names
	}
	write := func(name string, data []byte) error {
		if err := add(name, data); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	asYAML := func(name string, obj any) error {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		return write(name, b)
	}
	note := func(name, why string) error { return write(name, []byte("# "+why+"\n")) }

	if err := asYAML("upgradeplan.yaml", withKind(p)); err != nil {
		return err
	}
	events := &corev1.EventList{}
	if err := c.List(ctx, events, client.MatchingFields{"involvedObject.name": plan}); err != nil {
		return fmt.Errorf("listing the plan's events: %w", err)
	}
	events.Items = filterEvents(events.Items)
	if err := asYAML("events.yaml", events.Items); err != nil {
		return err
	}
	ul, ulErr := Get(ctx, c, plan)
	if ulErr != nil {
		if err := note("upgradelog.yaml", ulErr.Error()); err != nil {
			return err
		}
		ul = &v1beta1.UpgradeLog{}
	} else if err := asYAML("upgradelog.yaml", withKind(ul)); err != nil {
		return err
	}
	for _, l := range ul.Status.Logs {
		text, err := Text(ctx, c, l)
		if err != nil {
			text = []byte("# " + err.Error() + "\n")
		}
		if err := write(path.Join("logs", l.Namespace, l.Pod, l.Container+".log"), text); err != nil {
			return err
		}
	}
	var jobs []batchv1.Job
	var sucPlans []upgradev1.Plan
	sel := client.MatchingLabels{v1beta1.LabelUpgradePlan: plan}
	for _, ns := range Namespaces {
		jl := &batchv1.JobList{}
		if err := c.List(ctx, jl, client.InNamespace(ns), sel); err != nil {
			return fmt.Errorf("listing the plan's Jobs in %s: %w", ns, err)
		}
		jobs = append(jobs, jl.Items...)
	}
	pl := &upgradev1.PlanList{}
	if err := c.List(ctx, pl, client.InNamespace(cluster.CattleNamespace), sel); err != nil && !meta.IsNoMatchError(err) {
		return fmt.Errorf("listing the plan's system-upgrade-controller Plans: %w", err)
	}
	sucPlans = pl.Items
	if err := asYAML("jobs.yaml", jobs); err != nil {
		return err
	}
	if err := asYAML("plans.yaml", sucPlans); err != nil {
		return err
	}
	if err := write("nodes.txt", []byte(Timeline(p, ul.Status.Logs))); err != nil {
		return err
	}
	if err := writeLedger(ctx, c, plan, write, note); err != nil {
		return err
	}
	if p.Spec.Version == nil {
		if err := note("version.yaml", "the plan names no Version: it upgrades from spec.image "+ptrString(p.Spec.Image)); err != nil {
			return err
		}
	} else {
		v := &harvesterv1beta1.Version{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: *p.Spec.Version}, v); err != nil {
			if err := note("version.yaml", fmt.Sprintf("Version %s/%s: %v", cluster.HarvesterNamespace, *p.Spec.Version, err)); err != nil {
				return err
			}
		} else if err := asYAML("version.yaml", withKind(v)); err != nil {
			return err
		}
	}
	if p.Status.ReleaseMetadata == nil {
		if err := note("release-metadata.yaml", "the plan has not read the release's metadata (status.releaseMetadata)"); err != nil {
			return err
		}
	} else if err := asYAML("release-metadata.yaml", p.Status.ReleaseMetadata); err != nil {
		return err
	}
	secrets, err := machinePlanSecrets(ctx, c)
	if err != nil {
		return err
	}
	if err := asYAML("machine-plan-secrets.yaml", secrets); err != nil {
		return err
	}
	if err := write("toolkit-version.txt", []byte(toolkitVersion+"\n")); err != nil {
		return err
	}
	for _, o := range clusterObjects {
		obj, err := readClusterObject(ctx, c, o.gvk, o.namespace, o.name)
		if err != nil {
			err = note(o.file, err.Error())
		} else {
			err = asYAML(o.file, obj)
		}
		if err != nil {
			return err
		}
	}
	if managerLog == nil {
		err = note(ManagerLogFile, "the manager's log was not read: no manager pod to read (it runs in the process that wrote this bundle)")
	} else if text, lerr := managerLog(ctx); lerr != nil {
		err = note(ManagerLogFile, lerr.Error())
	} else {
		err = write(ManagerLogFile, text)
	}
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// writeLedger writes the plan's VM ledger as vm-ledger.txt: each node's
// counts from the plan's status are in upgradeplan.yaml, every VM's record
// is here.
func writeLedger(ctx context.Context, c client.Reader, plan string, write func(string, []byte) error, note func(string, string) error) error {
	l, _, err := vmledger.Read(ctx, c, plan)
	switch {
	case err != nil:
		return note("vm-ledger.txt", fmt.Sprintf("reading the VM ledger %s: %v", vmledger.Key(plan), err))
	case l == nil:
		return note("vm-ledger.txt", fmt.Sprintf("the plan has no VM ledger %s (it has not started, or started before the toolkit kept one)", vmledger.Key(plan)))
	}
	head := fmt.Sprintf("# the VM ledger %s: %d VMs recorded at %s, one line each, then what happened to it\n", vmledger.Key(plan), len(l.Records), l.Started.UTC().Format(time.RFC3339))
	return write("vm-ledger.txt", append([]byte(head), vmledger.Format(l)...))
}

// machinePlanSecrets are Rancher's machine-plan Secrets with every value
// redacted: their annotations record the drain-hook handshake.
func machinePlanSecrets(ctx context.Context, c client.Reader) ([]corev1.Secret, error) {
	sl := &corev1.SecretList{}
	if err := c.List(ctx, sl, client.InNamespace(cluster.FleetLocalNamespace)); err != nil {
		return nil, fmt.Errorf("listing Rancher's machine-plan Secrets: %w", err)
	}
	var out []corev1.Secret
	for _, s := range sl.Items {
		if s.Type != cluster.MachinePlanSecretType {
			continue
		}
		out = append(out, Redact(s))
	}
	return out, nil
}

// Redact returns the Secret with its keys kept and each value replaced by
// Redacted (in stringData, so that it reads as such), and its managed
// fields and last-applied annotation, which may quote values, dropped.
func Redact(s corev1.Secret) corev1.Secret {
	s = *s.DeepCopy()
	s.ManagedFields = nil
	delete(s.Annotations, corev1.LastAppliedConfigAnnotation)
	redacted := map[string]string{}
	for k := range s.Data {
		redacted[k] = Redacted
	}
	for k := range s.StringData {
		redacted[k] = Redacted
	}
	s.Data, s.StringData = nil, redacted
	return s
}

// filterEvents keeps the plan's own events, oldest first.
func filterEvents(events []corev1.Event) []corev1.Event {
	var out []corev1.Event
	for _, e := range events {
		if e.InvolvedObject.Kind == "UpgradePlan" {
			e.ManagedFields = nil
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastTimestamp.Before(&out[j].LastTimestamp) })
	return out
}

// Timeline is each node's upgrade as the captured logs and the plan's
// status tell it: the pods that ran on the node, from their first to their
// last line, and the node's state now.
func Timeline(p *v1beta1.UpgradePlan, logs []v1beta1.CapturedLog) string {
	byNode := map[string][]v1beta1.CapturedLog{}
	for _, l := range logs {
		byNode[l.Node] = append(byNode[l.Node], l)
	}
	nodes := make([]string, 0, len(p.Status.NodeUpgradeStatuses))
	for n := range p.Status.NodeUpgradeStatuses {
		nodes = append(nodes, n)
	}
	for n := range byNode {
		if _, ok := p.Status.NodeUpgradeStatuses[n]; !ok && n != "" {
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "%s\n", n)
		entries := byNode[n]
		sort.SliceStable(entries, func(i, j int) bool {
			return entries[i].FirstTimestamp != nil && (entries[j].FirstTimestamp == nil || entries[i].FirstTimestamp.Before(entries[j].FirstTimestamp))
		})
		for _, l := range entries {
			first, last := "?", "?"
			if l.FirstTimestamp != nil {
				first = l.FirstTimestamp.UTC().Format(time.RFC3339)
			}
			if l.LastTimestamp != nil {
				last = l.LastTimestamp.UTC().Format(time.RFC3339)
			}
			what := l.Component
			if l.JobType != "" {
				what = l.JobType
			}
			fmt.Fprintf(&b, "  %s  %s  %-20s Job %s/%s (%d lines)\n", first, last, what, l.Namespace, l.Job, l.Lines)
		}
		if s, ok := p.Status.NodeUpgradeStatuses[n]; ok {
			since := "?"
			if s.LastTransitionTime != nil {
				since = s.LastTransitionTime.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(&b, "  %s  now %s", since, s.State)
			if s.Message != "" {
				fmt.Fprintf(&b, ": %s", s.Message)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// withKind sets the object's apiVersion and kind, which typed reads leave
// empty, so that the YAML can be applied or read by kubectl.
func withKind(obj client.Object) client.Object {
	obj = obj.DeepCopyObject().(client.Object)
	if gvks, _, err := cluster.Scheme().ObjectKinds(obj); err == nil && len(gvks) > 0 {
		obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	}
	obj.SetManagedFields(nil)
	return obj
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
