package names

import (
	"regexp"
	"strings"
	"testing"
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestJob(t *testing.T) {
	if got := NodeJob("hvst-upgrade-864fh", "pre-drain", "charlie-1"); got != "hvst-upgrade-864fh-node-upgrade-pre-drain-charlie-1" {
		t.Errorf("NodeJob = %q", got)
	}
	if got := ISOImage("hvst-upgrade-864fh"); got != "hvst-upgrade-864fh-iso" {
		t.Errorf("ISOImage = %q", got)
	}
}

func TestJoinShortIsPlain(t *testing.T) {
	exact := strings.Repeat("a", 60) + "-bc"
	if got := Join(strings.Repeat("a", 60), "bc"); got != exact {
		t.Errorf("a 63-character name was changed: %q", got)
	}
}

func TestJoinLongIsTruncatedWithHash(t *testing.T) {
	plan := "hvst-upgrade-" + strings.Repeat("x", 40)
	a := NodeJob(plan, "post-drain", "node-with-a-rather-long-hostname-1")
	b := NodeJob(plan, "post-drain", "node-with-a-rather-long-hostname-2")
	for _, n := range []string{a, b} {
		if len(n) > MaxLength {
			t.Errorf("%q is %d characters", n, len(n))
		}
		if !dnsLabel.MatchString(n) {
			t.Errorf("%q is not a DNS label", n)
		}
	}
	if a == b {
		t.Errorf("distinct long names collide: %q", a)
	}
	if a != NodeJob(plan, "post-drain", "node-with-a-rather-long-hostname-1") {
		t.Error("Join is not deterministic")
	}
}

func TestJoinNeverEndsInDash(t *testing.T) {
	// The cut falls right after a dash.
	for i := 40; i < 70; i++ {
		n := Join(strings.Repeat("a", i), strings.Repeat("b", 30))
		if !dnsLabel.MatchString(n) || len(n) > MaxLength {
			t.Errorf("Join with %d: %q", i, n)
		}
	}
}
