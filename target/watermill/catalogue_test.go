package wmtarget_test

import (
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/suite"
	wmtarget "github.com/outboxlab/outboxlab/target/watermill"
)

// TestCatalogue runs broker-down (the replicas' link to the broker goes
// down twice while producers commit: nothing lost, every duplicate
// explained) on seed 1 against the watermill-relay image,
// through the public suite. The whole catalogue is `outboxlab run
// --relay watermill`. It starts containers: skipped under -short, and
// without a Docker engine unless OUTBOXLAB_REQUIRE_DOCKER is set.
func TestCatalogue(t *testing.T) {
	suite.Run(t, suite.Target{Relay: wmtarget.Target()}, suite.Options{
		Scenarios: []string{scenarios.BrokerDown},
		Seed:      1,
		Timeout:   5 * time.Minute,
	})
}
