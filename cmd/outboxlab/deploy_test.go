package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/outboxlab/outboxlab/internal/argv"
	"github.com/outboxlab/outboxlab/internal/campaign"
)

// parseCommand parses an outboxlab command line (after "outboxlab" or
// "go run ./cmd/outboxlab") with the real verb's flag set, and returns
// the verb and the flags' values by name.
func parseCommand(t *testing.T, args []string) (string, map[string]string) {
	t.Helper()
	if len(args) == 0 {
		t.Fatal("empty outboxlab command")
	}
	v, ok := findVerb(args[0])
	if !ok {
		t.Fatalf("%q: unknown verb %q", args, args[0])
	}
	fs, _ := v.newFlagSet(io.Discard)
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("outboxlab %s: %v", strings.Join(args, " "), err)
	}
	if fs.NArg() > 0 {
		t.Fatalf("outboxlab %s: unexpected argument %q", strings.Join(args, " "), fs.Arg(0))
	}
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() })
	return v.name, set
}

// ghWorkflow is what the test reads of a GitHub Actions workflow.
type ghWorkflow struct {
	Jobs map[string]struct {
		Needs    []string `yaml:"needs"`
		If       string   `yaml:"if"`
		Strategy struct {
			Matrix struct {
				Shard []int `yaml:"shard"`
			} `yaml:"matrix"`
		} `yaml:"strategy"`
		Env   map[string]string `yaml:"env"`
		Steps []struct {
			Uses string            `yaml:"uses"`
			Run  string            `yaml:"run"`
			If   string            `yaml:"if"`
			With map[string]string `yaml:"with"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// outboxlabCommand returns the arguments of the `go run ./cmd/outboxlab`
// command in a step's shell script, with env's variables ("$NAME",
// quoted or not) replaced by their values; nil when it runs none.
func outboxlabCommand(t *testing.T, script string, env map[string]string) []string {
	t.Helper()
	_, cmd, ok := strings.Cut(script, "go run ./cmd/outboxlab ")
	if !ok {
		return nil
	}
	cmd, _, _ = strings.Cut(cmd, "\n")
	for k, v := range env {
		cmd = strings.ReplaceAll(cmd, `"$`+k+`"`, argv.QuoteArg(v))
	}
	if strings.Contains(cmd, "$") {
		t.Fatalf("command %q uses a variable the test does not know", cmd)
	}
	args, err := argv.SplitCommand(cmd)
	if err != nil {
		t.Fatalf("splitting %q: %v", cmd, err)
	}
	return args
}

var matrixShard = regexp.MustCompile(`^\$\{\{ matrix\.shard \}\}/(\d+)$`)

func TestGitHubActionsWorkflowShardsAsTheCommandDoes(t *testing.T) {
	data, err := os.ReadFile("../../deploy/github-actions/outboxlab.yml")
	if err != nil {
		t.Fatal(err)
	}
	var wf ghWorkflow
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatalf("outboxlab.yml: %v", err)
	}
	artifacts := map[string]string{} // artifact name prefix -> verb
	var sharded []string
	for _, name := range []string{"sim", "chaos"} {
		job, ok := wf.Jobs[name]
		if !ok {
			t.Fatalf("no job %q", name)
		}
		sharded = append(sharded, name)
		m := matrixShard.FindStringSubmatch(job.Env[campaign.EnvShard])
		if m == nil {
			t.Fatalf("job %s: %s = %q, want ${{ matrix.shard }}/N", name, campaign.EnvShard, job.Env[campaign.EnvShard])
		}
		n, _ := strconv.Atoi(m[1])
		if len(job.Strategy.Matrix.Shard) != n {
			t.Errorf("job %s: the matrix has %d shards, %s says %d", name, len(job.Strategy.Matrix.Shard), campaign.EnvShard, n)
		}
		verbs := map[string]bool{}
		for i, k := range job.Strategy.Matrix.Shard {
			if k != i+1 {
				t.Errorf("job %s: matrix shard %d is %d, want 1..%d in order", name, i, k, n)
			}
			value := strings.Replace(job.Env[campaign.EnvShard], "${{ matrix.shard }}", strconv.Itoa(k), 1)
			want, err := campaign.FromEnv(func(v string) string { return map[string]string{campaign.EnvShard: value}[v] })
			if err != nil || want.K() != k || want.N() != n {
				t.Fatalf("job %s, shard %d: %s=%s reads as %v, %v", name, k, campaign.EnvShard, value, want, err)
			}
			var out string
			for _, st := range job.Steps {
				args := outboxlabCommand(t, st.Run, map[string]string{campaign.EnvShard: value})
				if args == nil {
					continue
				}
				verb, flags := parseCommand(t, args)
				verbs[verb] = true
				if got, _ := campaign.Parse(flags["shard"]); got != want {
					t.Errorf("job %s, shard %d: %s --shard %q, want %s", name, k, verb, flags["shard"], want)
				}
				out = flags["out"]
			}
			if out == "" {
				t.Fatalf("job %s runs no outboxlab command with --out", name)
			}
			uploaded := false
			for _, st := range job.Steps {
				if strings.HasPrefix(st.Uses, "actions/upload-artifact@") && st.With["path"] == out {
					uploaded = st.If == "always()" && strings.Contains(st.With["name"], "${{ matrix.shard }}")
					artifacts[strings.TrimSuffix(st.With["name"], "${{ matrix.shard }}")] = name
				}
			}
			if !uploaded {
				t.Errorf("job %s does not upload %s, always, as an artifact named by its shard", name, out)
			}
		}
		if !verbs["sim"] && !verbs["run"] {
			t.Errorf("job %s runs %v, want sim or run", name, verbs)
		}
	}

	rep, ok := wf.Jobs["report"]
	if !ok {
		t.Fatal("no report job")
	}
	for _, s := range sharded {
		if !strings.Contains(strings.Join(rep.Needs, " "), s) {
			t.Errorf("the report job does not wait for %s", s)
		}
	}
	if rep.If != "always()" {
		t.Errorf("the report job runs if %q, want always() (a failed shard is still reported)", rep.If)
	}
	var pattern, script string
	for _, st := range rep.Steps {
		if strings.HasPrefix(st.Uses, "actions/download-artifact@") {
			pattern = st.With["pattern"]
		}
		if strings.Contains(st.Run, "cmd/outboxlab report") {
			script = st.Run
		}
	}
	for prefix, job := range artifacts {
		if ok, _ := path.Match(pattern, prefix+"1"); !ok {
			t.Errorf("the report job downloads %q, which misses %s's artifact %s1", pattern, job, prefix)
		}
		if !strings.Contains(script, "bundles/"+prefix+"*") {
			t.Errorf("the report job's merge does not read bundles/%s*:\n%s", prefix, script)
		}
	}
	// The merge's command line parses, with the --in flags the loop adds.
	args := outboxlabCommand(t, strings.ReplaceAll(script, `"$@"`, "--in bundles/sim-shard-1 --in bundles/run-shard-1"), nil)
	if verb, flags := parseCommand(t, args); verb != "report" || flags["in"] != "bundles/sim-shard-1,bundles/run-shard-1" {
		t.Errorf("merge: %s %v", verb, flags)
	}
}

// k8sJob is what the test reads of a Kubernetes Job.
type k8sJob struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		CompletionMode       string `yaml:"completionMode"`
		Completions          int    `yaml:"completions"`
		BackoffLimitPerIndex *int   `yaml:"backoffLimitPerIndex"`
		PodFailurePolicy     struct {
			Rules []struct {
				Action      string `yaml:"action"`
				OnExitCodes *struct {
					ContainerName string `yaml:"containerName"`
					Operator      string `yaml:"operator"`
					Values        []int  `yaml:"values"`
				} `yaml:"onExitCodes"`
			} `yaml:"rules"`
		} `yaml:"podFailurePolicy"`
		Template struct {
			Spec struct {
				RestartPolicy string `yaml:"restartPolicy"`
				Containers    []struct {
					Name    string   `yaml:"name"`
					Command []string `yaml:"command"`
					Args    []string `yaml:"args"`
					Env     []struct {
						Name      string `yaml:"name"`
						Value     string `yaml:"value"`
						ValueFrom *struct {
							FieldRef struct {
								FieldPath string `yaml:"fieldPath"`
							} `yaml:"fieldRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func TestKubernetesIndexedJobsShardAsTheCommandDoes(t *testing.T) {
	f, err := os.Open("../../deploy/kubernetes/campaign.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	verbs := map[string]bool{}
	for {
		var job k8sJob
		if err := dec.Decode(&job); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("campaign.yaml: %v", err)
		}
		name := job.Metadata.Name
		s := job.Spec
		if job.Kind != "Job" || s.CompletionMode != "Indexed" || s.Completions < 1 {
			t.Fatalf("%s: kind %s, completionMode %q, completions %d; want an Indexed Job", name, job.Kind, s.CompletionMode, s.Completions)
		}
		if s.Template.Spec.RestartPolicy != "Never" {
			t.Errorf("%s: restartPolicy %q; a pod failure policy needs Never", name, s.Template.Spec.RestartPolicy)
		}
		if s.BackoffLimitPerIndex == nil || *s.BackoffLimitPerIndex < 1 {
			t.Errorf("%s: backoffLimitPerIndex %v; exit 2 must be retried per index", name, s.BackoffLimitPerIndex)
		}
		if len(s.Template.Spec.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", name, len(s.Template.Spec.Containers))
		}
		c := s.Template.Spec.Containers[0]
		action := map[int]string{}
		for _, r := range s.PodFailurePolicy.Rules {
			if r.OnExitCodes == nil {
				continue
			}
			if r.OnExitCodes.ContainerName != c.Name || r.OnExitCodes.Operator != "In" {
				t.Errorf("%s: a rule on container %q, operator %s", name, r.OnExitCodes.ContainerName, r.OnExitCodes.Operator)
			}
			for _, v := range r.OnExitCodes.Values {
				action[v] = r.Action
			}
		}
		for code, want := range map[int]string{exitFail: "FailIndex", exitInconclusive: "FailIndex", exitUsage: "Count"} {
			if action[code] != want {
				t.Errorf("%s: exit %d → %q, want %s", name, code, action[code], want)
			}
		}
		env := map[string]string{}
		indexFromAnnotation := false
		for _, e := range c.Env {
			env[e.Name] = e.Value
			if e.Name == campaign.EnvJobIndex && e.ValueFrom != nil &&
				e.ValueFrom.FieldRef.FieldPath == "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
				indexFromAnnotation = true
			}
		}
		if env[campaign.EnvShards] != strconv.Itoa(s.Completions) {
			t.Errorf("%s: %s=%q, completions %d: they must agree", name, campaign.EnvShards, env[campaign.EnvShards], s.Completions)
		}
		if !indexFromAnnotation {
			t.Errorf("%s: %s is not read from the job-completion-index annotation", name, campaign.EnvJobIndex)
		}
		outs := map[string]bool{}
		for i := range s.Completions {
			idx := strconv.Itoa(i)
			getenv := func(k string) string {
				if k == campaign.EnvJobIndex {
					return idx
				}
				return env[k]
			}
			var args []string
			for _, a := range append(c.Command[min(len(c.Command), 1):], c.Args...) {
				args = append(args, strings.ReplaceAll(a, "$("+campaign.EnvJobIndex+")", idx))
			}
			verb, flags := parseCommand(t, args)
			verbs[verb] = true
			if verb != "sim" && !(verb == "mutants" && flags["tier"] == "sim") {
				t.Errorf("%s runs %s %v: want a tier that needs no Docker", name, verb, flags)
			}
			if flags["shard"] != "" {
				t.Errorf("%s: --shard %s overrides the index", name, flags["shard"])
			}
			got, err := campaign.Resolve(flags["shard"], getenv)
			if err != nil || got.K() != i+1 || got.N() != s.Completions {
				t.Errorf("%s, index %d: shard %v, %v; want %d/%d", name, i, got, err, i+1, s.Completions)
			}
			if outs[flags["out"]] || flags["out"] == "" {
				t.Errorf("%s, index %d: --out %q is empty or another index's", name, i, flags["out"])
			}
			outs[flags["out"]] = true
		}
	}
	if !verbs["sim"] || !verbs["mutants"] {
		t.Errorf("the Jobs run %v, want the simulation swarm and the mutants", verbs)
	}
}

// The verbs' shards split campaigns the same way for every index: a
// check that the mapping the deploy files rely on is campaign's.
func TestJobIndexIsShardIndexPlusOne(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for i := range n {
			s, err := campaign.FromEnv(func(k string) string {
				return map[string]string{campaign.EnvJobIndex: fmt.Sprint(i), campaign.EnvShards: fmt.Sprint(n)}[k]
			})
			if err != nil || s.String() != fmt.Sprintf("%d/%d", i+1, n) {
				t.Errorf("index %d of %d: %v, %v", i, n, s, err)
			}
		}
	}
}
