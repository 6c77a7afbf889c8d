// Package argv splits a command line as a shell splits words, without
// running a shell, and quotes arguments back into one: how target files,
// --relay cmd: and replay commands carry a command.
package argv

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadQuoting is returned by SplitCommand for a command line whose quotes or escapes
// do not close.
var ErrBadQuoting = errors.New("unbalanced quoting")

// SplitCommand splits a command line (a cmd: relay) into its arguments the way a POSIX
// shell splits words, without running a shell: blanks separate arguments;
// inside single quotes every character is literal; inside double quotes a
// backslash escapes only \ " $ ` and a newline; outside quotes a
// backslash escapes the next character. Nothing is expanded ($VAR, globs
// and ~ stay as written). An empty pair of quotes is an empty argument.
func SplitCommand(s string) ([]string, error) {
	var (
		args  []string
		cur   strings.Builder
		inArg bool // cur holds an argument, possibly empty ('')
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("%w: a single quote at byte %d does not close", ErrBadQuoting, i)
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inArg = true
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) && strings.IndexByte("\\\"$`\n", s[j+1]) >= 0 {
					j++
					if s[j] != '\n' {
						cur.WriteByte(s[j])
					}
					continue
				}
				cur.WriteByte(s[j])
			}
			if j == len(s) {
				return nil, fmt.Errorf("%w: a double quote at byte %d does not close", ErrBadQuoting, i)
			}
			i = j
			inArg = true
		case c == '\\':
			if i+1 == len(s) {
				return nil, fmt.Errorf("%w: a backslash ends the command", ErrBadQuoting)
			}
			i++
			if s[i] != '\n' { // a backslash-newline joins lines
				cur.WriteByte(s[i])
				inArg = true
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args, nil
}

// QuoteArg returns s as one shell word: as it is when it holds only
// characters no shell treats specially, else in single quotes (a single
// quote inside written as '\”). SplitCommand, and any POSIX shell, give s
// back.
func QuoteArg(s string) string {
	if s != "" && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// JoinCommand returns args as one command line that SplitCommand splits back
// into args.
func JoinCommand(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = QuoteArg(a)
	}
	return strings.Join(q, " ")
}
