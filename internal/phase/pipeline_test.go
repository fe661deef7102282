package phase

import (
	"testing"

	"github.com/harvester/upgrade-toolkit/internal/pipeline"
)

// TestPipelineIsTheSteps: the plan reconciler runs Pipeline()[i] for
// pipeline.Steps[i]; the two lists match position for position.
func TestPipelineIsTheSteps(t *testing.T) {
	phases := Pipeline()
	if len(phases) != len(pipeline.Steps) {
		t.Fatalf("%d phases for %d steps", len(phases), len(pipeline.Steps))
	}
	for i, step := range pipeline.Steps {
		if got := phases[i].Name(); got != step.Name {
			t.Errorf("position %d: phase %s runs step %s", i, got, step.Name)
		}
	}
}
