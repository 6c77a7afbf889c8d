package seed

import "testing"

func TestStreamsAreDeterministicAndIndependent(t *testing.T) {
	draw := func(s uint64, stream string) [4]uint64 {
		r := Rand(s, stream)
		return [4]uint64{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
	}
	if draw(7, Workload) != draw(7, Workload) {
		t.Fatal("the same seed and stream gave different draws")
	}
	seen := map[[4]uint64]string{}
	for _, name := range []string{Workload, Faults, Kill, Swarm, Scheduler, Nemesis, SimWorkload, Search, Bench, "other"} {
		d := draw(7, name)
		if prev, dup := seen[d]; dup {
			t.Fatalf("streams %s and %s draw the same numbers", prev, name)
		}
		seen[d] = name
	}
	if draw(7, Workload) == draw(8, Workload) {
		t.Fatal("two seeds gave the same workload stream")
	}
}

// TestHistoricalIdentities pins the identities that recorded seeds depend
// on: changing one changes every run replayed from an older report.
func TestHistoricalIdentities(t *testing.T) {
	for name, want := range map[string]uint64{
		Workload: 0x776f726b6c6f6164, Faults: 0x6661756c7473, Kill: 0x6b696c6c,
		Scheduler: 0x9e3779b97f4a7c15, Nemesis: 0xbf58476d1ce4e5b9, SimWorkload: 0x94d049bb133111eb,
		Swarm: 0x5357_4152_4d00_0001, Search: 0x6d75_7461_6e74_0001,
	} {
		if got := ID(name); got != want {
			t.Errorf("ID(%q) = %#x, want %#x", name, got, want)
		}
	}
	if ID("a") == ID("b") {
		t.Error("hashed identities collide")
	}
}
