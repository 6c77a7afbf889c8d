//go:build !mutants

package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// relayMutant is always no mutant in the relay binary: the mutant
// catalogue, and the simulation and checkers it links, are compiled in
// only with the mutants tag (mutant.go), into the harness's image
// mutantsImage. Every method hands its input back unchanged.
type relayMutant struct{}

// mutantsImage is the image whose relay runs the mutants, as
// testenv.ImageRelayMutants names it (a test checks).
const mutantsImage = "outboxlab/relay-mutants:dev"

// mutantFromEnv reads OUTBOX_MUTANT: unset or empty is no mutant; any
// name is a configuration error, since this binary has no mutants.
func mutantFromEnv(getenv func(string) string) (relayMutant, error) {
	if name := strings.TrimSpace(getenv(mutantEnv)); name != "" {
		return relayMutant{}, &configError{Var: mutantEnv, Err: fmt.Errorf(
			"names mutant %q, but this relay binary was built without mutants: relay-side mutants run from the image %s (built by `make images` from ./cmd/relay with -tags mutants)",
			name, mutantsImage)}
	}
	return relayMutant{}, nil
}

// publishOptions returns nil: the publisher's defaults.
func (relayMutant) publishOptions() *relay.PublishOptions { return nil }

// config returns cfg as it is.
func (relayMutant) config(cfg relay.Config) relay.Config { return cfg }

// wire returns relay.NewPGStore over table and pub as it is.
func (relayMutant) wire(pool *pgxpool.Pool, table outbox.Table, pub relay.Publisher, _ func() time.Time, _ *slog.Logger) (relay.Store, relay.Publisher) {
	return relay.NewPGStore(pool, table), pub
}
