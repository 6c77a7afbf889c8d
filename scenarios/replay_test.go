package scenarios

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxlab/outboxlab/outbox"
)

// goSchema is an outbox schema in Go code, which no flag of the run verb
// can carry.
var goSchema = outbox.Schema{
	Name:    "my-outbox",
	Migrate: func(context.Context, *pgxpool.Pool, outbox.Table) error { return nil },
	Stage:   func(context.Context, pgx.Tx, outbox.Table, outbox.Event) (string, error) { return "", nil },
	Rows:    func(t outbox.Table) string { return "SELECT * FROM " + t.Ident() },
}

// TestReplayOfARelayTheRunVerbCannotName: a relay with a Go schema, or
// whose program is in the temporary directory, gets no run command (one
// would run another outbox, or a program that is gone) but a comment that
// says why and how to run it again; a target file's schema, and a program
// elsewhere, keep their commands.
func TestReplayOfARelayTheRunVerbCannotName(t *testing.T) {
	tmpBin := filepath.Join(t.TempDir(), "relay")
	for _, c := range []struct {
		name  string
		relay RelayUnderTest
		want  []string // in the replay
		not   []string // never in it
	}{
		{"a Go schema", RelayUnderTest{Name: "mine", Image: "my/relay:1", Outbox: goSchema},
			[]string{"# outboxlab run cannot name relay mine (its outbox schema my-outbox is Go code)", "run the Go test that ran broker-down again, on seed 42"},
			[]string{"go run", "--relay", "image:"}},
		{"a program in the temporary directory", RelayUnderTest{Name: "built", Command: []string{tmpBin, "--fast"}},
			[]string{"# outboxlab run cannot name relay built (its program " + tmpBin + " is in the temporary directory", "on seed 42"},
			[]string{"go run", "--relay", "cmd:"}},
		{"a target file's schema", RelayUnderTest{Name: "t", Image: "my/relay:1", Outbox: goSchema, Replay: "--target t.yaml"},
			[]string{"go run ./cmd/outboxlab run --scenario broker-down --seed 42 --target t.yaml"}, []string{"#"}},
		{"a program elsewhere", RelayUnderTest{Name: "./bin/relay", Command: []string{"./bin/relay"}},
			[]string{"go run ./cmd/outboxlab run --scenario broker-down --seed 42 --relay cmd:./bin/relay"}, []string{"#"}},
	} {
		got := ReplayCommand(BrokerDown, 42, c.relay, 0, 0)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: replay %q lacks %q", c.name, got, w)
			}
		}
		for _, n := range c.not {
			if strings.Contains(got, n) {
				t.Errorf("%s: replay %q has %q", c.name, got, n)
			}
		}
	}
}

// TestRunReplayNamesTheRelayItRan: a run's go test replay is the
// catalogue test only for our relay, which is the one it runs; another
// relay's is the run verb's command, and one the run verb cannot name
// gets the comment for both, with no flag after it.
func TestRunReplayNamesTheRelayItRan(t *testing.T) {
	sc, _ := Lookup(BrokerDown)
	cmd, test := newRun(nil, sc, Options{Seed: 42}).replay()
	if cmd != "go run ./cmd/outboxlab run --scenario broker-down --seed 42" || !strings.Contains(test, "TestCatalogue/broker-down$") {
		t.Errorf("ours: %q, %q", cmd, test)
	}
	cmd, test = newRun(nil, sc, Options{Seed: 9, Relay: RelayUnderTest{Image: "example/relay:1"}}).replay()
	if test != cmd || !strings.HasSuffix(cmd, "--relay image:example/relay:1") {
		t.Errorf("an image relay: %q, %q: want its run command for both", cmd, test)
	}
	cl := ClusterCatalogue()[0]
	cmd, test = newRun(nil, cl, Options{Seed: 9, QueueType: "classic", Relay: RelayUnderTest{Name: "mine", Image: "my/relay:1", Outbox: goSchema}}).replay()
	if test != cmd || !strings.HasPrefix(cmd, "# ") || strings.Contains(cmd, "--queue") || strings.Contains(cmd, "TestCatalogue") {
		t.Errorf("a Go schema: %q, %q: want the comment for both", cmd, test)
	}
}
