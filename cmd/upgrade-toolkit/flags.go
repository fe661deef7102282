package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/phase"
)

// repoURLFlag sets where the manager reaches the upgrade repos.
type repoURLFlag struct{ cfg *phase.Config }

func (f repoURLFlag) String() string { return "" }
func (f repoURLFlag) Type() string   { return "url" }
func (f repoURLFlag) Set(tmpl string) error {
	if !strings.HasPrefix(tmpl, "http://") && !strings.HasPrefix(tmpl, "https://") {
		return fmt.Errorf("%q is not an http(s) URL", tmpl)
	}
	f.cfg.RepoURL = func(namespace, service string) string {
		return strings.NewReplacer("{namespace}", namespace, "{service}", service).Replace(tmpl)
	}
	return nil
}

// daysFlag is a duration given in whole days.
type daysFlag struct{ d *time.Duration }

func (f daysFlag) String() string {
	if f.d == nil {
		return ""
	}
	return strconv.Itoa(int(*f.d / (24 * time.Hour)))
}
func (f daysFlag) Type() string { return "days" }
func (f daysFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return fmt.Errorf("%q is not a whole number of days greater than 0", s)
	}
	*f.d = time.Duration(n) * 24 * time.Hour
	return nil
}

// mirrorFlag is a registry that holds every image of the upgrade.
type mirrorFlag struct{ m *images.Mirror }

func (f mirrorFlag) String() string {
	if f.m == nil {
		return ""
	}
	return f.m.String()
}
func (f mirrorFlag) Type() string { return "registry" }
func (f mirrorFlag) Set(s string) error {
	m, err := images.ParseMirror(s)
	if err != nil {
		return err
	}
	*f.m = m
	return nil
}
