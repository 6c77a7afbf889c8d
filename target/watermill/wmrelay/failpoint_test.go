package wmrelay

import (
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxlab/outboxlab/chaos/inproc"
	"github.com/outboxlab/outboxlab/relay"
)

// TestAfterConfirm passes the failpoint only after the forwarder's
// handler published a message (its error returned), so that the action
// comes before the message, and its offset, is acked.
func TestAfterConfirm(t *testing.T) {
	fp := inproc.NewFailpoints(FailpointNames...)
	if err := fp.Set(relay.FailAfterConfirmBeforeMark, "1*off->error"); err != nil {
		t.Fatal(err)
	}
	failing := errors.New("publish failed")
	var publishErr error
	h := afterConfirm(fp)(func(*message.Message) ([]*message.Message, error) { return nil, publishErr })
	m := message.NewMessage("1", nil)
	if _, err := h(m); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	publishErr = failing
	if _, err := h(m); !errors.Is(err, failing) || fp.Passes(relay.FailAfterConfirmBeforeMark) != 1 {
		t.Fatalf("a failed publish: %v, %d passes; want its error and no pass", err, fp.Passes(relay.FailAfterConfirmBeforeMark))
	}
	publishErr = nil
	if _, err := h(m); !errors.Is(err, inproc.ErrInjected) {
		t.Fatalf("second confirmed publish: %v, want the injected error, so the message is nacked", err)
	}
}
