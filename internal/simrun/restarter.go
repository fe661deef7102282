package simrun

import (
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// Restarter kills the manager and starts a new one once, at a random moment
// (seeded, so that a failure can be replayed), in every phase a plan enters.
type Restarter struct {
	run      *Run
	rnd      *rand.Rand
	maxDelay time.Duration
	seen     map[v1beta1.UpgradePlanPhase]bool
	wg       sync.WaitGroup
	mu       sync.Mutex
	errs     []error
}

// NewRestarter restarts the manager of run within maxDelay of each phase's
// start.
func (r *Run) NewRestarter(seed uint64, maxDelay time.Duration) *Restarter {
	return &Restarter{run: r, rnd: rand.New(rand.NewPCG(seed, 1)), maxDelay: maxDelay, seen: map[v1beta1.UpgradePlanPhase]bool{}}
}

// Observe schedules a restart when p entered a phase not seen before. It is
// meant for WaitFinished's observer, which is called from one goroutine.
func (rs *Restarter) Observe(p *v1beta1.UpgradePlan) {
	ph := p.Status.CurrentPhase
	if ph == "" || ph.IsTerminal() || rs.seen[ph] {
		return
	}
	rs.seen[ph] = true
	delay := time.Duration(rs.rnd.Int64N(int64(rs.maxDelay)))
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		time.Sleep(delay)
		if err := rs.run.RestartManager(); err != nil {
			rs.mu.Lock()
			rs.errs = append(rs.errs, err)
			rs.mu.Unlock()
		}
	}()
}

// Wait waits for the restarts scheduled so far and returns their errors.
// Call it before the run stops, so that no restart outlives it.
func (rs *Restarter) Wait() error {
	rs.wg.Wait()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return errors.Join(rs.errs...)
}
