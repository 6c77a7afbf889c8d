package sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxlab/outboxlab/history"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// The SQL tier's server is shared by the tests and stopped here,
	// before goroutines are counted.
	closeSQLTier()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func jsonl(t testing.TB, ops []history.Op) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := history.WriteJSONL(&b, ops); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestDeterminism runs seeds twice and compares their histories byte for
// byte.
func TestDeterminism(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		a, b := Run(seed, Options{}), Run(seed, Options{})
		ja, jb := jsonl(t, a.History), jsonl(t, b.History)
		if !bytes.Equal(ja, jb) {
			t.Fatalf("seed %d: two runs differ (%d vs %d bytes of history)", seed, len(ja), len(jb))
		}
		if a.Header() != b.Header() || a.Steps != b.Steps || a.Valid != b.Valid {
			t.Fatalf("seed %d: results differ: %q/%d/%v vs %q/%d/%v", seed, a.Header(), a.Steps, a.Valid, b.Header(), b.Steps, b.Valid)
		}
	}
}

// TestSeedsDiffer guards the determinism test against a simulation that
// ignores its seed.
func TestSeedsDiffer(t *testing.T) {
	a, b := Run(1, Options{}), Run(2, Options{})
	if bytes.Equal(jsonl(t, a.History), jsonl(t, b.History)) {
		t.Fatal("seeds 1 and 2 produced the same history")
	}
}

func TestRunManyDeterministic(t *testing.T) {
	ctx := context.Background()
	a := RunMany(ctx, 1, 30, Options{})
	b := RunMany(ctx, 1, 30, Options{})
	if a.HistorySHA256 != b.HistorySHA256 || a.Failed != b.Failed || a.Events != b.Events || a.StepsPerSeed != b.StepsPerSeed {
		t.Fatalf("RunMany differs between runs: %+v vs %+v", a, b)
	}
	if a.Seeds != 30 {
		t.Fatalf("Seeds = %d, want 30", a.Seeds)
	}
	// The summary hash is the hash of the histories in seed order.
	var all bytes.Buffer
	for s := uint64(1); s <= 30; s++ {
		all.Write(jsonl(t, Run(s, Options{}).History))
	}
	c := RunMany(ctx, 1, 30, Options{})
	if got := c.HistorySHA256; got != sha256Hex(all.Bytes()) {
		t.Fatalf("history_sha256 %s is not the hash of the histories in seed order", got)
	}
	raw, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"seeds":`, `"failed":`, `"seeds_per_sec":`, `"steps_per_seed":`, `"events":`, `"first_failure_seed":`, `"history_sha256":`} {
		if !strings.Contains(string(raw), k) {
			t.Errorf("summary JSON %s lacks %s", raw, k)
		}
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestDescribeIsTheHeader(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		if d, h := Describe(seed, Options{}), Run(seed, Options{}).Header(); d != h {
			t.Fatalf("Describe(%d) = %q, Run's header %q", seed, d, h)
		}
	}
	if !strings.HasPrefix(Describe(7, Options{}), "SEED=7 ") {
		t.Fatalf("header %q does not start with SEED=7", Describe(7, Options{}))
	}
}

func TestAppendJSONLMatchesWriteJSONL(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		ops := Run(seed, Options{}).History
		if got, want := appendJSONL(nil, ops), jsonl(t, ops); !bytes.Equal(got, want) {
			t.Fatalf("seed %d: appendJSONL differs from history.WriteJSONL", seed)
		}
	}
	odd := []history.Op{{Index: 1, Process: "p<1>&\"x\"\n", Type: history.Info, F: history.Phase,
		Events: []string{"é", "\u2028"}, Error: "\x01", Meta: history.Meta{Phase: "a\\b", Detail: "<d>",
			Fault: &history.Fault{Name: "f&", Class: history.ClassBroker, Targets: []string{"r"}}, Attempts: 3, Parked: true,
			DBTime: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), CausedBy: []string{"a", "b"}, Held: 1500 * time.Millisecond, SQLState: "40001", Queue: "q", Redelivered: true, Duplicate: true}}}
	if got, want := appendJSONL(nil, odd), jsonl(t, odd); !bytes.Equal(got, want) {
		t.Fatalf("escaping differs:\n%s\n%s", got, want)
	}
}

// TestWorldDeterministic drives two worlds through the same actions and
// compares their histories.
func TestWorldDeterministic(t *testing.T) {
	play := func() []byte {
		w := NewWorld(42, Options{Tune: func(sw *Swarm) { sw.Replicas, sw.Consumers, sw.Producers = 2, 1, 1 }})
		r := w.Relays()
		w.Commit("producer-1", 3, false)
		w.Step(r[0])
		w.Step(r[0])
		w.Crash(r[0])
		w.Advance(w.Swarm().Lease + time.Second)
		w.Tick(r[1])
		w.BrokerRestart()
		w.Restart(r[0])
		res := w.Finish()
		if !res.Valid {
			t.Fatalf("driven run failed:\n%s", res.Report.Summary())
		}
		return jsonl(t, res.History)
	}
	a, b := play(), play()
	if !bytes.Equal(a, b) {
		t.Fatal("the same actions gave two histories")
	}
}
