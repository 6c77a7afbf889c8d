package chaos

import "testing"

func TestLinkClass(t *testing.T) {
	for name, want := range map[string]string{
		"relay->broker":     ClassBroker,
		"relay-a->rabbitmq": ClassBroker,
		"app->db":           ClassDB,
		"relay-b->postgres": ClassDB,
		"db->broker":        ClassBroker,
		"broker->consumer":  ClassNetwork,
		"consumer":          ClassNetwork,
	} {
		if got := linkClass(name); got != want {
			t.Errorf("linkClass(%q) = %q, want %q", name, got, want)
		}
	}
}
