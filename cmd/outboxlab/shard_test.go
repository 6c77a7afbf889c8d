package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/outboxlab/outboxlab/internal/sim"
)

// simShardJSON is what the tests read of `sim --json`.
type simShardJSON struct {
	Seeds            int     `json:"seeds"`
	Failed           int     `json:"failed"`
	Events           int     `json:"events"`
	FirstSeed        *uint64 `json:"first_seed"`
	FirstFailureSeed *uint64 `json:"first_failure_seed"`
	Shard            string  `json:"shard"`
}

func simShard(t *testing.T, d deps, args ...string) simShardJSON {
	t.Helper()
	code, out, errOut := invokeWith(t, d, append([]string{"sim", "--json"}, args...)...)
	if code != exitOK {
		t.Fatalf("sim %v: exit %d\n%s%s", args, code, out, errOut)
	}
	var got simShardJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("sim %v: stdout is not one JSON object: %v\n%s", args, err, out)
	}
	return got
}

// TestSimShardsAddUpToTheCampaign is the acceptance test of issue 18:
// `outboxlab sim --seeds 1000 --seed 1 --shard K/3 --json` for K = 1..3
// runs 1000 seeds together, none twice, and the same seeds as the
// campaign run whole.
func TestSimShardsAddUpToTheCampaign(t *testing.T) {
	const seeds, first = 1000, 1
	d := testDeps()
	whole := simShard(t, d, "--seeds", fmt.Sprint(seeds), "--seed", fmt.Sprint(first))
	type span struct{ lo, hi uint64 }
	var spans []span
	total, events, failed := 0, 0, 0
	for k := 1; k <= 3; k++ {
		got := simShard(t, d, "--seeds", fmt.Sprint(seeds), "--seed", fmt.Sprint(first), "--shard", fmt.Sprintf("%d/3", k))
		if got.Shard != fmt.Sprintf("%d/3", k) || got.FirstSeed == nil || got.Seeds == 0 {
			t.Fatalf("shard %d/3: %+v", k, got)
		}
		spans = append(spans, span{*got.FirstSeed, *got.FirstSeed + uint64(got.Seeds)})
		total += got.Seeds
		events += got.Events
		failed += got.Failed
	}
	if total != seeds {
		t.Errorf("the shards ran %d seeds, want %d", total, seeds)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	next := uint64(first)
	for _, s := range spans {
		if s.lo != next {
			t.Errorf("shards %v: seed %d runs twice or not at all", spans, next)
		}
		next = s.hi
	}
	if next != first+seeds {
		t.Errorf("shards %v end at %d, want %d", spans, next, first+seeds)
	}
	// The shards ran the campaign's seeds: together they committed the
	// same events and failed as often as the campaign run whole.
	if events != whole.Events || failed != whole.Failed {
		t.Errorf("shards: %d events, %d failed; the whole campaign: %d events, %d failed", events, failed, whole.Events, whole.Failed)
	}
}

func TestSimShardFromTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		env   map[string]string
		flag  string
		shard string
		first uint64
	}{
		{map[string]string{"OUTBOXLAB_SHARD": "2/3"}, "", "2/3", 13},
		// A Kubernetes Indexed Job: index 2 (0-based) of 3 is shard 3/3.
		{map[string]string{"JOB_COMPLETION_INDEX": "2", "OUTBOXLAB_SHARDS": "3"}, "", "3/3", 16},
		{map[string]string{"JOB_COMPLETION_INDEX": "0", "OUTBOXLAB_SHARDS": "3"}, "", "1/3", 10},
		// The flag wins over the environment, even a bad one.
		{map[string]string{"OUTBOXLAB_SHARD": "2/3"}, "1/3", "1/3", 10},
		{map[string]string{"OUTBOXLAB_SHARD": "bad"}, "3/3", "3/3", 16},
		// The flag wins over an index without OUTBOXLAB_SHARDS, which
		// alone is refused.
		{map[string]string{"JOB_COMPLETION_INDEX": "1"}, "2/3", "2/3", 13},
	} {
		args := []string{"--seeds", "9", "--seed", "10"}
		if tc.flag != "" {
			args = append(args, "--shard", tc.flag)
		}
		got := simShard(t, withEnv(testDeps(), tc.env), args...)
		if got.Shard != tc.shard || got.FirstSeed == nil || *got.FirstSeed != tc.first {
			t.Errorf("env %v flag %q: shard %s from %v, want %s from %d", tc.env, tc.flag, got.Shard, got.FirstSeed, tc.shard, tc.first)
		}
	}
}

func TestSimBadShardsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		flag string
		want string
	}{
		{nil, "0/3", "--shard"},
		{nil, "4/3", "--shard"},
		{nil, "1/0", "--shard"},
		{nil, "a/b", "--shard"},
		{nil, "2", "--shard"},
		{map[string]string{"OUTBOXLAB_SHARD": "x"}, "", "OUTBOXLAB_SHARD"},
		{map[string]string{"OUTBOXLAB_SHARDS": "3"}, "", "JOB_COMPLETION_INDEX"},
		{map[string]string{"OUTBOXLAB_SHARDS": "3", "JOB_COMPLETION_INDEX": "3"}, "", "JOB_COMPLETION_INDEX"},
		{map[string]string{"OUTBOXLAB_SHARDS": "none", "JOB_COMPLETION_INDEX": "0"}, "", "OUTBOXLAB_SHARDS"},
		{map[string]string{"JOB_COMPLETION_INDEX": "1"}, "", "OUTBOXLAB_SHARDS"},
	} {
		args := []string{"sim", "--seeds", "3", "--seed", "1"}
		if tc.flag != "" {
			args = append(args, "--shard", tc.flag)
		}
		code, _, errOut := invokeWith(t, withEnv(testDeps(), tc.env), args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "invalid shard") {
			t.Errorf("env %v flag %q: exit %d, %q; want 2 naming %s", tc.env, tc.flag, code, errOut, tc.want)
		}
	}
}

func TestSimEmptyShardRunsNothing(t *testing.T) {
	// Two seeds in three shards: 1/3 gets none, 2/3 and 3/3 one each.
	got := simShard(t, testDeps(), "--seeds", "2", "--seed", "1", "--shard", "1/3")
	if got.Seeds != 0 || got.FirstSeed != nil || got.Shard != "1/3" {
		t.Errorf("shard 1/3 of 2 seeds = %+v, want no seeds", got)
	}
	code, out, _ := invoke(t, "sim", "--seeds", "2", "--seed", "1", "--shard", "1/3")
	if code != exitOK || !strings.Contains(out, "is empty") || !strings.Contains(out, "no verdict") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	// No seed ran: nothing passed.
	if strings.Contains(out, "PASS") {
		t.Errorf("an empty shard printed a verdict:\n%s", out)
	}
}

func TestSimShardPrintsItsSeedsAndReplaysThem(t *testing.T) {
	code, out, errOut := invoke(t, "sim", "--seeds", "10", "--seed", "100", "--shard", "2/2")
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if first := strings.SplitN(out, "\n", 2)[0]; first != "SEED=105 "+sim.DrawSwarm(105).String() {
		t.Errorf("first line %q, want the shard's first seed, 105", first)
	}
	if !strings.Contains(out, "shard 2/2 of seeds 100..109: seeds 105..109 (5 of 10)\n") {
		t.Errorf("output does not name the shard's seeds:\n%s", out)
	}
	// The shard is the run of its own seeds.
	_, alone, _ := invoke(t, "sim", "--seeds", "5", "--seed", "105")
	if hash(out) == "" || hash(out) != hash(alone) {
		t.Errorf("shard 2/2 and seeds 105..109 alone differ:\n%s\n%s", out, alone)
	}
}

func TestSimSeedRangeMustNotPassTheLargestSeed(t *testing.T) {
	top := uint64(math.MaxUint64)
	if code, out, errOut := invoke(t, "sim", "--seeds", "3", "--seed", fmt.Sprint(top-2)); code != exitOK {
		t.Errorf("the last three seeds: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{
		{"--seeds", "4", "--seed", fmt.Sprint(top - 2)},
		{"--seeds", "2", "--seed", fmt.Sprint(top)},
		{"--seeds", "2", "--seed", fmt.Sprint(top), "--shard", "1/2"},
	} {
		code, out, errOut := invoke(t, append([]string{"sim"}, args...)...)
		if code != exitUsage || !strings.Contains(errOut, "would pass the largest seed") {
			t.Errorf("%v: exit %d, want 2\n%s%s", args, code, out, errOut)
		}
		if strings.Contains(out, "SEED=") {
			t.Errorf("%v ran seeds:\n%s", args, out)
		}
	}
}

func TestSimFirstFailureSeedIsSetWhenASeedFails(t *testing.T) {
	d := unsafeCatalogue(testDeps())
	code, out, _ := invokeWith(t, d, "sim", "--json", "--seeds", "20", "--seed", "1", "--mutant", "publish-then-commit")
	var got simShardJSON
	if code != exitFail || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("exit %d, %q", code, out)
	}
	sum := sim.RunMany(context.Background(), 1, 20, sim.Options{Variant: sim.Variant{Name: "publish-then-commit", Producer: "publish-then-commit"}})
	if got.FirstFailureSeed == nil || sum.Failed == 0 || *got.FirstFailureSeed != sum.FirstFailureSeed {
		t.Errorf("first_failure_seed = %v, want %d", got.FirstFailureSeed, sum.FirstFailureSeed)
	}
}
