package phase

import (
	"context"
	"fmt"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// A saved setting is a setting of another component the upgrade changes for
// its duration and puts back at the end (one file each: settings_*.go).
// Its original value is recorded in status.savedSettings before anything is
// changed, in a pass of its own: a crash between the change and the record
// would otherwise record the changed value as the original. The cleanup puts
// each back, reads it back from the API server and forgets the record once
// the server holds the original value, so that each is restored exactly
// once.
type savedSetting interface {
	// record keeps the setting's original value, unless it is kept
	// already or the cluster has no such setting, and reports whether it
	// kept it on this pass.
	record(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) (bool, error)
	// change makes the upgrade's change of a recorded setting; it is
	// idempotent, and does nothing for a setting not recorded.
	change(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) error
	// restore puts a recorded setting back and reads it back from the API
	// server; the zero restoration for a setting not recorded.
	restore(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) (restoration, error)
	// forget drops the record of a setting restored.
	forget(saved *v1beta1.SavedSettings)
}

// restoration is what restoring a setting found.
type restoration struct {
	// what names the setting and its original value; "" when nothing was
	// recorded.
	what string
	// back: the API server holds the original value (or the setting is
	// gone).
	back bool
	// seen is what the API server holds instead.
	seen string
}

// restoreOrder is the order the cleanup puts the settings back in.
var restoreOrder = []savedSetting{rancherStrategy{}, longhornReplenishment{}, deschedulerAddon{}, kubeVirtUpdates{}}

// recordThenChange records the settings' original values and ends the pass
// with waiting when it recorded one, so that the record is written before
// any change; once every setting is recorded, it changes them. done is false
// while the pass must end.
func recordThenChange(ctx context.Context, s *Scope, waiting string, settings ...savedSetting) (r Result, done bool, err error) {
	saved := ensureSaved(s.Plan)
	recorded := false
	for _, st := range settings {
		kept, err := st.record(ctx, s, saved)
		if err != nil {
			return Wait("%s", waiting), false, err
		}
		recorded = recorded || kept
	}
	if recorded {
		return Wait("%s", waiting), false, nil
	}
	for _, st := range settings {
		if err := st.change(ctx, s, saved); err != nil {
			return Result{}, false, err
		}
	}
	return Result{}, true, nil
}

// restoreSettings puts back every recorded setting, reads it back from the
// API server and forgets the record once the server holds the original
// value. It says which settings it restored, and which hold another value
// than the one written back.
func restoreSettings(ctx context.Context, s *Scope) (restored, unsettled []string, err error) {
	saved := s.Plan.Status.SavedSettings
	if saved == nil {
		return nil, nil, nil
	}
	for _, st := range restoreOrder {
		r, err := st.restore(ctx, s, saved)
		switch {
		case err != nil:
			return nil, nil, err
		case r.what == "":
		case r.back:
			st.forget(saved)
			restored = append(restored, r.what)
		default:
			unsettled = append(unsettled, fmt.Sprintf("%s was written back, but the API server holds %s", r.what, r.seen))
		}
	}
	if *saved == (v1beta1.SavedSettings{}) {
		s.Plan.Status.SavedSettings = nil
	}
	return restored, unsettled, nil
}

// ensureSaved returns the plan's saved settings, creating them if needed.
func ensureSaved(p *v1beta1.UpgradePlan) *v1beta1.SavedSettings {
	if p.Status.SavedSettings == nil {
		p.Status.SavedSettings = &v1beta1.SavedSettings{}
	}
	return p.Status.SavedSettings
}
