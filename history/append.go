package history

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends op to buf as one line of a history file, exactly as
// WriteJSONL writes it (encoding/json's bytes and a newline), without
// reflection: the simulation hashes every history and a relay writes its
// records on its hot path, and encoding/json was the largest cost of both.
// Tests in sim and relay hold the two to the same bytes.
func AppendJSON(buf []byte, op *Op) []byte {
	buf = append(buf, `{"index":`...)
	buf = strconv.AppendInt(buf, op.Index, 10)
	buf = append(buf, `,"time":`...)
	buf = appendTime(buf, op.Time)
	buf = append(buf, `,"process":`...)
	buf = appendString(buf, op.Process)
	buf = append(buf, `,"type":`...)
	buf = appendString(buf, string(op.Type))
	buf = append(buf, `,"f":`...)
	buf = appendString(buf, string(op.F))
	buf = appendStrings(buf, `,"events":`, op.Events)
	buf = appendMeta(buf, &op.Meta)
	if op.Error != "" {
		buf = append(buf, `,"error":`...)
		buf = appendString(buf, op.Error)
	}
	buf = append(buf, "}\n"...)
	return buf
}

// appendMeta writes the fields of m that are set, in the order and form
// encoding/json gives them.
func appendMeta(buf []byte, m *Meta) []byte {
	if m.Fault != nil {
		b, _ := json.Marshal(m.Fault) // rare: nemesis records only
		buf = append(buf, `,"fault":`...)
		buf = append(buf, b...)
	}
	if m.Phase != "" {
		buf = append(buf, `,"phase":`...)
		buf = appendString(buf, m.Phase)
	}
	if m.Attempts != 0 {
		buf = append(buf, `,"attempts":`...)
		buf = strconv.AppendInt(buf, int64(m.Attempts), 10)
	}
	if m.Parked {
		buf = append(buf, `,"parked":true`...)
	}
	if !m.DBTime.IsZero() {
		buf = append(buf, `,"db_time":`...)
		buf = appendTime(buf, m.DBTime)
	}
	if !m.Until.IsZero() {
		buf = append(buf, `,"until":`...)
		buf = appendTime(buf, m.Until)
	}
	if !m.Cutoff.IsZero() {
		buf = append(buf, `,"cutoff":`...)
		buf = appendTime(buf, m.Cutoff)
	}
	if m.Fenced != 0 {
		buf = append(buf, `,"fenced":`...)
		buf = strconv.AppendInt(buf, int64(m.Fenced), 10)
	}
	if m.Confirm != "" {
		buf = append(buf, `,"confirm":`...)
		buf = appendString(buf, m.Confirm)
	}
	if m.Failpoint != "" {
		buf = append(buf, `,"failpoint":`...)
		buf = appendString(buf, m.Failpoint)
	}
	buf = appendStrings(buf, `,"caused_by":`, m.CausedBy)
	if m.Held != 0 {
		buf = append(buf, `,"held_ns":`...)
		buf = strconv.AppendInt(buf, int64(m.Held), 10)
	}
	if m.SQLState != "" {
		buf = append(buf, `,"sqlstate":`...)
		buf = appendString(buf, m.SQLState)
	}
	if m.Queue != "" {
		buf = append(buf, `,"queue":`...)
		buf = appendString(buf, m.Queue)
	}
	if m.Redelivered {
		buf = append(buf, `,"redelivered":true`...)
	}
	if m.Duplicate {
		buf = append(buf, `,"duplicate":true`...)
	}
	if m.Detail != "" {
		buf = append(buf, `,"detail":`...)
		buf = appendString(buf, m.Detail)
	}
	return buf
}

// appendStrings writes key and xs as a JSON array, or nothing when xs is
// empty (omitempty).
func appendStrings(buf []byte, key string, xs []string) []byte {
	if len(xs) == 0 {
		return buf
	}
	buf = append(buf, key...)
	buf = append(buf, '[')
	for j, x := range xs {
		if j > 0 {
			buf = append(buf, ',')
		}
		buf = appendString(buf, x)
	}
	return append(buf, ']')
}

// appendTime writes t as time.Time.MarshalJSON does.
func appendTime(buf []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		b, _ := json.Marshal(t) // out of range: let encoding/json decide
		return append(buf, b...)
	}
	buf = append(buf, '"')
	buf = t.AppendFormat(buf, time.RFC3339Nano)
	return append(buf, '"')
}

// appendString writes s as encoding/json does (with HTML escaping, as
// json.Encoder's default): plain printable ASCII is copied, anything else
// goes through encoding/json.
func appendString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(buf, b...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
