//go:build mutants

package main

import (
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/internal/mutant"
	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/outbox"
	"github.com/outboxlab/outboxlab/relay"
)

// relayMutant is the relay-side mutant that OUTBOX_MUTANT selects, for the
// harness's kill matrix on real infrastructure. Only a binary built with
// the mutants tag has one (the image outboxlab/relay-mutants:dev); see
// nomutant.go for the relay binary itself. Its zero value is no mutant:
// the relay runs as it is, and every method below hands its input back
// unchanged.
type relayMutant struct {
	m *mutant.Mutant
}

// mutantFromEnv reads OUTBOX_MUTANT: unset or empty is no mutant; a name
// that is not a relay-side mutant of the catalogue is a configuration
// error.
func mutantFromEnv(getenv func(string) string) (relayMutant, error) {
	name := strings.TrimSpace(getenv(mutantEnv))
	if name == "" {
		return relayMutant{}, nil
	}
	m, err := mutant.LookupRelay(name)
	if err != nil {
		return relayMutant{}, &configError{Var: mutantEnv, Err: err}
	}
	return relayMutant{m: &m}, nil
}

// publishOptions returns the delivery properties the mutant publishes
// with; nil keeps the publisher's defaults.
func (rm relayMutant) publishOptions() *relay.PublishOptions {
	if rm.m == nil || rm.m.Relay.PublishOptions == nil {
		return nil
	}
	o := *rm.m.Relay.PublishOptions
	return &o
}

// config returns cfg as the mutant changes it.
func (rm relayMutant) config(cfg relay.Config) relay.Config {
	if rm.m != nil && rm.m.Relay.Config != nil {
		rm.m.Relay.Config(&cfg)
	}
	return cfg
}

// wire returns the relay's store over table and its publisher, decorated
// by the mutant; without one, relay.NewPGStore and pub as they are. now is
// the process clock (OUTBOX_CLOCK_OFFSET included).
func (rm relayMutant) wire(pool *pgxpool.Pool, table outbox.Table, pub relay.Publisher, now func() time.Time, log *slog.Logger) (relay.Store, relay.Publisher) {
	if rm.m == nil {
		return relay.NewPGStore(pool, table), pub
	}
	log.Warn("running a mutant: this relay is broken on purpose", "mutant", rm.m.Name, "bug", rm.m.Description)
	return rm.m.Relay.Wrap(sim.NewPGRaw(pool, table), pub, now)
}
