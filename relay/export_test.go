package relay

import (
	"context"
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

// SessionClosed reports whether the publisher's current connection is
// closed (none counts as closed).
func (p *AMQPPublisher) SessionClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sess == nil || p.sess.conn.IsClosed()
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

// Settings returns the configuration the publisher runs with, defaults
// applied, and its delivery options.
func (p *AMQPPublisher) Settings() (AMQPConfig, PublishOptions) { return p.cfg, p.opts }

// DialAny dials the nodes of urls from start, as the publisher does, and
// returns the index of the node that answered or every node's error.
func DialAny(ctx context.Context, cfg AMQPConfig, urls []string, start int) (int, error) {
	s, k, err := dialAny(ctx, cfg, urls, start)
	if s != nil {
		s.close()
	}
	return k, err
}
