package outbox

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTable(t *testing.T) {
	for _, tc := range []struct {
		in, ident, str string
		ok             bool
	}{
		{"outbox", `"outbox"`, "outbox", true},
		{"chat.outbox", `"chat"."outbox"`, "chat.outbox", true},
		{"_x9.t_1", `"_x9"."t_1"`, "_x9.t_1", true},
		{"", "", "", false},
		{"a.b.c", "", "", false},
		{".outbox", "", "", false},
		{"chat.", "", "", false},
		{`outbox"; DROP TABLE x; --`, "", "", false},
		{"9lives", "", "", false},
		{"white space", "", "", false},
		{strings.Repeat("a", 64), "", "", false},
	} {
		got, err := ParseTable(tc.in)
		if tc.ok != (err == nil) {
			t.Errorf("ParseTable(%q) error = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidIdentifier) {
				t.Errorf("ParseTable(%q) error %v does not wrap ErrInvalidIdentifier", tc.in, err)
			}
			continue
		}
		if got.Ident() != tc.ident || got.String() != tc.str {
			t.Errorf("ParseTable(%q) = %s / %s, want %s / %s", tc.in, got.Ident(), got, tc.ident, tc.str)
		}
	}
}

func TestMigrationsRenderForTable(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 2 || ms[0].Version != 1 {
		t.Fatalf("migrations = %+v, want 001 first and at least two", ms)
	}
	for i := 1; i < len(ms); i++ {
		if ms[i].Version <= ms[i-1].Version {
			t.Fatalf("migrations out of order: %d after %d", ms[i].Version, ms[i-1].Version)
		}
	}
	sql, err := ms[0].SQL(MustParseTable("chat.outbox"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "chat"."outbox"`, "chat_outbox_pending_idx", "WHERE processed_at IS NULL AND faulted_at IS NULL"} {
		if !strings.Contains(sql, want) {
			t.Errorf("rendered migration lacks %q:\n%s", want, sql)
		}
	}
}

type orderPlaced struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

func TestRegistryDecode(t *testing.T) {
	r := NewRegistry()
	r.Register("order.placed", orderPlaced{})
	v, err := r.Decode("order.placed", []byte(`{"order_id":"o1","amount":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.(*orderPlaced); got.OrderID != "o1" || got.Amount != 3 {
		t.Errorf("decoded %+v", got)
	}
	if _, err := r.Decode("order.shipped", []byte(`{}`)); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type: err = %v, want ErrUnknownType", err)
	}
	for _, bad := range []string{`{"amount":"lots"}`, `{"order_id":"o1","colour":"red"}`, `[1,2]`} {
		if _, err := r.Decode("order.placed", []byte(bad)); !errors.Is(err, ErrUndecodable) {
			t.Errorf("payload %s: err = %v, want ErrUndecodable", bad, err)
		}
	}
}

func TestNewEventIsTimeOrdered(t *testing.T) {
	a, err := NewEvent("order.placed", orderPlaced{OrderID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewEvent("order.placed", orderPlaced{OrderID: "b"})
	if a.ID.Version() != 7 || a.ID.String() >= b.ID.String() {
		t.Errorf("ids %s, %s: want UUIDv7 in creation order", a.ID, b.ID)
	}
}
