package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/outboxlab/outboxlab/internal/bench/result"
)

// cpuProfile records a CPU profile of this process to a file: to a
// temporary file beside it while it records, renamed into place when it
// stops, so that the file is never seen half written.
type cpuProfile struct {
	f    *os.File
	path string
}

func startCPUProfile(path string) (*cpuProfile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("creating CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("starting CPU profile: %w", err)
	}
	return &cpuProfile{f: f, path: path}, nil
}

// stop ends the profile and summarises it with its top n functions.
func (p *cpuProfile) stop(n int) (*result.Profile, error) {
	pprof.StopCPUProfile()
	tmp := p.f.Name()
	err := p.f.Sync()
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("writing CPU profile %s: %w", p.path, err)
	}
	return summarizeProfile(p.path, n)
}

// summarizeProfile reads a pprof CPU profile and returns its top n
// functions by flat and by cumulative time.
func summarizeProfile(path string, n int) (*result.Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading CPU profile: %w", err)
	}
	defer f.Close()
	prof, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("parsing CPU profile %s: %w", path, err)
	}
	// The CPU value is the second sample type (samples, cpu nanoseconds).
	vi := len(prof.SampleType) - 1
	for i, st := range prof.SampleType {
		if st.Type == "cpu" {
			vi = i
		}
	}
	flat := map[string]int64{}
	cum := map[string]int64{}
	var total int64
	for _, s := range prof.Sample {
		v := s.Value[vi]
		total += v
		seen := map[string]bool{}
		for li, loc := range s.Location {
			// A location holds its inlined calls innermost first.
			for j, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				name := line.Function.Name
				if li == 0 && j == 0 {
					flat[name] += v
				}
				if !seen[name] {
					seen[name] = true
					cum[name] += v
				}
			}
		}
	}
	out := &result.Profile{Path: path, SampledSeconds: float64(total) / 1e9}
	entry := func(name string) result.ProfileEntry {
		e := result.ProfileEntry{Func: name, FlatSeconds: float64(flat[name]) / 1e9, CumSeconds: float64(cum[name]) / 1e9}
		if total > 0 {
			e.FlatShare = float64(flat[name]) / float64(total)
			e.CumShare = float64(cum[name]) / float64(total)
		}
		return e
	}
	top := func(m map[string]int64, skip func(string) bool) []result.ProfileEntry {
		names := make([]string, 0, len(m))
		for name := range m {
			if !skip(name) {
				names = append(names, name)
			}
		}
		sort.Slice(names, func(i, j int) bool {
			if m[names[i]] != m[names[j]] {
				return m[names[i]] > m[names[j]]
			}
			return names[i] < names[j]
		})
		var es []result.ProfileEntry
		for _, name := range names[:min(n, len(names))] {
			es = append(es, entry(name))
		}
		return es
	}
	out.TopFlat = top(flat, func(string) bool { return false })
	// Goroutine entry points carry every sample below them and say
	// nothing about where the time goes.
	out.TopCum = top(cum, func(name string) bool {
		return name == "runtime.goexit" || name == "runtime.main" || name == "main.main" ||
			strings.HasPrefix(name, "testing.")
	})
	return out, nil
}
