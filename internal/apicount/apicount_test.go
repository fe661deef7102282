package apicount

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		method, url string
		want        Key
	}{
		{"GET", "/apis/management.harvesterhci.io/v1beta1/upgradeplans/p1", Key{"get", "upgradeplans"}},
		{"GET", "/apis/management.harvesterhci.io/v1beta1/upgradeplans", Key{"list", "upgradeplans"}},
		{"GET", "/apis/management.harvesterhci.io/v1beta1/upgradeplans?watch=true", Key{"watch", "upgradeplans"}},
		{"PATCH", "/apis/management.harvesterhci.io/v1beta1/upgradeplans/p1/status", Key{"patch", "upgradeplans/status"}},
		{"POST", "/apis/batch/v1/namespaces/harvester-system/jobs", Key{"create", "jobs"}},
		{"GET", "/apis/batch/v1/namespaces/harvester-system/jobs/j1", Key{"get", "jobs"}},
		{"DELETE", "/apis/batch/v1/namespaces/harvester-system/jobs", Key{"deletecollection", "jobs"}},
		{"DELETE", "/api/v1/namespaces/default/pods/p", Key{"delete", "pods"}},
		{"GET", "/api/v1/nodes/n1/proxy/stats/summary", Key{"get", "nodes/proxy"}},
		{"PUT", "/api/v1/nodes/n1", Key{"update", "nodes"}},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, tt.url, nil)
		if got := Classify(req); got != tt.want {
			t.Errorf("%s %s = %+v, want %+v", tt.method, tt.url, got, tt.want)
		}
	}
}

func TestCounterCountsThroughTheTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	c := New()
	rt := roundTripper{next: http.DefaultTransport, c: c}
	for _, m := range []string{"GET", "PATCH", "PATCH"} {
		req, _ := http.NewRequest(m, srv.URL+"/api/v1/nodes/n1", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	if got := c.Writes(); got[Key{"patch", "nodes"}] != 2 || len(got) != 1 {
		t.Errorf("writes %v", got)
	}
	c.Reset()
	if len(c.Snapshot()) != 0 {
		t.Error("Reset kept counts")
	}
}
