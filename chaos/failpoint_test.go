package chaos

import (
	"context"
	"errors"
	"testing"

	"github.com/outboxlab/outboxlab/chaos/inproc"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/relay"
)

const afterClaim = relay.FailAfterClaim

func TestFailpointFault(t *testing.T) {
	fp := inproc.NewFailpoints()
	f, err := NewFailpointFault(fp, afterClaim, "1*error->off", "")
	if err != nil {
		t.Fatal(err)
	}
	if f.Name() != "failpoint after-claim=1*error->off" || f.Class() != history.ClassProcess || f.Kind() != KindFailpoint {
		t.Fatalf("fault = %q %q %q", f.Name(), f.Class(), f.Kind())
	}
	ctx := context.Background()
	if err := fp.Inject(ctx, afterClaim); err != nil {
		t.Fatal("failpoint fired before the fault was injected")
	}
	if err := f.Inject(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fp.Inject(ctx, afterClaim); !errors.Is(err, inproc.ErrInjected) {
		t.Fatalf("got %v, want inproc.ErrInjected", err)
	}
	if f.Hits() != 1 {
		t.Fatalf("hits = %d", f.Hits())
	}
	if err := f.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if fp.String() != "" {
		t.Fatalf("healed fault left %q", fp.String())
	}
	if _, err := NewFailpointFault(fp, afterClaim, "kill->off", ""); err == nil {
		t.Fatal("bad terms accepted")
	}
	if _, err := NewFailpointFault(fp, "nope", "kill", ""); err == nil {
		t.Fatal("unknown failpoint accepted")
	}
}
