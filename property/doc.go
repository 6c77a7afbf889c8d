// Package property holds the property-based tests of the outbox: rapid
// state machines whose actions commit or roll back business writes, tick,
// crash or pause relays, cut and heal links, move and skew clocks and force
// redeliveries, with the checkers as the invariant. sim_test.go drives the
// production relay and consumer inside the deterministic simulation; rapid
// shrinks any failing sequence to a short, readable counterexample.
package property
