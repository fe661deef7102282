package phase_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// kubeletServer plays the kubelets of the nodes for the API server, which
// reaches them through its node proxy (stats, config) and for pod logs. The
// API server proxies only to global-unicast addresses, so it listens on the
// address the API server advertises, and the nodes publish it.
type kubeletServer struct {
	ip   string
	port int32
	// logs are the containers' logs by namespace/pod.
	logs map[string]string
}

func newKubeletServer(h *plantest.Harness, capacity, used uint64) *kubeletServer {
	h.T.Helper()
	var slices discoveryv1.EndpointSliceList
	h.Must(h.C.List(h.Ctx(), &slices, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}))
	if len(slices.Items) == 0 || len(slices.Items[0].Endpoints) == 0 {
		h.T.Fatal("the API server advertises no address")
	}
	k := &kubeletServer{ip: slices.Items[0].Endpoints[0].Addresses[0], logs: map[string]string{}}
	l, err := net.Listen("tcp", net.JoinHostPort(k.ip, "0"))
	h.Must(err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/stats/summary":
			_, _ = fmt.Fprintf(w, `{"node":{"fs":{"capacityBytes":%d,"usedBytes":%d}}}`, capacity, used)
		case p == "/configz":
			_, _ = fmt.Fprint(w, `{"kubeletconfig":{"imageGCHighThresholdPercent":85}}`)
		case strings.HasPrefix(p, "/containerLogs/"):
			// /containerLogs/<namespace>/<pod>/<container>
			parts := strings.Split(strings.TrimPrefix(p, "/containerLogs/"), "/")
			_, _ = fmt.Fprint(w, k.logs[parts[0]+"/"+parts[1]])
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Listener = l
	srv.StartTLS()
	h.T.Cleanup(srv.Close)
	port, err := strconv.Atoi(strings.TrimPrefix(srv.URL[strings.LastIndex(srv.URL, ":"):], ":"))
	h.Must(err)
	k.port = int32(port)
	return k
}

// serve makes the node reachable at the kubelet server.
func (k *kubeletServer) serve(h *plantest.Harness, node string) {
	h.T.Helper()
	n := &corev1.Node{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: node}, n))
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: k.ip}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = k.port
	h.Must(h.C.Status().Update(h.Ctx(), n))
}

// jobPod creates the pod a Job ran on a node, with its log.
func (k *kubeletServer) jobPod(h *plantest.Harness, namespace, job, node, log string) {
	h.T.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: job + "-x7k2p", Labels: map[string]string{batchv1.JobNameLabel: job}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "apply", Image: "x"}}},
	}
	h.Must(h.C.Create(h.Ctx(), pod))
	h.T.Cleanup(func() { _ = h.C.Delete(h.Ctx(), pod) })
	k.logs[namespace+"/"+pod.Name] = log
}

// TestDiskCheckReadsTheKubeletsThroughTheAPIServer: the pre-flight disk
// check reaches each kubelet through the API server's node proxy.
func TestDiskCheckReadsTheKubeletsThroughTheAPIServer(t *testing.T) {
	h := plantest.New(t)
	h.Cfg.Kubelet = nil // the manager's own: through the node proxy
	h.Restart()
	k := newKubeletServer(h, 100<<30, 80<<30)
	nodes := h.Harvester(1)
	k.serve(h, nodes[0])
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "node-1") || !strings.Contains(c.Message, "pre-flight check failed") {
		t.Errorf("failure %q does not report node-1's full disk", c.Message)
	}
}

// TestFailedJobsQuoteTheirLogs: a failed Job's failure message ends with
// the last lines of its pod's log, read through the API server.
func TestFailedJobsQuoteTheirLogs(t *testing.T) {
	tests := []struct {
		name string
		// fail plays the foreign side until a Job fails, with the given log.
		fail func(h *plantest.Harness, k *kubeletServer, plan string, nodes []string, log string)
	}{
		{name: "preload Job of system-upgrade-controller",
			fail: func(h *plantest.Harness, k *kubeletServer, plan string, nodes []string, log string) {
				job := h.SucJob(names.ImagePreloadPlan(plan), nodes[0])
				k.jobPod(h, cluster.CattleNamespace, job, nodes[0], log)
				h.FinishJob(cluster.CattleNamespace, job, false)
			},
		},
		{name: "cluster-upgrade Job",
			fail: func(h *plantest.Harness, k *kubeletServer, plan string, nodes []string, log string) {
				h.Preload(plan, nodes)
				h.WaitPhase(plan, v1beta1.PhaseClusterUpgrading)
				job := names.ClusterUpgradeJob(plan)
				k.jobPod(h, cluster.HarvesterNamespace, job, nodes[0], log)
				h.FinishJob(cluster.HarvesterNamespace, job, false)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := plantest.New(t)
			k := newKubeletServer(h, 200<<30, 40<<30)
			nodes := h.Harvester(1)
			k.serve(h, nodes[0])
			p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
			h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
			h.SetImported(names.ISOImage(p.Name), "True", "", "")
			h.ServeRepo(p.Name)
			h.WaitPhase(p.Name, v1beta1.PhaseImagePreloading)
			tt.fail(h, k, p.Name, nodes, "step 1 done\nerror: no space left on device")
			p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
			if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "last log lines:\nstep 1 done\nerror: no space left on device") {
				t.Errorf("failure %q does not quote the Job's log", c.Message)
			}
		})
	}
}
