package checker

import "github.com/outboxlab/outboxlab/contract"

// WithPromises returns c judging what a relay promises, and only that:
// Features.Parks, Fenced, Sweeps and Deletes as p declares them,
// Features.Unlocked for a relay that declares locking=none; Lease, the length
// of a lease locking style (0, not checked, for a lease of undeclared
// length or another style); MaxAttempts, the declared attempt limit;
// Backoff, the declared retry backoff (judged on retry records that carry
// database times); and Retention, replaced by a declared retention. What p
// does not declare is not judged, so nothing of one relay is assumed of
// another. Features.Stages, Poison and the rest of c describe the run, not
// the relay, and are kept. The checkers of the core guarantee (lost,
// phantom, unexpected, duplicate deliveries, duplicate effects) run
// whatever p declares.
func (c Config) WithPromises(p contract.Promises) Config {
	c.Features.Parks, c.Features.Fenced, c.Features.Sweeps, c.Features.Deletes = p.Parks, p.Fenced, p.Sweeps, p.Deletes
	c.Features.Unlocked = p.Locking.Style == contract.LockingNone
	c.Lease, c.MaxAttempts, c.Backoff = 0, p.Attempts, nil
	if p.Locking.Style == contract.LockingLease {
		c.Lease = p.Locking.Lease
	}
	if p.Backoff.Declared() {
		c.Backoff = p.Backoff.Wait
	}
	if p.Retention > 0 {
		c.Retention = p.Retention
	}
	return c
}
