package external_test

import (
	"testing"

	"github.com/outboxlab/outboxlab/scenarios"
	"github.com/outboxlab/outboxlab/suite"
)

// TestOutbox puts an outbox under outboxlab's chaos catalogue from this
// module's own `go test`, through the public suite: one subtest per
// scenario, here broker-down alone (the relay's link to the broker goes
// down while producers commit, then heals), against outboxlab's own relay
// (the zero Target). A team's relay goes in Target.Relay instead: an image
// or a command that follows the black-box contract, with the capabilities
// it declares. Seed 7 gives the same workload and fault schedule every
// time; a failure prints the seed and the command that replays it. It
// needs PostgreSQL, RabbitMQ and toxiproxy from outboxlab's images (`make
// images` in the outboxlab repository), skips under -short, and without a
// Docker engine unless OUTBOXLAB_REQUIRE_DOCKER is set.
func TestOutbox(t *testing.T) {
	suite.Run(t, suite.Target{}, suite.Options{
		Scenarios: []string{scenarios.BrokerDown},
		Seed:      7,
	})
}
