package sim

// Inbox is an in-memory consumer inbox and effects table: Apply records the
// message id in the inbox set and counts one effect, atomically, unless the
// id is there already. The effects table has no unique key, so a consumer
// that bypasses the inbox shows up as a second effect. An Inbox is not safe
// for concurrent use.
type Inbox struct {
	seen    map[string]bool
	effects map[string]int
	order   []string
}

// NewInbox returns an empty inbox.
func NewInbox() *Inbox {
	return &Inbox{seen: make(map[string]bool), effects: make(map[string]int)}
}

// apply runs the effect of id and records id, unless it was recorded
// before; it reports a duplicate.
func (in *Inbox) apply(id string) (duplicate bool) {
	if in.seen[id] {
		return true
	}
	in.seen[id] = true
	in.effect(id)
	return false
}

// applyKeyed records key in the inbox set and runs the effect of id,
// unless check and key was recorded before; it reports a duplicate.
func (in *Inbox) applyKeyed(key, id string, check bool) (duplicate bool) {
	if check && in.seen[key] {
		return true
	}
	in.seen[key] = true
	in.effect(id)
	return false
}

// effect counts one effect of id without looking at the inbox set.
func (in *Inbox) effect(id string) {
	if in.effects[id] == 0 {
		in.order = append(in.order, id)
	}
	in.effects[id]++
}

// Seen reports whether id is in the inbox set.
func (in *Inbox) Seen(id string) bool { return in.seen[id] }

// Effects returns the effects counted per event id.
func (in *Inbox) Effects() map[string]int {
	out := make(map[string]int, len(in.effects))
	for k, v := range in.effects {
		out[k] = v
	}
	return out
}

// Applied returns the ids with at least one effect, in first-effect order.
func (in *Inbox) Applied() []string { return append([]string(nil), in.order...) }
