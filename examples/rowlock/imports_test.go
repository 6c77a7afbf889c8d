package main

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsOnlyPgxAmqpAndTheStandardLibrary: the relay stays
// independent of this repository, its own tests included. Only the
// catalogue's test (package main_test), which runs the relay under the
// harness and is no part of it, imports the harness's public packages
// scenarios and suite.
func TestImportsOnlyPgxAmqpAndTheStandardLibrary(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files: %v", err)
	}
	harness := 0
	for _, f := range files {
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		external := parsed.Name.Name == "main_test"
		if external && !strings.HasSuffix(f, "_test.go") {
			t.Errorf("%s: package main_test in a file that is not a test", f)
		}
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			switch {
			case !strings.Contains(first, "."): // the standard library
			case path == "github.com/jackc/pgx/v5" || strings.HasPrefix(path, "github.com/jackc/pgx/v5/"):
			case path == "github.com/rabbitmq/amqp091-go":
			case external && (path == "github.com/outboxlab/outboxlab/scenarios" || path == "github.com/outboxlab/outboxlab/suite"):
				harness++
			default:
				t.Errorf("%s imports %s: the relay may import pgx, amqp091-go and the standard library only", f, path)
			}
		}
	}
	if harness == 0 {
		t.Error("no test runs the catalogue through the harness's suite")
	}
}
