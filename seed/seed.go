// Package seed splits the one seed of a run into independent, named random
// streams. Every random choice of the harness (the workload, the fault
// schedule, the simulation's scheduler, the swarm parameters) draws from
// its own stream, so that adding draws to one never changes another, and
// the same seed replays the same run:
//
//	plan := workload.Draw(seed.Rand(s, seed.Workload))
//
// A stream is PCG seeded with the run's seed and the stream's identity.
// The streams that existed before this package keep their historical
// identities, so seeds recorded in older reports and regression tests
// replay the same runs; any other name is identified by its FNV-1a hash.
package seed

import (
	"hash/fnv"
	"math/rand/v2"
)

// Streams of the harness.
const (
	// Workload draws a chaos scenario's transactions (events, poison,
	// rollbacks, crashes).
	Workload = "workload"
	// Faults draws a chaos scenario's fault schedule.
	Faults = "faults"
	// Kill draws where a crash failpoint kills a relay.
	Kill = "kill"
	// Swarm draws the simulation's swarm parameters.
	Swarm = "sim/swarm"
	// Scheduler draws the simulation's interleaving of processes.
	Scheduler = "sim/scheduler"
	// Nemesis draws the simulation's faults.
	Nemesis = "sim/nemesis"
	// SimWorkload draws the simulation's producers' transactions.
	SimWorkload = "sim/workload"
	// Search draws the mutant matrix's state-machine cases.
	Search = "mutant/search"
	// Bench draws the benchmark's staged events.
	Bench = "bench/workload"
)

// historical are the identities the streams had before they had names.
var historical = map[string]uint64{
	Workload:    0x776f726b6c6f6164, // "workload" in ASCII
	Faults:      0x6661756c7473,     // "faults"
	Kill:        0x6b696c6c,         // "kill"
	Swarm:       0x5357_4152_4d00_0001,
	Scheduler:   0x9e3779b97f4a7c15,
	Nemesis:     0xbf58476d1ce4e5b9,
	SimWorkload: 0x94d049bb133111eb,
	Search:      0x6d75_7461_6e74_0001,
}

// ID returns the identity of the named stream.
func ID(stream string) uint64 {
	if id, ok := historical[stream]; ok {
		return id
	}
	h := fnv.New64a()
	h.Write([]byte(stream))
	return h.Sum64()
}

// Rand returns the named stream of seed s.
func Rand(s uint64, stream string) *rand.Rand {
	return rand.New(rand.NewPCG(s, ID(stream)))
}
