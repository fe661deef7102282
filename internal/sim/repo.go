package sim

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/release"
)

// repoServer serves a release tree over HTTP on loopback, standing in for
// every repo Service of the cluster: http://<addr>/<namespace>/<service>/
// harvester-iso/<path> is what http://<service>.<namespace>.svc/
// harvester-iso/<path> would serve. Like a Service without ready endpoints,
// a repo whose Service has none answers 503. The release tree's paths are
// relative to release.RepoRoot.
type repoServer struct {
	addr string
	srv  *http.Server
}

// repoPrefix is where the repo serves the ISO's content.
var repoPrefix = strings.TrimPrefix(release.RepoRoot, "/")

func startRepoServer(tree fs.FS, ready func(context.Context, types.NamespacedName) bool) (*repoServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sim: the repo server cannot listen on loopback: %w", err)
	}
	files := http.FileServerFS(tree)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3)
		if len(parts) < 3 || !strings.HasPrefix(parts[2], repoPrefix) {
			http.NotFound(w, r)
			return
		}
		svc := types.NamespacedName{Namespace: parts[0], Name: parts[1]}
		if !ready(r.Context(), svc) {
			http.Error(w, fmt.Sprintf("no endpoints available for service %q", svc), http.StatusServiceUnavailable)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + strings.TrimPrefix(parts[2], repoPrefix)
		files.ServeHTTP(w, r2)
	})}
	go func() { _ = srv.Serve(ln) }()
	return &repoServer{addr: ln.Addr().String(), srv: srv}, nil
}

func (r *repoServer) baseURL(namespace, service string) string {
	return fmt.Sprintf("http://%s/%s/%s%s", r.addr, namespace, service, release.RepoRoot)
}

func (r *repoServer) stop() { _ = r.srv.Shutdown(context.Background()) }

// repoReady reports whether the repo Service can serve: the real
// EndpointSlice controller gave it a ready endpoint (a repo pod the real
// Deployment controller and scheduler placed, which kwok runs).
func (s *Sim) repoReady(ctx context.Context, svc types.NamespacedName) bool {
	var slices discoveryv1.EndpointSliceList
	if err := s.c.List(ctx, &slices, client.InNamespace(svc.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: svc.Name, labelEndpointSliceManagedBy: endpointSliceController,
	}); err != nil {
		return false
	}
	for _, es := range slices.Items {
		for _, ep := range es.Endpoints {
			if ptr.Deref(ep.Conditions.Ready, false) {
				return true
			}
		}
	}
	return false
}
