package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// isolateBroker puts env in result.LayoutIsolated and returns what lifts it.
func isolateBroker(ctx context.Context, env Env) (func(), error) {
	ce, ok := env.(containerEnv)
	if !ok || ce.Postgres() == nil || ce.RabbitMQ() == nil {
		return nil, errors.New("isolating the broker needs PostgreSQL and RabbitMQ as containers of this machine")
	}
	n := runtime.NumCPU()
	if n < 2 {
		return nil, fmt.Errorf("isolating the broker needs at least 2 cores, this machine has %d", n)
	}
	others := "1"
	if n > 2 {
		others = fmt.Sprintf("1-%d", n-1)
	}
	if err := ce.RabbitMQ().SetCPUs(ctx, "0"); err != nil {
		return nil, err
	}
	all := fmt.Sprintf("0-%d", n-1)
	lift := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dockerCallTimeout)
		defer cancel()
		_ = ce.RabbitMQ().SetCPUs(cctx, all)
		_ = ce.Postgres().SetCPUs(cctx, all)
		_ = setProcessCPUs(0, n)
	}
	if err := ce.Postgres().SetCPUs(ctx, others); err != nil {
		lift()
		return nil, err
	}
	if err := setProcessCPUs(1, n); err != nil {
		lift()
		return nil, err
	}
	return lift, nil
}
