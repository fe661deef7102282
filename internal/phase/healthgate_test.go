package phase

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestControlPlaneNotReady: the API server's readiness, as /readyz?verbose
// reports it, becomes the gate's reason, naming the checks that failed; a
// server that cannot be asked is an error, never a pass.
func TestControlPlaneNotReady(t *testing.T) {
	for _, tc := range []struct {
		name    string
		code    int
		body    string
		want    string
		wantErr bool
	}{
		{name: "ready", code: http.StatusOK, body: "[+]ping ok\n[+]etcd ok\nreadyz check passed\n"},
		{name: "etcd down", code: http.StatusInternalServerError,
			body: "[+]ping ok\n[-]etcd failed: reason withheld\n[-]informer-sync failed: reason withheld\nreadyz check failed\n",
			want: "the API server is not ready (failed: etcd, informer-sync)"},
		{name: "no detail", code: http.StatusInternalServerError, body: "readyz check failed\n", want: "the API server is not ready"},
		{name: "forbidden", code: http.StatusForbidden, body: "forbidden", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/readyz" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tc.code)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			got, err := controlPlaneNotReady(context.Background(), &Scope{Kube: kube})
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("got %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
