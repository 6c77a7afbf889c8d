package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/outboxlab/outboxlab/testenv"
)

// dockerCheckTimeout bounds the look for a Docker engine.
const dockerCheckTimeout = 10 * time.Second

// needDocker checks that a Docker engine answers before a verb that runs
// containers; it returns exitOK, or prints what to do and returns
// exitUsage.
func (d deps) needDocker(ctx context.Context, std *stdio, verb string) int {
	cctx, cancel := context.WithTimeout(ctx, dockerCheckTimeout)
	defer cancel()
	if err := d.dockerAvailable(cctx); err != nil {
		return unavailable(std, verb, "cannot reach the Docker engine (%v): start it, or use `outboxlab sim` which needs no Docker", err)
	}
	return exitOK
}

// environmentErr explains an error starting the environment; it returns
// exitUsage when the machine cannot run the verb as it is, and 0 when err
// is something else.
func environmentErr(std *stdio, verb string, err error) int {
	switch {
	case errors.Is(err, testenv.ErrImageNotFound):
		if strings.Contains(err.Error(), "make images") {
			return unavailable(std, verb, "%v", err)
		}
		return unavailable(std, verb, "%v: build the images with `make images` (nothing is pulled from a registry)", err)
	case errors.Is(err, testenv.ErrDockerUnavailable):
		return unavailable(std, verb, "cannot reach the Docker engine (%v): start it, or use `outboxlab sim` which needs no Docker", err)
	}
	return 0
}
