package scenarios

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"testing"
)

func TestServicePorts(t *testing.T) {
	got := servicePorts("postgres://u:p@toxiproxy:8666/outbox?sslmode=disable", "amqp://guest:guest@localhost/")
	if got[serviceDatabase] != 8666 || got[serviceBroker] != 5672 || len(got) != 2 {
		t.Errorf("ports %v: want the database's 8666 and the broker's default 5672", got)
	}
	if got := servicePorts("::bad", ""); len(got) != 0 {
		t.Errorf("ports of unparsable URLs %v: want none", got)
	}
}

func TestParseConnRules(t *testing.T) {
	listing := []byte(`Chain OUTPUT (policy ACCEPT 0 packets, 0 bytes)
    pkts      bytes target     prot opt in     out     source               destination
      12      720            6    --  *      *       0.0.0.0/0            0.0.0.0/0            tcp dpt:8667 flags:0x17/0x02 /* outboxlab:broker */
       3      180            6    --  *      *       0.0.0.0/0            0.0.0.0/0            tcp dpt:8666 flags:0x17/0x02 /* outboxlab:database */
     900    54000 DOCKER     all  --  *      *       0.0.0.0/0            0.0.0.0/0
`)
	got, err := parseConnRules(listing)
	if err != nil || got[serviceBroker] != 12 || got[serviceDatabase] != 3 || len(got) != 2 {
		t.Errorf("parseConnRules = %v, %v: want broker 12, database 3", got, err)
	}
	if _, err := parseConnRules([]byte("Chain OUTPUT (policy ACCEPT)\n")); err == nil {
		t.Error("a chain without counting rules: want an error")
	}
}

// TestCountConnsIn counts the attempts a process in a network namespace
// of its own sends, by service, as the footprint does of a relay in a
// container: two to one port, none to the other.
func TestCountConnsIn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (nsenter, iptables)")
	}
	for _, bin := range []string{"unshare", "nsenter", "iptables"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s", bin)
		}
	}
	ctx := context.Background()
	// A shell in a namespace of its own says when it is there, waits for
	// the rules, connects twice to a port nothing listens on, and says
	// when it is done.
	sh := exec.Command("unshare", "-n", "bash", "-c", "ip link set lo up; echo ready; read x; for i in 1 2; do (exec 3<>/dev/tcp/127.0.0.1/5999) 2>/dev/null; done; echo done; read y")
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = sh.Process.Kill(); _ = sh.Wait() })
	out := bufio.NewScanner(outPipe)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("the shell did not start: %q", out.Text())
	}
	pid := sh.Process.Pid
	if netnsOf(pid) == netnsOf(os.Getpid()) {
		t.Fatal("the shell shares the test's network namespace")
	}
	if err := countConnsIn(ctx, pid, map[string]int{serviceDatabase: 5999, serviceBroker: 6000}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if !out.Scan() || out.Text() != "done" {
		t.Fatalf("the shell did not connect: %q", out.Text())
	}
	got, err := readConnsIn(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if got[serviceDatabase] != 2 || got[serviceBroker] != 0 {
		t.Errorf("attempts %v: want 2 to the database, none to the broker", got)
	}
}
