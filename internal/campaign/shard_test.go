package campaign

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestShardsCoverEveryCellOnce(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 7, 10, 1000, 1001} {
		for shards := 1; shards <= 12; shards++ {
			seen := make([]int, n)
			sizes := map[int]bool{}
			next := 0
			for k := 1; k <= shards; k++ {
				s, err := New(k, shards)
				if err != nil {
					t.Fatal(err)
				}
				lo, hi := s.Range(n)
				if lo != next {
					t.Fatalf("n=%d %s starts at %d, want %d (contiguous, in order)", n, s, lo, next)
				}
				next = hi
				sizes[hi-lo] = true
				for i := lo; i < hi; i++ {
					seen[i]++
				}
				for i := range n {
					if s.Owns(i, n) != (i >= lo && i < hi) {
						t.Fatalf("n=%d %s: Owns(%d) disagrees with Range [%d, %d)", n, s, i, lo, hi)
					}
				}
			}
			if next != n {
				t.Fatalf("n=%d, %d shards end at %d", n, shards, next)
			}
			for i, c := range seen {
				if c != 1 {
					t.Fatalf("n=%d, %d shards: cell %d runs %d times", n, shards, i, c)
				}
			}
			if len(sizes) > 2 {
				t.Errorf("n=%d, %d shards: sizes %v differ by more than one", n, shards, sizes)
			}
		}
	}
}

func TestRangeDoesNotOverflow(t *testing.T) {
	s, _ := New(3, 3)
	if lo, hi := s.Range(math.MaxInt); hi != math.MaxInt || lo != math.MaxInt/3*2 {
		t.Errorf("Range(MaxInt) = [%d, %d)", lo, hi)
	}
	if lo, hi := Whole.Range(5); lo != 0 || hi != 5 {
		t.Errorf("the whole campaign is [%d, %d), want [0, 5)", lo, hi)
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]string{"1/3": "1/3", "3/3": "3/3", " 2/5 ": "2/5", "1/1": "1/1"} {
		s, err := Parse(in)
		if err != nil || s.String() != want {
			t.Errorf("Parse(%q) = %v, %v; want %s", in, s, err, want)
		}
	}
	if s, _ := Parse("1/1"); s != Whole || !s.IsWhole() {
		t.Errorf("1/1 = %#v, want Whole", s)
	}
	for _, in := range []string{"", "3", "0/3", "4/3", "-1/3", "1/0", "a/b", "1/3/5", "1.5/3", "1/-2"} {
		if _, err := Parse(in); !errors.Is(err, ErrInvalidShard) {
			t.Errorf("Parse(%q) error %v, want ErrInvalidShard", in, err)
		}
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "1/1"},
		{map[string]string{EnvShard: "2/3"}, "2/3"},
		{map[string]string{EnvJobIndex: "0", EnvShards: "3"}, "1/3"},
		{map[string]string{EnvJobIndex: "2", EnvShards: "3"}, "3/3"},
		// OUTBOXLAB_SHARD is explicit and wins over the job's index.
		{map[string]string{EnvShard: "1/2", EnvJobIndex: "2", EnvShards: "3"}, "1/2"},
	} {
		s, err := FromEnv(env(tc.env))
		if err != nil || s.String() != tc.want {
			t.Errorf("FromEnv(%v) = %v, %v; want %s", tc.env, s, err, tc.want)
		}
	}
	for _, tc := range []struct {
		env  map[string]string
		name string
	}{
		{map[string]string{EnvShard: "4/3"}, EnvShard},
		{map[string]string{EnvShards: "3"}, EnvJobIndex},
		// A completion index alone would run the whole campaign in
		// every pod of the job.
		{map[string]string{EnvJobIndex: "4"}, EnvShards},
		{map[string]string{EnvJobIndex: "0"}, EnvShards},
		{map[string]string{EnvShards: "0", EnvJobIndex: "0"}, EnvShards},
		{map[string]string{EnvShards: "x", EnvJobIndex: "0"}, EnvShards},
		{map[string]string{EnvShards: "3", EnvJobIndex: "3"}, EnvJobIndex},
		{map[string]string{EnvShards: "3", EnvJobIndex: "-1"}, EnvJobIndex},
	} {
		_, err := FromEnv(env(tc.env))
		if !errors.Is(err, ErrInvalidShard) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("FromEnv(%v) error %v, want ErrInvalidShard naming %s", tc.env, err, tc.name)
		}
	}
}

func TestResolveFlagWins(t *testing.T) {
	e := env(map[string]string{EnvShard: "2/3", EnvJobIndex: "0", EnvShards: "2"})
	if s, err := Resolve("3/4", e); err != nil || s.String() != "3/4" {
		t.Errorf("flag 3/4 over the environment = %v, %v", s, err)
	}
	if s, err := Resolve("", e); err != nil || s.String() != "2/3" {
		t.Errorf("no flag = %v, %v; want the environment's 2/3", s, err)
	}
	// A good flag wins over a bad environment; a bad flag is an error.
	if s, err := Resolve("1/2", env(map[string]string{EnvShard: "nonsense"})); err != nil || s.String() != "1/2" {
		t.Errorf("flag over a bad environment = %v, %v", s, err)
	}
	if _, err := Resolve("0/2", env(nil)); !errors.Is(err, ErrInvalidShard) {
		t.Errorf("bad flag: %v", err)
	}
}
