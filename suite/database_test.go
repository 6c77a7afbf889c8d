package suite

import (
	"testing"

	"github.com/outboxlab/outboxlab/scenarios"
)

// TestDatabaseScenariosThroughTheSuite runs a scenario that changes the
// database under the relay, failover-sync, through the public suite, as a
// team's module would name it in Options.Scenarios: the suite starts the
// environment the scenario needs (a PostgreSQL with a synchronous
// standby) beside the catalogue's. RequireAll fails an inconclusive run.
// `make test-database` runs it with TestDatabaseCatalogue; `make test`
// leaves both out.
func TestDatabaseScenariosThroughTheSuite(t *testing.T) {
	Run(t, Target{}, Options{Scenarios: []string{scenarios.FailoverSync}, Seed: 1, RequireAll: true})
}
