package main

import "errors"

// row is one row of a batch, locked by the batch's transaction.
type row struct {
	seq      int64
	topic    string
	body     []byte
	corr     *string
	failures int
}

// outcome is what the publish of one row came to.
type outcome int

const (
	// unconfirmed: not published (the broker was unreachable, an earlier
	// publish of the batch failed), or published with no confirm in time
	// or over a channel that closed: trouble of the broker, not of the
	// row.
	unconfirmed outcome = iota
	// confirmed: the broker acked it and did not return it.
	confirmed
	// refused: the broker nacked it, or returned it as unroutable: a
	// failure of the row.
	refused
)

func (o outcome) String() string {
	switch o {
	case confirmed:
		return "confirmed"
	case refused:
		return "refused"
	}
	return "unconfirmed"
}

// result is the outcome of one row's publish and, unless confirmed, why.
type result struct {
	outcome outcome
	why     error
}

// errNotPublished is the why of a row the batch never published.
var errNotPublished = errors.New("not published: the broker is unreachable or an earlier publish of the batch failed")

// failure is a row to count a failure of, and why.
type failure struct {
	row row
	why error
}

// settlement is what a batch writes, in its own transaction, once its
// publishes are over: the rows to mark published and the rows whose
// failure it counts. Every other row it holds is left as it was, pending,
// and the commit frees it with the rest.
type settlement struct {
	mark []int64
	fail []failure
}

// settle decides a batch's writes from its rows' outcomes (results[i] is
// rows[i]'s): a confirmed row is marked, a refused one fails, and an
// unconfirmed one is left pending, no attempt consumed (docs/contract.md
// §2.4) but in the outage-burns-attempts bug mode, which fails it too.
func settle(b bug, rows []row, results []result) settlement {
	var s settlement
	for i, r := range rows {
		res := results[i]
		switch {
		case res.outcome == confirmed:
			s.mark = append(s.mark, r.seq)
		case res.outcome == refused, b == bugBurnAttempts:
			s.fail = append(s.fail, failure{r, res.why})
		}
	}
	return s
}
