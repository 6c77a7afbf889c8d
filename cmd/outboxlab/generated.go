package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/outboxlab/outboxlab/internal/mutant/generated"
	"github.com/outboxlab/outboxlab/internal/report"
	"github.com/outboxlab/outboxlab/scenarios"
)

// generatedSummary is what --generated --json prints: the counts its
// file keeps, and every mutant's outcome.
type generatedSummary struct {
	report.GeneratedCounts
	Mutants []generated.Outcome `json:"mutants"`
}

// runGenerated is mutants --generated.
func (o *mutantsOptions) runGenerated(ctx context.Context, std *stdio, d deps) int {
	switch {
	case o.kind != "sql" && o.kind != "go" && o.kind != "all":
		return usageErr(std, "mutants", "--kind must be sql, go or all, not %q", o.kind)
	case o.sample < 0:
		return usageErr(std, "mutants", "--sample must be at least 0, not %d", o.sample)
	case o.simSeeds < 1 || o.sqlSeeds < 1:
		return usageErr(std, "mutants", "--sim-seeds and --sql-seeds must be at least 1")
	case o.workers < 1 || o.workers > 2:
		return usageErr(std, "mutants", "--workers must be 1 or 2, not %d", o.workers)
	case o.tier != "sim" || o.shard != "":
		return usageErr(std, "mutants", "--generated takes no --tier or --shard")
	case len(o.mutants) > 0 && o.sample > 0:
		return usageErr(std, "mutants", "--generated takes --mutant or --sample, not both")
	}
	root, err := moduleRoot()
	if err != nil {
		return usageErr(std, "mutants", "--generated: %v", err)
	}
	start := std.now()
	seed := uint64(1)
	if o.seed.set {
		seed = o.seed.v
	}
	all, err := generated.Generate(root)
	if err != nil {
		fmt.Fprintf(std.err, "outboxlab mutants: %v\n", err)
		return exitUsage
	}
	var ms []generated.Mutant
	for _, m := range all {
		if o.kind == "all" || string(m.Kind) == o.kind {
			ms = append(ms, m)
		}
	}
	if len(o.mutants) > 0 {
		byID := map[string]generated.Mutant{}
		for _, m := range ms {
			byID[m.ID] = m
		}
		ms = ms[:0:0]
		for _, id := range o.mutants {
			m, ok := byID[id]
			if !ok {
				return usageErr(std, "mutants", "--mutant %q: no generated mutant of --kind %s has that id", id, o.kind)
			}
			ms = append(ms, m)
		}
	}
	ms = generated.Sample(ms, o.sample, seed)
	command := fmt.Sprintf("%s mutants --generated --kind %s --sample %d --seed %d --sim-seeds %d --sql-seeds %d",
		replayPrefix, o.kind, o.sample, seed, o.simSeeds, o.sqlSeeds)
	for _, id := range o.mutants {
		command += " --mutant " + shellQuote(id)
	}
	if !o.json {
		fmt.Fprintf(std.out, "SEED=%d generated=%d (of %d) sim-seeds=%d sql-seeds=%d workers=%d\n", seed, len(ms), len(all), o.simSeeds, o.sqlSeeds, o.workers)
	}
	var meta report.Meta
	if o.out != "" {
		if err := checkOutDir(o.out); err != nil {
			return unavailable(std, "mutants", "--out %s: %v", o.out, err)
		}
		meta = report.CollectMeta(ctx, start)
	}
	containers := generated.Containers{Run: o.containers, Seed: seed, Capabilities: ourCapabilities()}
	sumContainers := "off: --containers=false"
	if o.containers {
		cctx, cancel := context.WithTimeout(ctx, dockerCheckTimeout)
		err := d.dockerAvailable(cctx)
		cancel()
		if err != nil {
			containers.Run = false
			sumContainers = fmt.Sprintf("off: cannot reach the Docker engine (%v)", err)
			fmt.Fprintf(std.err, "outboxlab mutants: the container tier is off, gaps stay survivors: cannot reach the Docker engine (%v)\n", err)
		} else {
			sumContainers = "on: gaps run the package's tests on containers and the catalogue"
		}
	}
	done := 0
	outcomes, err := generated.Run(ctx, ms, generated.Options{
		Root: root, SimSeeds: o.simSeeds, SQLSeeds: o.sqlSeeds, FirstSeed: seed, Workers: o.workers, Containers: containers,
		Log: func(r generated.Outcome) {
			done++
			by := r.Tier
			if r.Status != generated.StatusKilled {
				by = "-"
			}
			t := r.Timing
			steps := fmt.Sprintf("build %.1f, sim %.1f, store %.1f, unit %.1f", t.Build, t.Sim, t.Store, t.Unit)
			if t.Containers > 0 {
				steps += fmt.Sprintf(", containers %.1f", t.Containers)
			}
			fmt.Fprintf(std.err, "[%d/%d] %s %s tier=%s checker=%s seed=%d %.1fs (%s)\n", done, len(ms), r.Status, r.ID, by, dash(r.Checker), r.Seed, r.Seconds, steps)
			if r.Status == generated.StatusKilled && r.Tier == generated.TierContainers {
				fmt.Fprintf(std.err, "  evidence: %s\n  replay: %s\n", r.Detail, r.Replay)
			}
		},
	})
	if ctx.Err() != nil {
		return interrupted(std, ctx, "mutants", fmt.Sprintf("%d of %d generated mutants finished, no verdict", done, len(ms)))
	}
	if err != nil {
		fmt.Fprintf(std.err, "outboxlab mutants: %v\n", err)
		return exitUsage
	}
	sum := summarize(outcomes)
	sum.Seconds = std.now().Sub(start).Seconds()
	sum.Containers = sumContainers
	if o.json {
		b, err := json.Marshal(sum)
		if err != nil {
			fmt.Fprintf(std.err, "outboxlab mutants: encoding the summary: %v\n", err)
			return exitUsage
		}
		fmt.Fprintln(std.out, string(b))
	} else {
		writeGenerated(std, sum)
	}
	if o.out != "" {
		gf := report.GeneratedFile{Meta: meta, Command: command, GeneratedCounts: sum.GeneratedCounts}
		if err := report.WriteFile(o.out, report.FileGenerated, gf); err != nil {
			fmt.Fprintf(std.err, "outboxlab mutants: %v\n", err)
			return exitUsage
		}
		if !o.json {
			fmt.Fprintf(std.out, "results: %s\n", filepath.Join(o.out, report.FileGenerated))
		}
	}
	for _, s := range sum.Survivors {
		if s.Judgement == "gap" {
			return exitFail
		}
	}
	return exitOK
}

// summarize counts outcomes: killed_fast those the fast tier killed,
// killed_all those and the gaps the container tier killed.
func summarize(outcomes []generated.Outcome) generatedSummary {
	sum := generatedSummary{Mutants: outcomes}
	sum.Generated, sum.ByTier, sum.Survivors = len(outcomes), map[string]int{}, []report.GeneratedSurvivor{}
	for _, r := range outcomes {
		switch r.Status {
		case generated.StatusInvalid:
			sum.Invalid++
		case generated.StatusKilled:
			if r.Tier != generated.TierContainers {
				sum.KilledFast++
			}
			sum.KilledAll++
			sum.ByTier[r.Tier]++
		case generated.StatusSurvived:
			switch {
			case strings.HasPrefix(r.Judgement, "equivalent"):
				sum.Equivalent++
			case strings.HasPrefix(r.Judgement, "excluded"):
				sum.Excluded++
			}
			sum.Survivors = append(sum.Survivors, report.GeneratedSurvivor{ID: r.ID, File: r.File, Line: r.Line, Diff: r.Diff, Judgement: r.Judgement})
		}
	}
	if n := sum.Generated - sum.Invalid - sum.Equivalent - sum.Excluded; n > 0 {
		sum.Score = float64(sum.KilledAll) / float64(n)
	}
	return sum
}

func writeGenerated(std *stdio, sum generatedSummary) {
	fmt.Fprintf(std.out, "generated=%d invalid=%d killed_fast=%d equivalent=%d excluded=%d survivors=%d score=%.1f%% seconds=%.0f\n",
		sum.Generated, sum.Invalid, sum.KilledFast, sum.Equivalent, sum.Excluded, len(sum.Survivors), 100*sum.Score, sum.Seconds)
	for t, n := range sum.ByTier {
		fmt.Fprintf(std.out, "  killed by %s: %d\n", t, n)
	}
	for _, s := range sum.Survivors {
		fmt.Fprintf(std.out, "\nsurvivor %s (%s:%d): %s\n  %s\n", s.ID, s.File, s.Line, s.Judgement, strings.ReplaceAll(s.Diff, "\n", "\n  "))
	}
}

// moduleRoot finds the outboxlab module's root from the working
// directory up: the Go mutants are built from its sources.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/outboxlab/outboxlab\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("run it inside the outboxlab module: no go.mod of github.com/outboxlab/outboxlab above the working directory")
		}
		dir = parent
	}
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain
// characters: generated mutant ids hold spaces and angle brackets.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:@+=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ourCapabilities is what a relay built from this repository declares to
// the catalogue when it runs as a host process: everything ours does.
func ourCapabilities() string {
	return scenarios.Ours().Promises.String()
}
