package scenarios

import (
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/testenv"
)

// TestResolveRelayImage: a relay under test with no image and no command
// is this repository's relay, from the mutants image only when it asks for
// the mutants; an image or a command given is kept as it is.
func TestResolveRelayImage(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   RelayUnderTest
		want string
		ours bool // our promises filled in
	}{
		{"zero value", RelayUnderTest{}, testenv.ImageRelay, true},
		{"a mutant", RelayUnderTest{Name: "no-lease", Mutants: true, Env: map[string]string{contract.EnvMutant: "no-lease"}}, testenv.ImageRelayMutants, true},
		{"an image", RelayUnderTest{Image: "acme/relay:1"}, "acme/relay:1", false},
		{"an image with Mutants", RelayUnderTest{Image: "acme/relay:1", Mutants: true}, "acme/relay:1", false},
		{"a command", RelayUnderTest{Command: []string{"./relay"}, Mutants: true}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.resolve()
			if got.Image != tc.want {
				t.Errorf("image %q, want %q", got.Image, tc.want)
			}
			if ours := got.Promises == Ours().Promises; ours != tc.ours {
				t.Errorf("promises %s; want ours (%s): %v", got.Promises, Ours().Promises, tc.ours)
			}
			if got.Name == "" {
				t.Error("no name")
			}
		})
	}
	// Our relay declares the lease, attempt limit and backoff it is
	// given, not the harness's.
	mine := RelayUnderTest{Env: map[string]string{contract.EnvLease: "30s", contract.EnvMaxAttempts: "7", contract.EnvBackoffBase: "1s", contract.EnvBackoffMax: "4s"}}.resolve()
	if p := mine.Promises; p.Locking != contract.Lease(30*time.Second) || p.Attempts != 7 || p.Backoff != (contract.Backoff{Base: time.Second, Max: 4 * time.Second}) {
		t.Errorf("ours with its own settings declares %s", p)
	}
	// What a caller declares for it is kept.
	if p := (RelayUnderTest{Mutants: true, Promises: contract.Promises{Parks: true}}).resolve().Promises; p != (contract.Promises{Parks: true}) {
		t.Errorf("declared parks, resolved to %s", p)
	}
	u := RelayUnderTest{Env: map[string]string{contract.EnvLease: "1s"}}
	u.resolve().Env[contract.EnvLease] = "2s"
	if u.Env[contract.EnvLease] != "1s" {
		t.Error("resolve shares the caller's environment map")
	}
}
