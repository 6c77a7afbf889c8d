// Package inproc holds the faults that act inside a process under test:
// failpoints at named points of the relay's tick, programmed from the
// process's OUTBOX_FAILPOINTS or by a harness that runs the relay in
// process, and the clock offset of OUTBOX_CLOCK_OFFSET. It imports only the
// relay package and the standard library, so that the relay binary carries
// these hooks and nothing of the harness (no history, no checkers):
// package chaos builds its faults (FailpointFault, ClockSkew) on top of it.
//
// A relay process reads its failpoints once at start:
//
//	fp, err := inproc.FailpointsFromEnv() // nil when OUTBOX_FAILPOINTS is unset
//	if err != nil {
//		return err
//	}
//	r, err := relay.New(cfg, store, pub, relay.Options{Failpoints: fp})
package inproc
