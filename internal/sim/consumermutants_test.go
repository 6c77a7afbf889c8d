package sim_test

import (
	"testing"

	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/internal/sim"
)

// TestSQLKillsConsumerMutants runs the consumer mutants whose bug is in
// how the inbox keys or checks a delivery on the SQL tier, under their
// exposure: each is killed within 12 seeds, which the production consumer
// passes under the same exposure.
func TestSQLKillsConsumerMutants(t *testing.T) {
	s := sim.SQLTier(t)
	for _, name := range []string{"consumer-delivery-tag-key", "consumer-check-then-insert"} {
		t.Run(name, func(t *testing.T) {
			m, ok := mutant.Lookup(name)
			if !ok {
				t.Fatalf("no mutant %s", name)
			}
			killed := uint64(0)
			for seed := uint64(1); seed <= 12 && killed == 0; seed++ {
				ref := sim.Run(seed, sim.Options{SQL: s, Tune: m.Exposure.Tune})
				if ref.Err != nil || !ref.Valid {
					t.Fatalf("seed %d: the production consumer failed (err %v):\n%s", seed, ref.Err, ref.Report.Summary())
				}
				res := sim.Run(seed, sim.Options{SQL: s, Variant: m.Variant(), Tune: m.Exposure.Tune})
				if res.Err != nil {
					t.Fatalf("seed %d: %v", seed, res.Err)
				}
				if !res.Valid {
					killed = seed
					t.Logf("killed at seed %d by %s", seed, mutant.Killer(res.Report, nil))
				}
			}
			if killed == 0 {
				t.Fatalf("%s survived 12 seeds of the SQL tier", name)
			}
		})
	}
}
