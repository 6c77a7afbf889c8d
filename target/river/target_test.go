package rvtarget_test

import (
	"testing"
	"time"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/contract"
	"github.com/outboxlab/outboxlab/scenarios"
	rvtarget "github.com/outboxlab/outboxlab/target/river"
	"github.com/outboxlab/outboxlab/target/river/rvoutbox"
)

// TestTarget checks what the target runs and declares: River's outbox,
// the command it is given with River's settings, a lease as long as the
// rescue-after it runs River with and the rows view assumes (the
// harness's lease), River's attempt limit and retention, and nothing
// else.
func TestTarget(t *testing.T) {
	u := rvtarget.Target("/bin/river-relay")
	if err := u.Outbox.Validate(); err != nil || !u.Outbox.Own() || u.Outbox.Table != rvoutbox.TableName {
		t.Fatalf("outbox: own %v, table %q, %v", u.Outbox.Own(), u.Outbox.Table, err)
	}
	if err := u.Promises.Validate(); err != nil {
		t.Fatal(err)
	}
	want := contract.Promises{Locking: contract.Lease(rvoutbox.RescueAfter), Sweeps: true, Retention: 24 * time.Hour}
	switch {
	case u.Name != rvtarget.Name || u.Image != "" || len(u.Command) != 1 || u.Command[0] != "/bin/river-relay":
		t.Errorf("name %q, image %q, command %q", u.Name, u.Image, u.Command)
	case u.Promises != want:
		t.Errorf("declares %s, want %s", u.Promises, want)
	case u.Replay != "--relay river" || u.Identity != (consumer.Identity{}):
		t.Errorf("replay %q, identity %s", u.Replay, u.Identity)
	case u.Env["RIVER_RESCUE_AFTER"] != rvoutbox.RescueAfter.String() || u.Env["RIVER_JOB_TIMEOUT"] != rvtarget.JobTimeout.String() || len(u.Env) != 2:
		t.Errorf("env %v", u.Env)
	}
	if rvoutbox.RescueAfter != scenarios.Lease {
		t.Errorf("River's rescue-after %s is not the harness's lease %s, which lease-expiry freezes a replica past", rvoutbox.RescueAfter, scenarios.Lease)
	}
	if rvtarget.JobTimeout >= rvoutbox.RescueAfter || rvtarget.JobTimeout <= scenarios.PublishTimeout {
		t.Errorf("job timeout %s: want it above the publish timeout %s and below the rescue-after %s", rvtarget.JobTimeout, scenarios.PublishTimeout, rvoutbox.RescueAfter)
	}
}
