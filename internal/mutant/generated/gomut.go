package generated

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Go operators, named as go-gremlins names them.
const (
	OpBoundary  = "CONDITIONALS_BOUNDARY" // < ↔ <=, > ↔ >=
	OpNegation  = "CONDITIONALS_NEGATION" // == ↔ !=, < ↔ >=, > ↔ <=
	OpArith     = "ARITHMETIC_BASE"       // + ↔ -, * ↔ /, % → *
	OpIncDec    = "INCREMENT_DECREMENT"   // ++ ↔ --
	OpLogical   = "INVERT_LOGICAL"        // && ↔ ||
	OpNegatives = "INVERT_NEGATIVES"      // -x → x
)

// GoPackages are the directories whose Go operators are mutated.
var GoPackages = []string{"relay", "consumer"}

// GoMutants parses the non-test Go files of GoPackages under the module
// root and returns one mutant per operator and position, in file order.
// Ids name the file, the enclosing function, the operator and the
// position relative to the function's first line, so that an edit
// elsewhere in the file leaves them as they are.
func GoMutants(root string) ([]Mutant, error) {
	var out []Mutant
	for _, dir := range GoPackages {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", dir, err)
		}
		sort.Strings(files)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			ms, err := goFileMutants(root, f)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
	}
	return out, nil
}

func goFileMutants(root, path string) ([]Mutant, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading Go source: %w", err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return nil, fmt.Errorf("locating %s: %w", path, err)
	}
	rel = filepath.ToSlash(rel)
	var out []Mutant
	add := func(fn string, fnLine int, pos token.Pos, old, op, repl string) {
		p := fset.Position(pos)
		off := p.Offset
		if string(src[off:off+len(old)]) != old {
			return
		}
		mutated := make([]byte, 0, len(src)+len(repl))
		mutated = append(append(append(mutated, src[:off]...), repl...), src[off+len(old):]...)
		out = append(out, Mutant{
			ID:       fmt.Sprintf("%s:%s:%s:+%d:%d:%s", rel, fn, op, p.Line-fnLine, p.Column, strings.TrimSpace(repl)),
			Kind:     KindGo,
			File:     rel,
			Line:     p.Line,
			Col:      p.Column,
			Operator: op,
			Diff:     lineDiff(string(src), off, off+len(old), repl),
			Source:   mutated,
		})
	}
	for _, decl := range f.Decls {
		fn, fnLine := "", fset.Position(decl.Pos()).Line
		switch d := decl.(type) {
		case *ast.FuncDecl:
			fn = d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				fn = recvName(d.Recv.List[0].Type) + "." + fn
			}
		case *ast.GenDecl:
			if d.Tok == token.IMPORT {
				continue
			}
			fn = "decl"
			for _, s := range d.Specs {
				if v, ok := s.(*ast.ValueSpec); ok && len(v.Names) > 0 {
					fn = v.Names[0].Name
					break
				}
				if t, ok := s.(*ast.TypeSpec); ok {
					fn = t.Name.Name
					break
				}
			}
		}
		ast.Inspect(decl, func(n ast.Node) bool {
			switch e := n.(type) {
			case *ast.BinaryExpr:
				if isStringy(e.X) || isStringy(e.Y) {
					return true
				}
				old := e.Op.String()
				for _, m := range binaryMutations(e.Op) {
					add(fn, fnLine, e.OpPos, old, m[0], m[1])
				}
			case *ast.IncDecStmt:
				if e.Tok == token.INC {
					add(fn, fnLine, e.TokPos, "++", OpIncDec, "--")
				} else {
					add(fn, fnLine, e.TokPos, "--", OpIncDec, "++")
				}
			case *ast.UnaryExpr:
				if e.Op == token.SUB {
					add(fn, fnLine, e.OpPos, "-", OpNegatives, "")
				}
			}
			return true
		})
	}
	return out, nil
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return "(*" + recvName(t.X) + ")"
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "recv"
}

// isStringy reports whether e is plainly a string: a string literal, or a
// concatenation or call of one. A + between strings has no - to become.
func isStringy(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.BasicLit:
		return x.Kind == token.STRING
	case *ast.BinaryExpr:
		return x.Op == token.ADD && (isStringy(x.X) || isStringy(x.Y))
	case *ast.ParenExpr:
		return isStringy(x.X)
	case *ast.CallExpr:
		if s, ok := x.Fun.(*ast.SelectorExpr); ok {
			if id, ok := s.X.(*ast.Ident); ok && (id.Name == "fmt" || id.Name == "strings") && strings.HasPrefix(s.Sel.Name, "Sprint") || s.Sel.Name == "Ident" || s.Sel.Name == "String" || s.Sel.Name == "Channel" || s.Sel.Name == "QuoteIdentifier" {
				return true
			}
		}
	}
	return false
}

// binaryMutations returns the (operator, replacement) pairs of op.
func binaryMutations(op token.Token) [][2]string {
	switch op {
	case token.LSS:
		return [][2]string{{OpBoundary, "<="}, {OpNegation, ">="}}
	case token.LEQ:
		return [][2]string{{OpBoundary, "<"}, {OpNegation, ">"}}
	case token.GTR:
		return [][2]string{{OpBoundary, ">="}, {OpNegation, "<="}}
	case token.GEQ:
		return [][2]string{{OpBoundary, ">"}, {OpNegation, "<"}}
	case token.EQL:
		return [][2]string{{OpNegation, "!="}}
	case token.NEQ:
		return [][2]string{{OpNegation, "=="}}
	case token.ADD:
		return [][2]string{{OpArith, "-"}}
	case token.SUB:
		return [][2]string{{OpArith, "+"}}
	case token.MUL:
		return [][2]string{{OpArith, "/"}}
	case token.QUO:
		return [][2]string{{OpArith, "*"}}
	case token.REM:
		return [][2]string{{OpArith, "*"}}
	case token.LAND:
		return [][2]string{{OpLogical, "||"}}
	case token.LOR:
		return [][2]string{{OpLogical, "&&"}}
	}
	return nil
}

// sourceLine returns the line of file under root that holds the text
// around stmt[from:to], or 0 when no fragment of it is found. Statements
// are concatenated from constants, so the search shrinks the fragment
// until it is found in the file.
func sourceLine(root, file, stmt string, from, to int) int {
	src, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return 0
	}
	ls := strings.LastIndexByte(stmt[:from], '\n') + 1
	le := strings.IndexByte(stmt[to:], '\n')
	if le < 0 {
		le = len(stmt)
	} else {
		le += to
	}
	for lo, hi := ls, le; hi-lo >= to-from && hi-lo > 0; {
		if i := bytes.Index(src, []byte(stmt[lo:hi])); i >= 0 {
			return bytes.Count(src[:i], []byte("\n")) + 1
		}
		if from-lo > hi-to {
			lo++
		} else {
			hi--
		}
	}
	return 0
}
