package relay

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
