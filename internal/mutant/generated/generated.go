// Package generated generates mutants instead of hand-picking them, runs
// them against the fast tier and judges the survivors.
//
// Two generators feed it. SQLMutants rewrites the text of every statement
// of relay.PGStore and consumer.PGInbox (comparison flips, sign and unit
// changes, now() swapped for the process's own clock, dropped and negated
// conjuncts, changed constants, dropped FOR UPDATE SKIP LOCKED, SKIP
// LOCKED, ORDER BY, RETURNING columns and ON CONFLICT DO NOTHING); a SQL
// mutant reaches the production code path through the stores' statement
// seams (relay.PGStatements, consumer.InboxStatements), and only the
// SQL-faithful tier runs those statements. GoMutants applies go-gremlins'
// operators (conditionals boundary and negation, arithmetic, increments,
// logical and negative inversions) to the Go files of relay/ and
// consumer/; a Go mutant is compiled with `go build -overlay`, which
// replaces one file in the build without touching the working tree, into
// cmd/mutantworker, which runs the fast tier on the code it was built
// from, and then the packages' own tests run with -short under the same
// overlay.
//
// A mutant that does not compile (or, for SQL, does not prepare) is
// reported as invalid, never as killed. A survivor is equivalent when
// equivalent.txt gives the reason, excluded when excluded.txt does (code
// that no tier checks by design: a log line); any other survivor is a gap,
// and meets the container tier (containers.go): its package's tests on
// containers, then the chaos catalogue with the relay and the harness
// built from the mutated code.
package generated

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
)

// Kind is what a mutant changes.
type Kind string

// Kinds.
const (
	KindSQL Kind = "sql"
	KindGo  Kind = "go"
)

// Mutant is one generated mutant.
type Mutant struct {
	// ID is stable while the mutated text is: file, statement or
	// function, operator and position.
	ID string `json:"id"`
	// Kind is sql or go.
	Kind Kind `json:"kind"`
	// File is the mutated file, relative to the module root.
	File string `json:"file"`
	// Line is the mutated line of File (0 when a SQL fragment could not
	// be located).
	Line int `json:"line"`
	// Col is a Go mutant's column on Line.
	Col int `json:"col,omitempty"`
	// Operator names the mutation operator.
	Operator string `json:"operator"`
	// Diff is the mutated line before and after, "- old\n+ new".
	Diff string `json:"diff"`
	// Stmt and SQL are a SQL mutant's statement name and mutated text.
	Stmt string `json:"stmt,omitempty"`
	SQL  string `json:"-"`
	// Source is a Go mutant's whole mutated file.
	Source []byte `json:"-"`
}

// Generate returns the SQL mutants, then the Go mutants of the module
// whose root directory is root.
func Generate(root string) ([]Mutant, error) {
	ms := SQLMutants(root)
	gms, err := GoMutants(root)
	if err != nil {
		return nil, fmt.Errorf("generating Go mutants: %w", err)
	}
	return append(ms, gms...), nil
}

// Sample returns n of ms chosen by seed alone (the same n, seed and ids
// give the same sample), in the order of ms; all of them when n is zero
// or at least len(ms).
func Sample(ms []Mutant, n int, seed uint64) []Mutant {
	if n <= 0 || n >= len(ms) {
		return ms
	}
	type keyed struct {
		k uint64
		i int
	}
	ks := make([]keyed, len(ms))
	for i, m := range ms {
		h := fnv.New64a()
		fmt.Fprintf(h, "%d\x00%s", seed, m.ID)
		ks[i] = keyed{h.Sum64(), i}
	}
	sort.Slice(ks, func(a, b int) bool { return ks[a].k < ks[b].k })
	idx := make([]int, n)
	for j := range idx {
		idx[j] = ks[j].i
	}
	slices.Sort(idx)
	out := make([]Mutant, n)
	for j, i := range idx {
		out[j] = ms[i]
	}
	return out
}

//go:embed equivalent.txt
var equivalentTxt []byte

//go:embed excluded.txt
var excludedTxt []byte

// Excluded returns the judgements of excluded.txt: mutant id to the
// reason no tier checks the mutated code by design (it changes a log
// line and nothing else). Same format as equivalent.txt.
func Excluded() (map[string]string, error) {
	return parseEquivalent(excludedTxt)
}

// Equivalent returns the judgements of equivalent.txt: mutant id to the
// reason the mutant behaves as the original does. Each line is an id, a
// tab and the reason; blank lines and lines starting with # are skipped.
func Equivalent() (map[string]string, error) {
	return parseEquivalent(equivalentTxt)
}

func parseEquivalent(b []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, reason, ok := strings.Cut(line, "\t")
		id, reason = strings.TrimSpace(id), strings.TrimSpace(reason)
		if !ok || id == "" || reason == "" {
			return nil, fmt.Errorf("equivalent.txt line %d: want an id, a tab and a reason: %q", n, line)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("equivalent.txt line %d: %s judged twice", n, id)
		}
		out[id] = reason
	}
	return out, sc.Err()
}
