package relay

import (
	"fmt"
	"strings"
)

// DropConnection closes the publisher's connection from under it, as a
// broker restart would; the next Publish must dial again.
func (p *AMQPPublisher) DropConnection() {
	p.mu.Lock()
	s := p.sess
	p.mu.Unlock()
	if s != nil {
		_ = s.raw.Close()
	}
}

// EditSQL replaces old by new in the statement of s named stmt (claim,
// mark, retry, park, sweep or stats): a test's regression of one
// statement. It fails when the statement does not contain old.
func (s *PGStore) EditSQL(stmt, old, new string) error {
	q := s.q.Ref(stmt)
	if q == nil {
		return fmt.Errorf("no statement %q", stmt)
	}
	if !strings.Contains(*q, old) {
		return fmt.Errorf("the %s statement has no %q:\n%s", stmt, old, *q)
	}
	*q = strings.ReplaceAll(*q, old, new)
	return nil
}
