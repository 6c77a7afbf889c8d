package contract

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Budgets are what a relay declares it may cost beyond the core
// guarantee: what its running does to the producers' transactions, and
// how it behaves while the broker or the database is down and once it is
// back (docs/contract.md §3.3). A zero field declares no budget of its
// kind, and nothing of it is judged; the figures are measured and
// reported whatever the relay declares.
type Budgets struct {
	// ProducerP99 (producer-p99=FACTOR, such as 3x) bounds the 99th
	// percentile of the producers' transaction time while the relay runs
	// at FACTOR times that of the run's control phase, when no relay ran.
	// Only a p99 also more than ProducerMargin over the control's is over
	// the budget: below that, the difference is within the noise of a
	// loaded machine.
	ProducerP99 float64
	// OutageCPU (outage-cpu=CORES, such as 0.25) bounds the CPU each
	// replica uses, in cores, over an outage window (OutageWindow).
	OutageCPU float64
	// OutageLogs (outage-logs=N) bounds the lines each replica writes to
	// its output per second over an outage window.
	OutageLogs float64
	// OutageStatements (outage-statements=N) bounds the statements each
	// replica runs on the database per second over an outage window.
	OutageStatements float64
	// OutageConnects (outage-connects=N) bounds the TCP connections each
	// replica opens per second over an outage window, where they can be
	// counted (a replica in a container of its own).
	OutageConnects float64
	// Resume (resume=DURATION) bounds the time from the end of an outage
	// to each replica's first publish after it, for a replica that was
	// running through the outage and had rows to publish.
	Resume time.Duration
}

// ProducerMargin is how far over the control's the producers' p99 must
// be, beside over the factor, to exceed Budgets.ProducerP99.
const ProducerMargin = 250 * time.Millisecond

// OutageAfter is how long after a heal an outage window lasts: the
// outage, then the reconnection and the backlog it left.
const OutageAfter = 5 * time.Second

// DefaultBudgets are the budgets the capability "budgets" declares,
// every one that is not declared on its own.
var DefaultBudgets = Budgets{
	ProducerP99:      3,
	OutageCPU:        0.5,
	OutageLogs:       20,
	OutageStatements: 100,
	OutageConnects:   10,
	Resume:           30 * time.Second,
}

// Budget capabilities: each declares one field of Budgets; CapBudgets
// declares DefaultBudgets for every field not declared on its own.
const (
	CapBudgets          = "budgets"
	CapProducerP99      = "producer-p99"
	CapOutageCPU        = "outage-cpu"
	CapOutageLogs       = "outage-logs"
	CapOutageStatements = "outage-statements"
	CapOutageConnects   = "outage-connects"
	CapResume           = "resume"
)

// budget is one field of Budgets as a capability.
type budget struct {
	name string
	// form is the value's form in Capabilities.
	form string
	// rate: a number (a factor, cores, a rate); otherwise a duration.
	rate func(b *Budgets) *float64
	span func(b *Budgets) *time.Duration
}

var budgets = []budget{
	{name: CapProducerP99, form: "FACTOR", rate: func(b *Budgets) *float64 { return &b.ProducerP99 }},
	{name: CapOutageCPU, form: "CORES", rate: func(b *Budgets) *float64 { return &b.OutageCPU }},
	{name: CapOutageLogs, form: "PER_SECOND", rate: func(b *Budgets) *float64 { return &b.OutageLogs }},
	{name: CapOutageStatements, form: "PER_SECOND", rate: func(b *Budgets) *float64 { return &b.OutageStatements }},
	{name: CapOutageConnects, form: "PER_SECOND", rate: func(b *Budgets) *float64 { return &b.OutageConnects }},
	{name: CapResume, form: "DURATION", span: func(b *Budgets) *time.Duration { return &b.Resume }},
}

func budgetIndex(name string) int {
	for i, b := range budgets {
		if b.name == name {
			return i
		}
	}
	return -1
}

// set reads the value of budget capability i.
func (b *Budgets) set(i int, value string) error {
	c := budgets[i]
	if c.span != nil {
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s=%s is not a positive duration such as 10s", c.name, value)
		}
		*c.span(b) = d
		return nil
	}
	v := value
	if c.name == CapProducerP99 {
		v = strings.TrimSuffix(v, "x")
	}
	f, err := strconv.ParseFloat(v, 64)
	switch {
	case c.name == CapProducerP99 && (err != nil || !(f >= 1) || f > 1e9):
		return fmt.Errorf("%s=%s is not a factor of at least 1 such as 3x", c.name, value)
	case err != nil || !(f > 0) || f > 1e9:
		return fmt.Errorf("%s=%s is not a positive number such as 0.5", c.name, value)
	}
	*c.rate(b) = f
	return nil
}

// fillDefaults sets every zero field of b to DefaultBudgets'.
func (b *Budgets) fillDefaults() {
	d := DefaultBudgets
	for _, c := range budgets {
		if c.span != nil && *c.span(b) == 0 {
			*c.span(b) = *c.span(&d)
		}
		if c.rate != nil && *c.rate(b) == 0 {
			*c.rate(b) = *c.rate(&d)
		}
	}
}

// Declared reports whether b declares any budget.
func (b Budgets) Declared() bool { return b != Budgets{} }

// Outage reports whether b declares a budget of an outage.
func (b Budgets) Outage() bool {
	return b.OutageCPU > 0 || b.OutageLogs > 0 || b.OutageStatements > 0 || b.OutageConnects > 0 || b.Resume > 0
}

// strings renders every declared budget as its capability.
func (b Budgets) strings() []string {
	var out []string
	for _, c := range budgets {
		switch {
		case c.span != nil && *c.span(&b) != 0:
			out = append(out, c.name+"="+c.span(&b).String())
		case c.rate != nil && *c.rate(&b) != 0:
			v := strconv.FormatFloat(*c.rate(&b), 'g', -1, 64)
			if c.name == CapProducerP99 {
				v += "x"
			}
			out = append(out, c.name+"="+v)
		}
	}
	return out
}

// validate reports the budgets out of range, as Promises.Validate does.
func (b Budgets) validate() []error {
	var errs []error
	for _, c := range budgets {
		switch {
		case c.span != nil && *c.span(&b) < 0:
			errs = append(errs, fmt.Errorf("%s=%s is not a positive duration", c.name, *c.span(&b)))
		case c.rate != nil && !(*c.rate(&b) >= 0):
			errs = append(errs, fmt.Errorf("%s=%g is not a positive number", c.name, *c.rate(&b)))
		case c.name == CapProducerP99 && b.ProducerP99 > 0 && b.ProducerP99 < 1:
			errs = append(errs, fmt.Errorf("%s=%gx is not a factor of at least 1", c.name, b.ProducerP99))
		}
	}
	return errs
}
