package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// output is a file a verb writes, with the flag that names it.
type output struct {
	flag, path string
}

// checkOutputs reports an output that is one of the verb's inputs, or
// the same file as another output: a verb never writes over what it
// reads, nor one output over another.
func checkOutputs(outputs []output, inputs []string) error {
	for i, o := range outputs {
		for _, in := range inputs {
			if sameFile(o.path, in) {
				return fmt.Errorf("%s %s would overwrite %s, which this command reads: write it elsewhere", o.flag, o.path, in)
			}
		}
		for _, p := range outputs[:i] {
			if sameFile(o.path, p.path) {
				if p.flag == o.flag {
					return fmt.Errorf("%s would write %s twice", o.flag, o.path)
				}
				return fmt.Errorf("%s %s and %s %s are the same file: give them different names", p.flag, p.path, o.flag, o.path)
			}
		}
	}
	return nil
}

// sameFile reports whether paths a and b name one file: the same path
// once made absolute and clean, or, when both exist, the same file by
// another path (a link, a directory named twice).
func sameFile(a, b string) bool {
	if abs(a) == abs(b) {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// abs returns p absolute and clean, or clean when the working directory
// is unknown.
func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

// checkOutDir makes dir, a verb's --out, and writes and removes a file in
// it, before the verb runs anything: a directory that cannot take the
// results is found before the run, not after it.
func checkOutDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making the results directory: %w", err)
	}
	f, err := os.CreateTemp(dir, ".outboxlab-check-*")
	if err != nil {
		return fmt.Errorf("writing in the results directory: %w", err)
	}
	name := f.Name()
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing in the results directory: %w", err)
	}
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("removing %s: %w", name, err)
	}
	return nil
}
