package scenarios

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Services a replica's connection attempts are counted apart for: the
// database and the broker, as its environment names them.
const (
	serviceDatabase = "database"
	serviceBroker   = "broker"
)

// connRulePrefix starts the comment of every counting rule, followed by
// the service it counts.
const connRulePrefix = "outboxlab:"

// servicePorts returns the TCP port of each service a replica's URLs
// name (5432 and 5672 when a URL names none); a URL that does not parse
// is left out.
func servicePorts(dbURL, amqpURL string) map[string]int {
	out := map[string]int{}
	for service, raw := range map[string]string{serviceDatabase: dbURL, serviceBroker: amqpURL} {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			continue
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{serviceDatabase: "5432", serviceBroker: "5672"}[service]
		}
		if n, err := strconv.Atoi(port); err == nil {
			out[service] = n
		}
	}
	return out
}

// netnsOf names the network namespace of process pid ("net:[N]"), or ""
// when it cannot be read.
func netnsOf(pid int) string {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return ""
	}
	return ns
}

// iptablesIn runs iptables in the network namespace of process pid
// (nsenter), with a deadline.
func iptablesIn(ctx context.Context, pid int, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	argv := append([]string{fmt.Sprintf("--net=/proc/%d/ns/net", pid), "iptables", "-w", "2"}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", argv...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("nsenter iptables %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// countConnsIn adds, to the OUTPUT chain of the network namespace of
// process pid, a rule per service that counts the TCP connection
// attempts (SYNs, retransmissions included) sent to its port. The rules
// accept nothing and drop nothing: a packet goes on through the chain.
// They live as long as the namespace (a container's).
func countConnsIn(ctx context.Context, pid int, ports map[string]int) error {
	for service, port := range ports {
		if _, err := iptablesIn(ctx, pid, "-I", "OUTPUT", "-p", "tcp", "--syn", "--dport", strconv.Itoa(port),
			"-m", "comment", "--comment", connRulePrefix+service); err != nil {
			return err
		}
	}
	return nil
}

// readConnsIn reads the counting rules of countConnsIn: the connection
// attempts each service was sent so far.
func readConnsIn(ctx context.Context, pid int) (map[string]int64, error) {
	out, err := iptablesIn(ctx, pid, "-L", "OUTPUT", "-v", "-n", "-x")
	if err != nil {
		return nil, err
	}
	return parseConnRules(out)
}

// errNoConnRules says the chain holds no counting rule: the namespace
// is not the one they were added to (its process was started again).
var errNoConnRules = errors.New("no counting rule in the chain")

// parseConnRules reads, from `iptables -L CHAIN -v -n -x`, the packets
// of every counting rule by the service its comment names.
func parseConnRules(listing []byte) (map[string]int64, error) {
	got := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(listing))
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, "/* "+connRulePrefix)
		if i < 0 {
			continue
		}
		service, _, ok := strings.Cut(line[i+3+len(connRulePrefix):], " */")
		fields := strings.Fields(line)
		if !ok || len(fields) == 0 {
			return nil, fmt.Errorf("unreadable counting rule %q", line)
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("unreadable counting rule %q: %w", line, err)
		}
		got[service] += n
	}
	if len(got) == 0 {
		return nil, errNoConnRules
	}
	return got, nil
}
