package scenarios

import (
	"testing"

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
		ours bool // our features and failpoints filled in
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
			if ours := got.Failpoints && got.Features == OurFeatures; ours != tc.ours {
				t.Errorf("features %+v, failpoints %v; want ours: %v", got.Features, got.Failpoints, tc.ours)
			}
			if got.Name == "" {
				t.Error("no name")
			}
		})
	}
	u := RelayUnderTest{Env: map[string]string{contract.EnvLease: "1s"}}
	u.resolve().Env[contract.EnvLease] = "2s"
	if u.Env[contract.EnvLease] != "1s" {
		t.Error("resolve shares the caller's environment map")
	}
}
