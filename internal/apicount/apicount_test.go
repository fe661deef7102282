package apicount

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

func TestDescribe(t *testing.T) {
	tests := []struct {
		method, url string
		want        Request
	}{
		{"GET", "/api/v1/namespaces/harvester-system/pods/p1/log?tailLines=10",
			Request{Verb: "get", Resource: "pods/log", Namespace: "harvester-system", Name: "p1"}},
		{"GET", "/apis/batch/v1/namespaces/cattle-system/jobs?labelSelector=a",
			Request{Verb: "list", Group: "batch", Resource: "jobs", Namespace: "cattle-system"}},
		{"GET", "/apis/batch/v1/jobs?watch=true", Request{Verb: "watch", Group: "batch", Resource: "jobs"}},
		{"GET", "/api/v1/namespaces/harvester-system", Request{Verb: "get", Resource: "namespaces", Name: "harvester-system"}},
		{"PATCH", "/apis/management.harvesterhci.io/v1beta1/upgradeplans/p1/status",
			Request{Verb: "patch", Group: "management.harvesterhci.io", Resource: "upgradeplans/status", Name: "p1"}},
		{"POST", "/apis/authentication.k8s.io/v1/tokenreviews", Request{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}},
		{"GET", "/apis/apps/v1", Request{Verb: "get", NonResource: true}},
		{"GET", "/version", Request{Verb: "get", NonResource: true}},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, tt.url, nil)
		tt.want.Path = req.URL.Path
		if got := Describe(req); got != tt.want {
			t.Errorf("%s %s = %+v, want %+v", tt.method, tt.url, got, tt.want)
		}
	}
}

func TestCounterCountsThroughTheTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = w.Write([]byte("0123456789"))
		}
	}))
	defer srv.Close()
	c := New()
	rt := roundTripper{next: http.DefaultTransport, c: c}
	for _, m := range []string{"GET", "PATCH", "PATCH"} {
		var body io.Reader
		if m == "PATCH" {
			body = strings.NewReader(`{"a":1}`)
		}
		req, _ := http.NewRequest(m, srv.URL+"/api/v1/nodes/n1", body)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	if got := c.Writes(); got[Key{"patch", "nodes"}] != 2 || len(got) != 1 {
		t.Errorf("writes %v", got)
	}
	bytes := c.BytesSnapshot()
	if got, want := bytes[Key{"patch", "nodes"}], (Bytes{Sent: 14}); got != want {
		t.Errorf("patch bytes %+v, want %+v", got, want)
	}
	if got, want := bytes[Key{"get", "nodes"}], (Bytes{Received: 10}); got != want {
		t.Errorf("get bytes %+v, want %+v", got, want)
	}
	c.Reset()
	if len(c.Snapshot()) != 0 || len(c.BytesSnapshot()) != 0 {
		t.Error("Reset kept counts")
	}
}
