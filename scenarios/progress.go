package scenarios

import (
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// startProgress reports progress about twice a second until stopped.
func (r *run) startProgress() func() {
	if r.opts.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		committed := map[string]bool{}
		seen := 0
		for {
			ops := r.rec.Ops()
			for _, op := range ops[seen:] {
				if op.F == history.Commit && op.Type == history.OK {
					for _, id := range op.Events {
						committed[id] = true
					}
				}
			}
			seen = len(ops)
			phase, _ := r.phase.Load().(string)
			p := Progress{Scenario: r.sc.Name, Phase: phase, Committed: len(committed), Delivered: int(r.applied.Load()), Faults: r.nemesis.Open()}
			if phase == history.PhaseSafety {
				p.Left = max(0, time.Until(time.Unix(0, r.safetyEnd.Load())))
			}
			r.opts.Progress(p)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
