// Package external is how a team uses outboxlab from its own module: its
// test imports only outboxlab's public packages (testenv for the
// containers, scenarios for the chaos catalogue), starts the environment
// and runs a scenario against a relay. It lives in a separate Go module
// (its own go.mod, pointed at this checkout by a replace directive), so
// that the compiler, not a convention, keeps it from reaching into
// anything internal. `make test-examples` runs it.
package external
