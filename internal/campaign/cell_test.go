package campaign

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
)

func TestCellsAreScenarioBySeed(t *testing.T) {
	got, err := Cells([]string{"b", "a"}, 7, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []Cell{{"b", 7}, {"b", 8}, {"b", 9}, {"a", 7}, {"a", 8}, {"a", 9}}
	if !slices.Equal(got, want) {
		t.Errorf("Cells = %v, want %v", got, want)
	}
	// The last seeds below the largest one are a campaign; one more is not.
	if c, err := Cells([]string{"x"}, math.MaxUint64-1, 2); err != nil || c[1].Seed != math.MaxUint64 {
		t.Errorf("the two largest seeds: %v, %v", c, err)
	}
}

func TestCellsRefuseBadCampaigns(t *testing.T) {
	for _, tc := range []struct {
		scenarios []string
		first     uint64
		seeds     int
	}{
		{nil, 1, 1},
		{[]string{"a"}, 1, 0},
		{[]string{"a"}, 1, -2},
		{[]string{"a", "b", "a"}, 1, 1},
		{[]string{"a"}, math.MaxUint64, 2},
	} {
		if c, err := Cells(tc.scenarios, tc.first, tc.seeds); !errors.Is(err, ErrInvalidCampaign) {
			t.Errorf("Cells(%v, %d, %d) = %v, %v; want ErrInvalidCampaign", tc.scenarios, tc.first, tc.seeds, c, err)
		}
	}
}

// TestShardsOfACampaignRunEveryCellOnce is the property a campaign split
// over machines rests on: for every size of campaign and number of
// shards, the cells the shards select are, together, the campaign's
// cells, each once, and each shard's share is decided by its K/N alone.
func TestShardsOfACampaignRunEveryCellOnce(t *testing.T) {
	names := []string{"broker-down", "lease-expiry", "poison", "relay-crash", "db-down"}
	for nsc := 1; nsc <= len(names); nsc++ {
		for seeds := 1; seeds <= 6; seeds++ {
			whole, err := Cells(names[:nsc], 100, seeds)
			if err != nil {
				t.Fatal(err)
			}
			for n := 1; n <= len(whole)+2; n++ {
				count := map[Cell]int{}
				var union []Cell
				for k := 1; k <= n; k++ {
					s, err := New(k, n)
					if err != nil {
						t.Fatal(err)
					}
					part := Select(s, whole)
					// Deterministic: the same shard of the same campaign,
					// enumerated again, is the same cells.
					again, _ := Cells(names[:nsc], 100, seeds)
					if !slices.Equal(part, Select(s, again)) {
						t.Fatalf("%d scenarios × %d seeds, shard %s: two selections differ", nsc, seeds, s)
					}
					for _, c := range part {
						count[c]++
					}
					union = append(union, part...)
				}
				if !slices.Equal(union, whole) {
					t.Fatalf("%d scenarios × %d seeds in %d shards: the shards in order are %v, want %v", nsc, seeds, n, union, whole)
				}
				for c, k := range count {
					if k != 1 {
						t.Fatalf("%d shards: cell %s selected %d times", n, c, k)
					}
				}
				if len(count) != nsc*seeds {
					t.Fatalf("%d shards: %d distinct cells, want %d", n, len(count), nsc*seeds)
				}
			}
		}
	}
}

func TestSelectDoesNotShareCapacity(t *testing.T) {
	items := []int{1, 2, 3, 4}
	s, _ := New(1, 2)
	part := Select(s, items)
	part = append(part, 99)
	if items[2] != 3 {
		t.Errorf("appending to shard 1/2 overwrote the campaign: %v (%v)", items, part)
	}
	if got := fmt.Sprint(Select(Whole, items)); got != "[1 2 3 4]" {
		t.Errorf("the whole campaign selects %s", got)
	}
}
