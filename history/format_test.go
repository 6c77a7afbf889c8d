package history

import "testing"

func TestFaultHits(t *testing.T) {
	all := Fault{Name: "f", Class: ClassBroker}
	one := Fault{Name: "f", Class: ClassBroker, Targets: []string{"relay-a"}}
	if !all.Hits("relay-b") || !one.Hits("relay-a") || one.Hits("relay-b") || one.Hits("relay-ab") {
		t.Error("Fault.Hits: untargeted faults hit everyone, targeted ones only their targets")
	}
	if FaultClass("broker").Valid() != true || FaultClass("network").Valid() {
		t.Error("FaultClass.Valid")
	}
}
