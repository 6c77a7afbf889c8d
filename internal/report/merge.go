package report

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outboxlab/outboxlab/internal/campaign"
)

// ErrMixedCommits is returned by Merge for bundles whose runs come from
// different commits, unless MergeOptions.AllowMixedCommits is set.
var ErrMixedCommits = errors.New("bundles of different commits")

// ErrNotOneCampaign is returned by Merge for results that are not shards
// of one campaign: different campaigns, different splits, a shard twice,
// or a kind of run (the demo) that only one bundle may hold.
var ErrNotOneCampaign = errors.New("not the shards of one campaign")

// MergeOptions tunes Merge.
type MergeOptions struct {
	// AllowMixedCommits merges bundles of different commits; their
	// sections then name the commit of each shard.
	AllowMixedCommits bool
}

// Merge joins bundles, the shards of campaigns that ran on several
// machines, into one bundle for WriteMarkdown and BundlePage. One bundle
// is returned as it is. Of several, every results file must come from one
// commit (else an error wrapping ErrMixedCommits names two files and their
// commits, unless opts allow it), and the files of each kind must be
// distinct shards of one campaign split the same way (else an error
// wrapping ErrNotOneCampaign): the sharding then guarantees that no cell
// is counted twice. The merged files list their parts, so that a report
// names the shards it lacks. The merged bundle has no Dir: its Dirs are
// the bundles', and its history paths name the bundles they are in.
func Merge(bundles []Bundle, opts MergeOptions) (Bundle, error) {
	switch len(bundles) {
	case 0:
		return Bundle{}, errors.New("merging results: no bundle")
	case 1:
		return bundles[0], nil
	}
	if !opts.AllowMixedCommits {
		if err := sameCommit(bundles); err != nil {
			return Bundle{}, err
		}
	}
	out := Bundle{}
	for _, b := range bundles {
		out.Dirs = append(out.Dirs, b.Dir)
	}
	var err error
	if out.Demo, err = onlyOne(bundles, FileDemo, func(b Bundle) *ScenarioFile { return b.Demo }); err != nil {
		return Bundle{}, err
	}
	if out.Demo != nil {
		d := *out.Demo
		d.Runs = rebase(d.Runs, dirOf(bundles, func(b Bundle) bool { return b.Demo != nil }))
		out.Demo = &d
	}
	for _, b := range bundles {
		if b.Bench != nil {
			out.Benches = append(out.Benches, b.Bench)
		}
	}
	if len(out.Benches) > 0 {
		out.Bench = out.Benches[0]
	}
	for _, b := range bundles {
		out.Soaks = append(out.Soaks, b.soaks()...)
	}
	if out.Generated, err = onlyOne(bundles, FileGenerated, func(b Bundle) *GeneratedFile { return b.Generated }); err != nil {
		return Bundle{}, err
	}
	groups := byRelay(bundles)
	if out.Scenarios, err = mergeScenarios(groups[0]); err != nil {
		return Bundle{}, err
	}
	for _, g := range groups[1:] {
		f, err := mergeScenarios(g)
		if err != nil {
			return Bundle{}, err
		}
		switch {
		case queueOf(f) != "":
			out.Cluster = append(out.Cluster, f)
		case databaseOf(f) != "":
			out.Database = append(out.Database, f)
		case subjectOf(f) != "":
			out.Consumers = append(out.Consumers, f)
		default:
			out.Relays = append(out.Relays, f)
		}
	}
	fakes, sqls := bySimTier(bundles)
	if out.Sim, err = mergeSim(fakes); err != nil {
		return Bundle{}, err
	}
	if out.SimSQL, err = mergeSim(sqls); err != nil {
		return Bundle{}, err
	}
	if out.Mutants, err = mergeMutants(bundles); err != nil {
		return Bundle{}, err
	}
	return out, nil
}

// file is a results file of one bundle, named for errors.
type file struct {
	path string
	meta Meta
	part *Part
}

// files lists the results files of b.
func (b Bundle) files() []file {
	var fs []file
	add := func(name string, m Meta, p *Part) {
		fs = append(fs, file{filepath.Join(b.Dir, name), m, p})
	}
	if b.Demo != nil {
		add(FileDemo, b.Demo.Meta, nil)
	}
	if b.Scenarios != nil {
		add(FileScenarios, b.Scenarios.Meta, b.Scenarios.Part)
	}
	if b.Sim != nil {
		add(FileSim, b.Sim.Meta, b.Sim.Part)
	}
	if b.Mutants != nil {
		add(FileMutants, b.Mutants.Meta, b.Mutants.Part)
	}
	if b.Generated != nil {
		add(FileGenerated, b.Generated.Meta, nil)
	}
	if b.Bench != nil {
		add(FileBench, b.Bench.Meta, nil)
	}
	return fs
}

// sameCommit checks that every file of every bundle names one commit.
func sameCommit(bundles []Bundle) error {
	var first *file
	for _, b := range bundles {
		for _, f := range b.files() {
			if first == nil {
				first = &f
				continue
			}
			if f.meta.Commit != first.meta.Commit {
				return fmt.Errorf("%w: %s is of commit %s, %s of commit %s", ErrMixedCommits,
					first.path, orUnknown(first.meta.Commit), f.path, orUnknown(f.meta.Commit))
			}
		}
	}
	return nil
}

// onlyOne returns the one file of a kind that is not sharded (the demo,
// the benchmark), or an error when two bundles hold one.
func onlyOne[T any](bundles []Bundle, name string, get func(Bundle) *T) (*T, error) {
	var found *T
	var from string
	for _, b := range bundles {
		f := get(b)
		if f == nil {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("%w: %s and %s are both %s, which is not split into shards: give one of them", ErrNotOneCampaign,
				filepath.Join(from, name), filepath.Join(b.Dir, name), name)
		}
		found, from = f, b.Dir
	}
	return found, nil
}

func dirOf(bundles []Bundle, has func(Bundle) bool) string {
	for _, b := range bundles {
		if has(b) {
			return b.Dir
		}
	}
	return ""
}

// rebase returns runs with their history paths joined to dir, the bundle
// they are in.
func rebase(runs []ScenarioRun, dir string) []ScenarioRun {
	out := slices.Clone(runs)
	for i := range out {
		if out[i].History != "" {
			out[i].History = filepath.Join(dir, out[i].History)
		}
	}
	return out
}

// shardFile is one bundle's file of a sharded kind, with its part.
type shardFile[T any] struct {
	dir   string
	f     *T
	part  Part
	shard campaign.Shard
}

// shards returns the files of one kind in shard order, after checking
// that they are distinct shards of one campaign, split the same way.
func shards[T any](bundles []Bundle, name string, get func(Bundle) *T, partOf func(*T) *Part) ([]shardFile[T], error) {
	var out []shardFile[T]
	for _, b := range bundles {
		f := get(b)
		if f == nil {
			continue
		}
		path := filepath.Join(b.Dir, name)
		p := partOf(f)
		if p == nil {
			return nil, fmt.Errorf("%w: %s does not say which campaign and shard it holds (an older outboxlab wrote it): write it again to merge it", ErrNotOneCampaign, path)
		}
		s, err := campaign.Parse(p.Shard)
		if err != nil {
			return nil, fmt.Errorf("%s: part: %w", path, err)
		}
		for _, o := range out {
			prev := filepath.Join(o.dir, name)
			switch {
			case o.part.Campaign != p.Campaign:
				return nil, fmt.Errorf("%w: %s is of the campaign `%s`, %s of `%s`", ErrNotOneCampaign, prev, o.part.Campaign, path, p.Campaign)
			case o.shard.N() != s.N():
				return nil, fmt.Errorf("%w: %s holds shard %s, %s shard %s: the shards of a campaign must split it the same way", ErrNotOneCampaign, prev, o.shard, path, s)
			case o.shard == s:
				return nil, fmt.Errorf("%w: %s and %s both hold shard %s of `%s`", ErrNotOneCampaign, prev, path, s, p.Campaign)
			}
		}
		out = append(out, shardFile[T]{dir: b.Dir, f: f, part: *p, shard: s})
	}
	slices.SortFunc(out, func(a, b shardFile[T]) int { return cmp.Compare(a.shard.K(), b.shard.K()) })
	return out, nil
}

func parts[T any](fs []shardFile[T]) []Part {
	var ps []Part
	for _, f := range fs {
		ps = append(ps, f.part)
	}
	return ps
}

// newest returns the latest of metas.
func newest(metas []Meta) Meta {
	var m Meta
	for _, x := range metas {
		if x.Date > m.Date {
			m = x
		}
	}
	return m
}

// relayOf names the relay of a scenario file's runs, or of a file
// without runs its cells that did not run ("" for none, or cells that do
// not name it).
func relayOf(f *ScenarioFile) string {
	switch {
	case f == nil:
		return ""
	case len(f.Runs) > 0:
		return f.Runs[0].Relay
	case len(f.NotApplicable) > 0:
		return f.NotApplicable[0].Relay
	}
	return ""
}

// queueOf returns the queue type of a file's runs: set for a broker
// cluster campaign, empty otherwise.
func queueOf(f *ScenarioFile) string {
	if f == nil || len(f.Runs) == 0 {
		return ""
	}
	return f.Runs[0].Queue
}

// databaseOf returns what a file's runs did to the database (a failover
// to a standby, a restore); empty for the others.
func databaseOf(f *ScenarioFile) string {
	if f == nil || len(f.Runs) == 0 {
		return ""
	}
	return f.Runs[0].Database
}

// subjectOf returns what a file's runs put under test: empty for the
// relay, "consumers" for the consumers' scenarios.
func subjectOf(f *ScenarioFile) string {
	if f == nil || len(f.Runs) == 0 {
		return ""
	}
	return f.Runs[0].Subject
}

// byRelay groups the bundles' scenario files by the relay they ran
// against, for broker cluster campaigns the queue type, and the campaign
// (two campaigns of one relay, such as a catalogue and a scenario run
// again, are two groups), each group a campaign of its own to merge: ours
// on one node first (or the first bundle's relay when ours is not among
// them), then the others by name and campaign. A file that ran nothing
// joins the first group. Each group's bundles carry their scenario file
// alone.
func byRelay(bundles []Bundle) [][]Bundle {
	kind := func(f *ScenarioFile) string {
		if q := queueOf(f); q != "" {
			return relayOf(f) + " on a cluster, " + q + " queues"
		}
		if sub := subjectOf(f); sub != "" {
			return relayOf(f) + ", " + sub + " under test"
		}
		if st := databaseOf(f); st != "" {
			return relayOf(f) + ", " + st
		}
		return relayOf(f)
	}
	key := func(f *ScenarioFile) string {
		k := kind(f)
		if k != "" && f.Part != nil {
			k += "\x00" + f.Part.Campaign
		}
		return k
	}
	first := ""
	for _, b := range bundles {
		if r := key(b.Scenarios); r != "" && (first == "" || kind(b.Scenarios) == "ours") {
			first = r
		}
	}
	by := map[string][]Bundle{}
	for _, b := range bundles {
		if b.Scenarios == nil {
			continue
		}
		r := key(b.Scenarios)
		if r == "" {
			r = first
		}
		by[r] = append(by[r], Bundle{Dir: b.Dir, Scenarios: b.Scenarios})
	}
	groups := [][]Bundle{by[first]}
	for _, r := range slices.Sorted(maps.Keys(by)) {
		if r != first {
			groups = append(groups, by[r])
		}
	}
	return groups
}

func mergeScenarios(bundles []Bundle) (*ScenarioFile, error) {
	fs, err := shards(bundles, FileScenarios, func(b Bundle) *ScenarioFile { return b.Scenarios }, func(f *ScenarioFile) *Part { return f.Part })
	if err != nil || len(fs) == 0 {
		return nil, err
	}
	out := &ScenarioFile{Parts: parts(fs)}
	var metas []Meta
	var stopped []string
	for _, f := range fs {
		metas = append(metas, f.f.Meta)
		out.Runs = append(out.Runs, rebase(f.f.Runs, f.dir)...)
		out.Unfinished = append(out.Unfinished, f.f.Unfinished...)
		out.NotApplicable = append(out.NotApplicable, f.f.NotApplicable...)
		if f.f.Stopped != "" {
			stopped = append(stopped, fmt.Sprintf("shard %s: %s", f.shard, f.f.Stopped))
		}
		if f.f.Findings != "" && !strings.Contains(out.Findings, f.f.Findings) {
			out.Findings = strings.TrimSpace(out.Findings + "\n\n" + f.f.Findings)
		}
	}
	out.Meta = newest(metas)
	out.Stopped = strings.Join(stopped, "; ")
	return out, nil
}

// bySimTier splits the bundles' simulation batches into those of the
// fakes and those of the SQL-faithful tier, each bundle carrying its
// batch alone: two campaigns merged apart.
func bySimTier(bundles []Bundle) (fakes, sqls []Bundle) {
	for _, b := range bundles {
		switch {
		case b.Sim == nil:
		case b.Sim.Tier == SimTierSQL:
			sqls = append(sqls, Bundle{Dir: b.Dir, Sim: b.Sim})
		default:
			fakes = append(fakes, Bundle{Dir: b.Dir, Sim: b.Sim})
		}
	}
	return fakes, sqls
}

func mergeSim(bundles []Bundle) (*SimFile, error) {
	fs, err := shards(bundles, FileSim, func(b Bundle) *SimFile { return b.Sim }, func(f *SimFile) *Part { return f.Part })
	if err != nil || len(fs) == 0 {
		return nil, err
	}
	out := &SimFile{Mutant: fs[0].f.Mutant, Replay: fs[0].part.Campaign, First: fs[0].f.First, Tier: fs[0].f.Tier}
	var metas []Meta
	steps := 0.0
	for _, f := range fs {
		s := f.f.Summary
		metas = append(metas, f.f.Meta)
		out.Pieces = append(out.Pieces, *f.f)
		out.First = min(out.First, f.f.First)
		if s.Failed > 0 && (out.Summary.Failed == 0 || s.FirstFailureSeed < out.Summary.FirstFailureSeed) {
			out.Summary.FirstFailureSeed = s.FirstFailureSeed
		}
		out.Summary.Seeds += s.Seeds
		out.Summary.Failed += s.Failed
		out.Summary.Events += s.Events
		steps += s.StepsPerSeed * float64(s.Seeds)
		for _, x := range f.f.Failures {
			if x.History != "" {
				x.History = filepath.Join(f.dir, x.History)
			}
			out.Failures = append(out.Failures, x)
		}
	}
	if out.Summary.Seeds > 0 {
		out.Summary.StepsPerSeed = steps / float64(out.Summary.Seeds)
	}
	// The rate and the history hash are the shards' own: neither adds up.
	out.Meta = newest(metas)
	return out, nil
}

func mergeMutants(bundles []Bundle) (*MutantFile, error) {
	fs, err := shards(bundles, FileMutants, func(b Bundle) *MutantFile { return b.Mutants }, func(f *MutantFile) *Part { return f.Part })
	if err != nil || len(fs) == 0 {
		return nil, err
	}
	out := &MutantFile{Tier: fs[0].f.Tier, Parts: parts(fs)}
	var metas []Meta
	for _, f := range fs {
		metas = append(metas, f.f.Meta)
		for _, c := range f.f.Checkers {
			if !slices.Contains(out.Checkers, c) {
				out.Checkers = append(out.Checkers, c)
			}
		}
	rows:
		for _, r := range f.f.Mutants {
			for i, prev := range out.Mutants {
				if prev.Name != r.Name {
					continue
				}
				if !r.Reference {
					return nil, fmt.Errorf("%w: mutant %s is in two shards", ErrNotOneCampaign, r.Name)
				}
				// The infrastructure tier's reference runs in every shard,
				// over that shard's scenarios: it survived the campaign if
				// it survived every shard.
				out.Mutants[i] = joinReference(prev, r)
				continue rows
			}
			out.Mutants = append(out.Mutants, r)
		}
	}
	out.Meta = newest(metas)
	return out, nil
}

// joinReference joins the rows of the reference from two shards.
func joinReference(a, b MutantRow) MutantRow {
	out := a
	out.Seeds += b.Seeds
	out.Seconds += b.Seconds
	if !a.Killed && b.Killed {
		out.Killed, out.KilledBy, out.FirstKill, out.Replay, out.Checker, out.Scenario, out.Steps =
			true, b.KilledBy, b.FirstKill, b.Replay, b.Checker, b.Scenario, b.Steps
	}
	if !out.Killed && a.Scenario != b.Scenario {
		out.Scenario = a.Scenario + "; " + b.Scenario
	}
	return out
}

// MissingShards returns the shards of the campaign of parts that none of
// them holds, e.g. ["2/3"]; parts are of one campaign, split the same way.
func MissingShards(parts []Part) []string {
	if len(parts) == 0 {
		return nil
	}
	first, err := campaign.Parse(parts[0].Shard)
	if err != nil {
		return nil
	}
	have := map[int]bool{}
	for _, p := range parts {
		if s, err := campaign.Parse(p.Shard); err == nil {
			have[s.K()] = true
		}
	}
	var missing []string
	for k := 1; k <= first.N(); k++ {
		if !have[k] {
			missing = append(missing, fmt.Sprintf("%d/%d", k, first.N()))
		}
	}
	return missing
}
