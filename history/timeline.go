package history

import "sort"

// Pair is one operation as it played out: the invoke that opened it and the
// record that completed it. A record that completes nothing (an observation
// such as a fault start, a crash or a delivery recorded on its own) is a
// Pair with Done set and Invoke nil.
type Pair struct {
	// Invoke opened the operation; nil for a record on its own.
	Invoke *Op
	// Done completed it; nil while the operation stayed open: the run ended
	// or its process crashed first.
	Done *Op
	// Crashed reports that the process crashed while the operation was
	// open, which leaves its outcome unknown.
	Crashed bool
}

// Outcome returns the type that settles the operation: Done's type, or Info
// when it never completed (its outcome is unknown).
func (p Pair) Outcome() Type {
	if p.Done == nil {
		return Info
	}
	return p.Done.Type
}

// Start returns the record that opened the operation: the invoke, or the
// record itself when it stands alone.
func (p Pair) Start() Op {
	if p.Invoke != nil {
		return *p.Invoke
	}
	return *p.Done
}

// Events returns the events of the invoke, or of the completion when the
// record stands alone. A completion may carry fewer events than its invoke
// (a mark returns only the rows it marked); Done.Events says which.
func (p Pair) Events() []string {
	if p.Invoke != nil {
		return p.Invoke.Events
	}
	return p.Done.Events
}

type procFunc struct {
	process string
	f       Func
}

// Pairs matches every completion with the invoke it completes and returns
// the operations in the order they opened. A completion completes the
// oldest open invoke of the same process and function whose events include
// all of its own (or that named none, like a claim's invoke). A Crash record
// for a process closes every operation that process had open as crashed;
// a completion that arrives after that matches nothing and stands alone.
// ops must be in Index order.
//
// Where a process has several operations of one function open at once (a
// relay's pipelined marks), a completion that names no event (a mark whose
// every row the lease fence left untouched, or one that failed) fits any
// of them, and is first given the oldest. When a later completion fits
// none of the invokes still open but fits the one such a completion took,
// the two trade: the later completion takes that invoke, and the one that
// named nothing moves to the oldest invoke still open that came before it,
// which it fits as well. No completion that fits an invoke is left standing alone because
// one that named nothing came first.
func Pairs(ops []Op) []Pair {
	pairs := make([]Pair, 0, len(ops))
	open := make(map[procFunc][]int) // positions in pairs, oldest first
	// blank holds, per process and function, the positions of the pairs
	// whose invoke named events and whose completion named none: the
	// completions that could as well have completed another invoke.
	blank := make(map[procFunc][]int)
	for i := range ops {
		op := &ops[i]
		if op.F == Crash {
			for k, pos := range open {
				if k.process != op.Process {
					continue
				}
				for _, p := range pos {
					pairs[p].Crashed = true
				}
				delete(open, k)
			}
			for k := range blank {
				if k.process == op.Process {
					delete(blank, k)
				}
			}
			pairs = append(pairs, Pair{Done: op})
			continue
		}
		k := procFunc{op.Process, op.F}
		if op.Type == Invoke {
			open[k] = append(open[k], len(pairs))
			pairs = append(pairs, Pair{Invoke: op})
			continue
		}
		matched := false
		for j, p := range open[k] {
			if inv := pairs[p].Invoke; len(inv.Events) == 0 || subset(op.Events, inv.Events) {
				pairs[p].Done = op
				open[k] = append(open[k][:j:j], open[k][j+1:]...)
				if len(op.Events) == 0 && len(inv.Events) > 0 {
					blank[k] = append(blank[k], p)
				}
				matched = true
				break
			}
		}
		if !matched && len(op.Events) > 0 {
		trade:
			for j, p := range blank[k] {
				if !subset(op.Events, pairs[p].Invoke.Events) {
					continue
				}
				// The oldest invoke still open that came before the
				// completion that named nothing.
				for i, q := range open[k] {
					if pairs[q].Invoke.Index > pairs[p].Done.Index {
						break
					}
					open[k] = append(open[k][:i:i], open[k][i+1:]...)
					pairs[q].Done, pairs[p].Done = pairs[p].Done, op
					blank[k] = append(blank[k][:j:j], blank[k][j+1:]...)
					if len(pairs[q].Invoke.Events) > 0 {
						blank[k] = append(blank[k], q)
					}
					matched = true
					break trade
				}
			}
		}
		if !matched {
			pairs = append(pairs, Pair{Done: op})
		}
	}
	return pairs
}

func subset(small, big []string) bool {
	if len(small) > len(big) {
		return false
	}
	in := make(map[string]bool, len(big))
	for _, e := range big {
		in[e] = true
	}
	for _, e := range small {
		if !in[e] {
			return false
		}
	}
	return true
}

// ByEvent indexes a history by event: for every event id, the records that
// name it, in Index order. It is the timeline a person reads to see what
// became of one event.
func ByEvent(ops []Op) map[string][]Op {
	out := make(map[string][]Op)
	for _, op := range ops {
		for _, e := range op.Events {
			out[e] = append(out[e], op)
		}
	}
	for _, tl := range out {
		sort.SliceStable(tl, func(i, j int) bool { return tl[i].Index < tl[j].Index })
	}
	return out
}
