package sim

import "github.com/outboxlab/outboxlab/history"

// appendJSONL appends ops to buf exactly as history.WriteJSONL writes
// them, header first, through history.AppendJSON: RunMany hashes every
// history. TestAppendJSONLMatchesWriteJSONL holds the two to the same
// bytes.
func appendJSONL(buf []byte, ops []history.Op) []byte {
	buf = append(buf, history.Header+"\n"...)
	for i := range ops {
		buf = history.AppendJSON(buf, &ops[i])
	}
	return buf
}
