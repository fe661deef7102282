package release

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseImageList(t *testing.T) {
	data := "# images of v1.7.1\n" +
		"docker.io/rancher/harvester:v1.7.1\n" +
		"\n" +
		"   docker.io/rancher/fleet:v0.13.1   \r\n" +
		"\tdocker.io/rancher/harvester:v1.7.1\t# again\n" +
		"rancher/rancher:v2.12.3\n" +
		"busybox\n" +
		"localhost:5000/team/tool:1.0\n" +
		"registry.suse.com/suse/sles/15.7/virt-operator:1.6.2-150700.3.5.1\n" +
		"docker.io/library/alpine:3@sha256:" + strings.Repeat("ab", 32) + "\n" +
		"docker.io/rancher/mirrored-pause:3.6" // no final newline
	got, err := ParseImageList([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"docker.io/library/alpine:3@sha256:" + strings.Repeat("ab", 32),
		"docker.io/library/busybox:latest",
		"docker.io/rancher/fleet:v0.13.1",
		"docker.io/rancher/harvester:v1.7.1",
		"docker.io/rancher/mirrored-pause:3.6",
		"docker.io/rancher/rancher:v2.12.3",
		"localhost:5000/team/tool:1.0",
		"registry.suse.com/suse/sles/15.7/virt-operator:1.6.2-150700.3.5.1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseImageList (-want +got):\n%s", diff)
	}
}

func TestParseImageListEmpty(t *testing.T) {
	for _, data := range []string{"", "\n\n", "# only comments\n  # and more\n"} {
		got, err := ParseImageList([]byte(data))
		if err != nil || len(got) != 0 {
			t.Errorf("ParseImageList(%q) = %v, %v; want nothing", data, got, err)
		}
	}
}

func TestParseImageListInvalid(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{"docker.io/rancher/harvester:v1.7.1\nDocker.io/Rancher/X:1\n", `line 2: "Docker.io/Rancher/X:1" is not an image reference`},
		{"a b\n", `line 1: "a b" is not an image reference`},
		{"\n\nrancher/harvester:v1 extra\n", `line 3: "rancher/harvester:v1 extra"`},
		{"rancher/harvester@sha256:abc\n", `line 1: "rancher/harvester@sha256:abc" is not an image reference`},
		{"x:\n", `line 1: "x:"`},
		{strings.Repeat("a", 70000) + "\n", "line 1: bufio.Scanner: token too long"},
	} {
		_, err := ParseImageList([]byte(tc.data))
		if !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), "image_list_all.txt: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseImageList(%.40q) = %v, want a content error saying %q", tc.data, err, tc.want)
		}
	}
}

func TestStaleImages(t *testing.T) {
	previous := []string{
		"docker.io/longhornio/longhorn-engine:v1.9.2",
		"docker.io/longhornio/longhorn-instance-manager:v1.9.2",
		"docker.io/longhornio/longhorn-manager:v1.9.2",
		"docker.io/rancher/fleet:v0.13.1",
		"docker.io/rancher/harvester-upgrade:v1.7.1",
		"docker.io/rancher/harvester:v1.7.1",
		"docker.io/rancher/mirrored-banzaicloud-fluentd:v1.14.6-alpine-5",
		"docker.io/rancher/mirrored-fluent-fluent-bit:3.1.8",
		"docker.io/rancher/mirrored-pause:3.6",
		"docker.io/rancher/my-harvester-upgrade-helper:v1.0.0",
		"docker.io/rancher/not-longhorn-engine-foo:v1.0.0",
		"localhost:5000/longhorn-engine:dev",
		"registry.example.com:5000/org/harvester-upgrade@sha256:" + strings.Repeat("0", 64),
	}
	current := []string{
		"docker.io/longhornio/longhorn-manager:v1.10.1",
		"docker.io/rancher/fleet:v0.13.1",
		"docker.io/rancher/harvester:v1.8.0",
		"docker.io/rancher/mirrored-pause:3.6",
	}
	got := StaleImages(previous, current, RetainedImageNames)
	want := []string{
		"docker.io/longhornio/longhorn-manager:v1.9.2",
		"docker.io/rancher/harvester:v1.7.1",
		// Retention is by the whole name, not a substring.
		"docker.io/rancher/my-harvester-upgrade-helper:v1.0.0",
		"docker.io/rancher/not-longhorn-engine-foo:v1.0.0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("StaleImages (-want +got):\n%s", diff)
	}
	if got := StaleImages(previous, current, nil); len(got) != len(previous)-2 {
		t.Errorf("without a retain list %d images are stale, want %d: %v", len(got), len(previous)-2, got)
	}
}

func TestStaleImagesEdges(t *testing.T) {
	a := []string{"docker.io/rancher/a:1", "docker.io/rancher/b:1"}
	for _, tc := range []struct {
		name              string
		previous, current []string
		want              []string
	}{
		{"both empty", nil, nil, nil},
		{"current empty: all previous", a, nil, a},
		{"previous empty: nothing", nil, a, nil},
		{"identical: nothing", a, a, nil},
		{"unsorted, duplicated input", []string{"docker.io/rancher/b:1", "docker.io/rancher/a:1", "docker.io/rancher/b:1"}, nil, a},
	} {
		if diff := cmp.Diff(tc.want, StaleImages(tc.previous, tc.current, RetainedImageNames)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestImageName(t *testing.T) {
	for ref, want := range map[string]string{
		"docker.io/rancher/harvester-upgrade:v1.2.0":                 "harvester-upgrade",
		"rancher/harvester-upgrade:v1.2.0":                           "harvester-upgrade",
		"harvester-upgrade:v1.2.0":                                   "harvester-upgrade",
		"harvester-upgrade":                                          "harvester-upgrade",
		"localhost:5000/myimage:latest":                              "myimage",
		"localhost:5000/myimage":                                     "myimage",
		"registry.example.com:5000/org/myimage:v1":                   "myimage",
		"docker.io/org/myimage:v1@sha256:" + strings.Repeat("a", 64): "myimage",
		"myimage@sha256:" + strings.Repeat("a", 64):                  "myimage",
		"not a reference":                                            "",
	} {
		if got := imageName(ref); got != want {
			t.Errorf("imageName(%q) = %q, want %q", ref, got, want)
		}
	}
}

func TestImageListPath(t *testing.T) {
	if got := ImageListPath("v1.7.1"); got != "bundle/harvester/images-lists-archive/v1.7.1/image_list_all.txt" {
		t.Errorf("ImageListPath = %q", got)
	}
	if got := ImageListPath(CurrentImageList); got != "bundle/harvester/images-lists-archive/current/image_list_all.txt" {
		t.Errorf("ImageListPath(current) = %q", got)
	}
}
