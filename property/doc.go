// Package property holds the property-based tests of the outbox: rapid
// state machines whose actions commit or roll back business writes, tick,
// crash or pause relays, cut and heal links, move and skew clocks and force
// redeliveries, with the checkers as the invariant; rapid shrinks any
// failing sequence to a short, readable counterexample.
//
// The package has no code of its own, only tests:
//   - property_test.go holds the properties (TestSimProperty,
//     TestMarkBeforePublishIsCaught, TestMutantsShrinkWithRapid,
//     TestInfraProperty) and the helpers they share: running a property
//     that must fail on a recorder, failing a case with its trace, setting
//     rapid's flags, looking a mutant up in the catalogue.
//   - sim_test.go is the state machine over the deterministic simulation:
//     rapid draws sim.Actions and a sim.Machine applies them to the
//     production relay and consumer, the same action type and machine the
//     mutant matrix's own search runs (package mutant).
//   - infra_test.go is the state machine over real PostgreSQL and RabbitMQ
//     (testenv, skipped under -short): in-process relays, toxiproxy links,
//     failpoint crashes and pauses past the lease.
//
// A mutant under a property is always the catalogue's (mutant.Lookup),
// never a copy written here.
package property
