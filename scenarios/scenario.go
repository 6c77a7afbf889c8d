// Package scenarios holds the chaos catalogue: named, time-bounded runs on
// containers. A scenario is a workload (producers staging events, a share
// rolled back, transactions committing concurrently and out of id order),
// relay replicas running as containers, an idempotent consumer, a seeded
// fault schedule, a heal-and-drain phase and the checkers. One runner runs
// every scenario against any relay that follows the black-box contract:
// ours, a mutant, or another implementation given as an image or a command.
package scenarios

import (
	"time"

	"github.com/outboxlab/outboxlab/checker"
	"github.com/outboxlab/outboxlab/history"
)

// RelayUnderTest is the relay a run puts under the scenarios. It follows the
// contract of DESIGN.md §3: configured by OUTBOX_* environment variables,
// stopped with SIGTERM, killed, paused or restarted as a fault.
type RelayUnderTest struct {
	// Name is how reports call it: "ours", a mutant name, or the image or
	// command given.
	Name string
	// Image runs the relay as a container on the harness network; Command
	// runs it as a process on the host instead. Exactly one is set.
	Image   string
	Command []string
	// Env adds to (and overrides) the OUTBOX_* settings the runner passes.
	Env map[string]string
	// Features declares what the harness may assume of the relay beyond the
	// core guarantee (no lost, no phantom), which is never optional.
	Features checker.Features
}

// FaultHits is how often one fault of a run fired.
type FaultHits struct {
	Name  string `json:"name"`
	Class string `json:"class"`
	Hits  int64  `json:"hits"`
}

// Progress is a snapshot of a running scenario, for a live progress line.
type Progress struct {
	Scenario  string
	Phase     string // safety, liveness, check
	Committed int
	Delivered int
	Faults    []string // faults active now
	Left      time.Duration
}

// Result is the verdict of one scenario run.
type Result struct {
	Scenario string `json:"scenario"`
	Relay    string `json:"relay"`
	Variant  string `json:"variant"`
	Seed     uint64 `json:"seed"`
	// Valid is true when every checker passed and every intended fault
	// fired.
	Valid bool `json:"valid"`
	// Problems lists what made the run invalid, one line each.
	Problems []string       `json:"problems,omitempty"`
	Counts   checker.Counts `json:"counts"`
	Report   checker.Report `json:"-"`
	Faults   []FaultHits    `json:"faults"`
	// DrainTime is how long the backlog took to drain after heal.
	DrainTime time.Duration `json:"drain_time_ns"`
	Duration  time.Duration `json:"duration_ns"`
	// Replay is the exact command that runs the same schedule again.
	Replay  string       `json:"replay"`
	History []history.Op `json:"-"`
}
