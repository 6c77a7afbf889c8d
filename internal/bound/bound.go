// Package bound bounds a blocking call that takes no context (an amqp091
// or toxiproxy client call) by a context: the caller gets its answer, or
// the context's error as soon as the context ends, and a cancel hook can
// break the call (close its socket) so that it does not linger.
package bound

import "context"

// Call runs fn and returns its error, or ctx's error when ctx ends first.
// In that case onCancel, when not nil, runs at once (typically closing the
// connection fn blocks on, which makes fn return), and fn finishes in the
// background; its result is dropped. A ctx that has already ended runs
// nothing.
func Call(ctx context.Context, fn func() error, onCancel func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if onCancel != nil {
			onCancel()
		}
		return ctx.Err()
	}
}
