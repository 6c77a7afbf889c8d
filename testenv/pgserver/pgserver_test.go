package pgserver

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStartLocal starts a server from the local binaries, checks that it
// runs with durability and autovacuum off, and that Close stops it and
// removes its directory.
func TestStartLocal(t *testing.T) {
	bin, err := BinDir()
	if err != nil {
		t.Skipf("no local binaries: %v", err)
	}
	ctx := context.Background()
	s, err := StartLocal(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := s.dir
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "autovacuum": "off"} {
		var got string
		if err := conn.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	_ = conn.Close(ctx)
	if !strings.HasPrefix(s.Version, "PostgreSQL ") {
		t.Errorf("version %q", s.Version)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there after Close: %v", dir, err)
	}
	if _, err := pgx.Connect(ctx, s.admin); err == nil {
		t.Fatal("the server still accepts connections after Close")
	}
}
