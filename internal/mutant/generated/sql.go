package generated

import (
	"fmt"
	"strings"

	"github.com/outboxlab/outboxlab/consumer"
	"github.com/outboxlab/outboxlab/internal/sim"
	"github.com/outboxlab/outboxlab/relay"
)

// SQL operators, named in mutant ids.
const (
	OpCmpFlip        = "cmp-flip"         // < ↔ >, <= ↔ >=, = ↔ <>
	OpSignFlip       = "sign-flip"        // + ↔ -
	OpUnit           = "unit"             // interval '1 microsecond' → millisecond, second
	OpAppClock       = "app-clock"        // now() → the process's own clock
	OpDropConjunct   = "drop-conjunct"    // one AND-conjunct of a WHERE removed
	OpNegate         = "negate"           // one AND-conjunct of a WHERE negated
	OpConstant       = "constant"         // an integer literal n → n+1, n-1
	OpDropForUpdate  = "drop-for-update"  // FOR UPDATE SKIP LOCKED removed
	OpDropSkipLocked = "drop-skip-locked" // SKIP LOCKED removed
	OpDropOrderBy    = "drop-order-by"    // an ORDER BY clause removed
	OpDropReturning  = "drop-returning"   // one RETURNING column removed
	OpDropOnConflict = "drop-on-conflict" // ON CONFLICT DO NOTHING removed
)

// Statement files, as mutant ids and reports name them.
const (
	StoreFile = "relay/postgres.go"
	InboxFile = "consumer/postgres.go"
)

// stmtSource is one statement of the store or the inbox.
type stmtSource struct {
	file, name, text string
}

// statements returns every statement of the store (on the SQL tier's
// table) and of the inbox.
func statements() []stmtSource {
	q := relay.NewPGStore(nil, sim.SQLTable).Statements()
	var out []stmtSource
	for _, n := range q.Names() {
		out = append(out, stmtSource{StoreFile, n, *q.Ref(n)})
	}
	out = append(out, stmtSource{InboxFile, "record", consumer.DefaultInboxStatements().Record})
	return out
}

// SQLMutants returns every SQL mutant of the store's and the inbox's
// statements, in the order of the statements and, within one, of the
// operators and positions. Ids are stable while a statement's text is.
func SQLMutants(root string) []Mutant {
	var out []Mutant
	for _, st := range statements() {
		seen := map[string]bool{st.text: true}
		for _, e := range sqlEdits(st.text) {
			text := st.text[:e.from] + e.repl + st.text[e.to:]
			if seen[text] {
				continue
			}
			seen[text] = true
			out = append(out, Mutant{
				ID:       sqlID(st, e),
				Kind:     KindSQL,
				File:     st.file,
				Line:     sourceLine(root, st.file, st.text, e.from, e.to),
				Operator: e.op,
				Diff:     lineDiff(st.text, e.from, e.to, e.repl),
				Stmt:     st.name,
				SQL:      text,
			})
		}
	}
	return out
}

// sqlID names a SQL mutant: file, statement, operator and offset in the
// statement, and the replacement for operators with several.
func sqlID(st stmtSource, e edit) string {
	id := fmt.Sprintf("%s:%s:%s@%d", st.file, st.name, e.op, e.from)
	if e.op == OpUnit || e.op == OpConstant {
		id += "=" + strings.Trim(e.repl, "'")
	}
	return id
}

// edit replaces text[from:to] by repl.
type edit struct {
	op       string
	from, to int
	repl     string
}

// tok is one token of a statement.
type tok struct {
	kind     byte // 'w' word, 'n' number, 's' string, 'p' parameter, 'o' operator or punctuation
	text     string
	from, to int
	depth    int // parentheses open before the token
}

// lex splits sql into tokens, skipping white space.
func lex(sql string) []tok {
	var out []tok
	depth := 0
	for i := 0; i < len(sql); {
		c := sql[i]
		start := i
		var kind byte
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case isWord(c) && !isDigit(c):
			for i < len(sql) && (isWord(sql[i]) || sql[i] == '.') {
				i++
			}
			kind = 'w'
		case isDigit(c):
			for i < len(sql) && isDigit(sql[i]) {
				i++
			}
			kind = 'n'
		case c == '\'':
			i++
			for i < len(sql) && sql[i] != '\'' {
				i++
			}
			i++
			kind = 's'
		case c == '"':
			i++
			for i < len(sql) && sql[i] != '"' {
				i++
			}
			i++
			kind = 'w'
		case c == '$':
			i++
			for i < len(sql) && isDigit(sql[i]) {
				i++
			}
			kind = 'p'
		default:
			kind = 'o'
			i++
			if i < len(sql) {
				two := sql[start : i+1]
				if two == "<=" || two == ">=" || two == "<>" || two == "::" || two == "!=" {
					i++
				}
			}
		}
		t := tok{kind: kind, text: sql[start:i], from: start, to: i, depth: depth}
		if t.text == "(" {
			depth++
		} else if t.text == ")" {
			depth--
			t.depth = depth
		}
		out = append(out, t)
	}
	return out
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isWord(c byte) bool {
	return c == '_' || isDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func kw(t tok, words ...string) bool {
	if t.kind != 'w' {
		return false
	}
	for _, w := range words {
		if strings.EqualFold(t.text, w) {
			return true
		}
	}
	return false
}

// sqlEdits returns the edits of every operator on sql.
func sqlEdits(sql string) []edit {
	ts := lex(sql)
	var out []edit
	flip := map[string]string{"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "<>", "<>": "="}
	for i, t := range ts {
		if r, ok := flip[t.text]; ok && t.kind == 'o' && !isAssignment(ts, i) {
			out = append(out, edit{OpCmpFlip, t.from, t.to, r})
		}
	}
	for _, t := range ts {
		switch {
		case t.kind == 'o' && t.text == "+":
			out = append(out, edit{OpSignFlip, t.from, t.to, "-"})
		case t.kind == 'o' && t.text == "-":
			out = append(out, edit{OpSignFlip, t.from, t.to, "+"})
		}
	}
	for _, t := range ts {
		if t.kind == 's' && strings.HasSuffix(t.text, " microsecond'") {
			n := strings.TrimSuffix(strings.TrimPrefix(t.text, "'"), " microsecond'")
			for _, u := range []string{"millisecond", "second"} {
				out = append(out, edit{OpUnit, t.from, t.to, "'" + n + " " + u + "'"})
			}
		}
	}
	for i, t := range ts {
		if kw(t, "now") && i+2 < len(ts) && ts[i+1].text == "(" && ts[i+2].text == ")" {
			out = append(out, edit{OpAppClock, t.from, ts[i+2].to, sim.AppNowSQL})
		}
	}
	for _, w := range whereClauses(ts) {
		cs := w.conjuncts
		for k, c := range cs {
			switch {
			case len(cs) == 1 && w.filter >= 0:
				// FILTER (WHERE c) goes as a whole.
				out = append(out, edit{OpDropConjunct, ts[w.filter].from, ts[w.end].to, ""})
			case len(cs) == 1:
				out = append(out, edit{OpDropConjunct, ts[w.where].from, ts[c.last].to, ""})
			case k == 0:
				// c AND next: drop up to next.
				out = append(out, edit{OpDropConjunct, ts[c.first].from, ts[cs[1].first].from, ""})
			default:
				// prev AND c: drop from after prev.
				out = append(out, edit{OpDropConjunct, ts[cs[k-1].last].to, ts[c.last].to, ""})
			}
			out = append(out, edit{OpNegate, ts[c.first].from, ts[c.last].to, "NOT (" + sql[ts[c.first].from:ts[c.last].to] + ")"})
		}
	}
	for _, t := range ts {
		if t.kind != 'n' {
			continue
		}
		var n int
		fmt.Sscan(t.text, &n)
		out = append(out, edit{OpConstant, t.from, t.to, fmt.Sprint(n + 1)})
		if n > 0 {
			out = append(out, edit{OpConstant, t.from, t.to, fmt.Sprint(n - 1)})
		}
	}
	for i := 0; i+3 < len(ts); i++ {
		if kw(ts[i], "FOR") && kw(ts[i+1], "UPDATE") && kw(ts[i+2], "SKIP") && kw(ts[i+3], "LOCKED") {
			out = append(out, edit{OpDropForUpdate, ts[i-1].to, ts[i+3].to, ""})
			out = append(out, edit{OpDropSkipLocked, ts[i+1].to, ts[i+3].to, ""})
		}
	}
	for i := 0; i+1 < len(ts); i++ {
		if kw(ts[i], "ORDER") && kw(ts[i+1], "BY") {
			end := i + 1
			for end+1 < len(ts) && ts[end+1].depth >= ts[i].depth && !(ts[end+1].depth == ts[i].depth && kw(ts[end+1], "LIMIT", "FOR")) {
				end++
			}
			out = append(out, edit{OpDropOrderBy, ts[i-1].to, ts[end].to, ""})
		}
	}
	for i, t := range ts {
		if !kw(t, "RETURNING") {
			continue
		}
		// Columns up to the end of the clause: a closing parenthesis
		// of a lower depth or the end of the statement.
		var cols [][2]int // token ranges
		start := i + 1
		j := start
		for ; j < len(ts) && ts[j].depth >= t.depth; j++ {
			if ts[j].text == "," && ts[j].depth == t.depth {
				cols = append(cols, [2]int{start, j - 1})
				start = j + 1
			}
		}
		cols = append(cols, [2]int{start, j - 1})
		if len(cols) == 1 {
			out = append(out, edit{OpDropReturning, ts[i-1].to, ts[j-1].to, ""})
			continue
		}
		for k, c := range cols {
			if k == 0 {
				out = append(out, edit{OpDropReturning, ts[c[0]].from, ts[cols[1][0]].from, ""})
			} else {
				out = append(out, edit{OpDropReturning, ts[cols[k-1][1]].to, ts[c[1]].to, ""})
			}
		}
	}
	for i := 0; i+3 < len(ts); i++ {
		if kw(ts[i], "ON") && kw(ts[i+1], "CONFLICT") && kw(ts[i+2], "DO") && kw(ts[i+3], "NOTHING") {
			out = append(out, edit{OpDropOnConflict, ts[i-1].to, ts[i+3].to, ""})
		}
	}
	return out
}

// isAssignment reports whether the = at ts[i] assigns a column in a SET
// list (SET a = ..., b = ...), which is not a comparison.
func isAssignment(ts []tok, i int) bool {
	if ts[i].text != "=" || i < 2 || ts[i-1].kind != 'w' {
		return false
	}
	if kw(ts[i-2], "SET") {
		return true
	}
	if ts[i-2].text != "," {
		return false
	}
	// A comma at the depth of an open SET list.
	for j := i - 2; j >= 0; j-- {
		if ts[j].depth < ts[i].depth {
			return false
		}
		if ts[j].depth == ts[i].depth && kw(ts[j], "WHERE", "FROM", "RETURNING", "SELECT") {
			return false
		}
		if ts[j].depth == ts[i].depth && kw(ts[j], "SET") {
			return true
		}
	}
	return false
}

// where is one WHERE clause and its top-level AND-conjuncts.
type where struct {
	where     int // the WHERE token
	filter    int // the FILTER token of FILTER (WHERE ...), else -1
	end       int // the closing parenthesis of a FILTER
	conjuncts []conjunct
}

type conjunct struct{ first, last int }

// whereClauses finds every WHERE clause of ts.
func whereClauses(ts []tok) []where {
	var out []where
	for i, t := range ts {
		if !kw(t, "WHERE") {
			continue
		}
		w := where{where: i, filter: -1, end: -1}
		if i >= 2 && ts[i-1].text == "(" && kw(ts[i-2], "FILTER") {
			w.filter = i - 2
		}
		first := i + 1
		j := first
		for ; j < len(ts); j++ {
			u := ts[j]
			if u.depth < t.depth {
				break
			}
			if u.depth == t.depth && kw(u, "ORDER", "LIMIT", "RETURNING", "GROUP", "FOR") {
				break
			}
			if u.depth == t.depth && kw(u, "AND") {
				w.conjuncts = append(w.conjuncts, conjunct{first, j - 1})
				first = j + 1
			}
		}
		w.conjuncts = append(w.conjuncts, conjunct{first, j - 1})
		if w.filter >= 0 {
			w.end = j
		}
		out = append(out, w)
	}
	return out
}

// lineDiff shows the lines of old that hold old[from:to], before and
// after it is replaced by repl, each on one line.
func lineDiff(old string, from, to int, repl string) string {
	ls := strings.LastIndexByte(old[:from], '\n') + 1
	le := strings.IndexByte(old[to:], '\n')
	if le < 0 {
		le = len(old)
	} else {
		le += to
	}
	one := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	return "- " + one(old[ls:le]) + "\n+ " + one(old[ls:from]+repl+old[to:le])
}
