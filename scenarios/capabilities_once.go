package scenarios

import (
	"fmt"
	"strings"
)

// CheckCapabilitiesOnce reports a capability that list, a comma-separated
// list as WithCapabilities reads it, names more than once: a key given
// twice (lease=1ns,lease=2s) has no meaning that both values could have,
// and the later one would silently win. Only the names are checked, before
// any "="; WithCapabilities judges them and their values.
func CheckCapabilitiesOnce(list string) error {
	seen := map[string]string{}
	for _, c := range strings.Split(list, ",") {
		c = strings.TrimSpace(c)
		name, _, _ := strings.Cut(c, "=")
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if prev, ok := seen[name]; ok {
			return fmt.Errorf("capabilities %q: %s is given twice (%s and %s): give each capability once", list, name, prev, c)
		}
		seen[name] = c
	}
	return nil
}
