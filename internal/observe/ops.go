package observe

import (
	"time"

	"github.com/outboxlab/outboxlab/history"
)

// Ops turns transitions into operations of package history, in the shape
// a relay's own records give them (docs/contract.md §3.5), so that a
// checker can take observed operations where it takes a relay's records:
//
//   - Claimed: Claim ok, DBTime = now() of the claiming transaction,
//     Until = the lease end it left (locked_until); Detail names the
//     ClaimKind;
//   - Marked: Mark ok, DBTime = now() of the marking transaction;
//   - Retried: Retry ok, Attempts = the attempts after it, DBTime, and
//     Until = the next eligible time it left (locked_until);
//   - Parked: Retry ok with Parked set when attempts grew in the same
//     change (a retry at the attempt limit, as a relay records it), else
//     Park ok; DBTime;
//   - Deleted: Sweep ok, DBTime; Detail says what the rows were
//     (processed, pending or faulted). No retention cutoff: only the
//     relay knows it.
//
// A relay's records have no extension of a lease: an extension is a Claim
// by the lease's own holder before the lease's end, which the lease
// checker (checker.Leases) reads as a claim over a live lease until it
// tells the two apart by process.
//
// Inserted, Released and Updated changes have no operation. Every op is
// a single ok record (no invoke; history.Pairs makes it a pair of its
// own), of Process = processes[Session], or Session itself when
// processes has no entry for it. Changes of one transaction (its id and
// its start, TxTime: ids start again on a restored server), one session
// and one function with the same details (kind of claim, lease end,
// attempts, state) make one op whose Events are the rows' ids in the
// order they changed; the op stands where its first change stands. Time
// is the database's clock_timestamp() at that first change: on one host
// it is the clock a harness stamps its own records with, but the op's
// database times are in DBTime. Index counts the ops from 0.
func Ops(ts []Transition, processes map[string]string) []history.Op {
	// A transaction is its id, its session and its start: transaction
	// ids start again on a server restored from a dump, and a new
	// transaction may get an id an old one had.
	type key struct {
		xid     int64
		tx      time.Time
		session string
		f       history.Func
		detail  string
		parked  bool
		attempt int
		until   time.Time
	}
	var out []history.Op
	at := make(map[key]int)
	for _, t := range ts {
		k := key{xid: t.Xid, tx: t.TxTime, session: t.Session}
		switch t.Kind {
		case Claimed:
			k.f, k.detail, k.until = history.Claim, "claim "+string(t.Claim), t.New.LockedUntil
		case Marked:
			k.f = history.Mark
		case Retried:
			k.f, k.attempt, k.until = history.Retry, t.New.Attempts, t.New.LockedUntil
		case Parked:
			if t.AttemptsGrew {
				k.f, k.parked, k.attempt, k.until = history.Retry, true, t.New.Attempts, t.New.LockedUntil
			} else {
				k.f = history.Park
			}
		case Deleted:
			k.f, k.detail = history.Sweep, "deleted "+string(t.State)
		default:
			continue
		}
		if i, ok := at[k]; ok {
			out[i].Events = append(out[i].Events, t.ID)
			continue
		}
		process := t.Session
		if p, ok := processes[t.Session]; ok {
			process = p
		}
		at[k] = len(out)
		out = append(out, history.Op{
			Index:   int64(len(out)),
			Time:    t.At,
			Process: process,
			Type:    history.OK,
			F:       k.f,
			Events:  []string{t.ID},
			Meta: history.Meta{
				Attempts: k.attempt,
				Parked:   k.parked,
				DBTime:   t.TxTime,
				Until:    k.until,
				Detail:   k.detail,
			},
		})
	}
	return out
}
