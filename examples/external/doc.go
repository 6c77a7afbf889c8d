// Package external is how a team uses outboxlab from its own module. Its
// tests run a scenario of the catalogue, broker-down, and one of its own,
// RelayPaused, with its own fault and its own check, against outboxlab's
// relay through package suite, which starts the environments. It lives
// in a separate Go module (its own go.mod, pointed at this checkout by a
// replace directive), so that it builds as a team's module does: against
// the packages outboxlab exports and nothing else of the repository (no
// test helper, file or make target of it). The compiler keeps it, as any
// importer, from anything unexported, so what it builds any team can.
// `make test-examples` runs it; `go test -short ./...` runs only the
// tests that start no container.
package external
