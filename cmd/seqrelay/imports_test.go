package main

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsOnlyPgxAmqpAndTheStandardLibrary: seqrelay stays independent
// of this repository's relay and harness, its tests included.
func TestImportsOnlyPgxAmqpAndTheStandardLibrary(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files: %v", err)
	}
	for _, f := range files {
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			switch {
			case !strings.Contains(first, "."): // the standard library
			case path == "github.com/jackc/pgx/v5" || strings.HasPrefix(path, "github.com/jackc/pgx/v5/"):
			case path == "github.com/rabbitmq/amqp091-go":
			default:
				t.Errorf("%s imports %s: seqrelay may import pgx, amqp091-go and the standard library only", f, path)
			}
		}
	}
}
