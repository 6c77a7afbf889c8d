// Package external is how a team uses outboxlab from its own module: its
// test imports only outboxlab's public packages (suite, which runs the
// chaos catalogue as subtests on environments it starts, and scenarios
// for the catalogue's names) and runs a scenario against a relay. It lives in a separate Go module
// (its own go.mod, pointed at this checkout by a replace directive), so
// that the compiler, not a convention, keeps it from reaching into
// anything internal. `make test-examples` runs it.
package external
