package report

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestMetaValidate(t *testing.T) {
	m := CollectMeta(context.Background(), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err := m.Validate(); err != nil {
		t.Fatalf("CollectMeta's own meta: %v", err)
	}
	for name, mut := range map[string]func(*Meta){
		"meta.date":          func(m *Meta) { m.Date = "" },
		"meta.machine.cores": func(m *Meta) { m.Machine.Cores = 0 },
		"meta.machine.os":    func(m *Meta) { m.Machine.OS = "" },
		"meta.machine.go":    func(m *Meta) { m.Machine.Go = "" },
	} {
		bad := m
		mut(&bad)
		err := bad.Validate()
		if !errors.Is(err, ErrNoMeta) || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: %v", name, err)
		}
	}
	// The commit and the Docker version may be unknown.
	m.Commit, m.Machine.Docker = "", ""
	if err := m.Validate(); err != nil {
		t.Errorf("no commit, no Docker: %v", err)
	}
}

func TestBundleValidateNamesTheFile(t *testing.T) {
	good := CollectMeta(context.Background(), time.Now())
	b := Bundle{Dir: "results", Sim: &SimFile{Meta: good}, Bench: &BenchFile{}}
	err := b.Validate()
	if !errors.Is(err, ErrNoMeta) || !strings.Contains(err.Error(), FileBench) || strings.Contains(err.Error(), FileSim) {
		t.Errorf("Validate = %v, want bench.json named, sim.json not", err)
	}
	b.Bench.Meta = good
	if err := b.Validate(); err != nil {
		t.Errorf("complete bundle: %v", err)
	}
}
