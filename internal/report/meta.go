package report

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Machine describes the machine a run ran on.
type Machine struct {
	Cores int `json:"cores"`
	// MemoryBytes is the total memory; 0 when unknown.
	MemoryBytes uint64 `json:"memory_bytes"`
	// OS is the distribution and kernel, e.g. "Debian GNU/Linux 12
	// (bookworm), linux/amd64".
	OS string `json:"os"`
	Go string `json:"go"`
	// Docker is the Docker engine's version; empty when it was not
	// reachable.
	Docker string `json:"docker,omitempty"`
}

// Meta says where, when and from what a result was produced.
type Meta struct {
	// Date is when the run started, RFC 3339.
	Date string `json:"date"`
	// Commit is the git commit of the tree that ran, with "-dirty" when
	// the tree had uncommitted changes; empty when unknown.
	Commit  string  `json:"commit,omitempty"`
	Machine Machine `json:"machine"`
}

// Validate reports, wrapping ErrNoMeta, what m lacks of what CollectMeta
// always fills in: an RFC 3339 date, and the machine's cores, OS and Go
// version. The commit and the Docker version may be unknown.
func (m Meta) Validate() error {
	var missing []string
	if _, err := time.Parse(time.RFC3339, m.Date); err != nil {
		missing = append(missing, "meta.date")
	}
	if m.Machine.Cores < 1 {
		missing = append(missing, "meta.machine.cores")
	}
	if m.Machine.OS == "" {
		missing = append(missing, "meta.machine.os")
	}
	if m.Machine.Go == "" {
		missing = append(missing, "meta.machine.go")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s missing", ErrNoMeta, strings.Join(missing, ", "))
	}
	return nil
}

// EnvCommit names the commit a run records when the working directory is
// no git tree (an image of the outboxlab command, built with the commit).
const EnvCommit = "OUTBOXLAB_COMMIT"

// CollectMeta describes this machine and what runs: the commit the
// running binary was built from (go build stamps it), else the git tree
// of the working directory now (go run stamps nothing), else the commit
// EnvCommit names. Whatever cannot be found out is left empty.
func CollectMeta(ctx context.Context, now time.Time) Meta {
	m := Meta{Date: now.UTC().Format(time.RFC3339)}
	m.Machine = Machine{
		Cores:       runtime.NumCPU(),
		MemoryBytes: memTotal(),
		OS:          osName(),
		Go:          runtime.Version(),
		Docker:      output(ctx, "docker", "version", "--format", "{{.Server.Version}}"),
	}
	if c := builtCommit(); c != "" {
		// The binary that runs says what it was built from, whatever the
		// working tree holds by now (a campaign runs for an hour while the
		// tree moves on).
		m.Commit = c
	} else if c := output(ctx, "git", "rev-parse", "--short=12", "HEAD"); c != "" {
		m.Commit = c
		if output(ctx, "git", "status", "--porcelain", "--untracked-files=no") != "" {
			m.Commit += "-dirty"
		}
	} else {
		m.Commit = strings.TrimSpace(os.Getenv(EnvCommit))
	}
	return m
}

// output runs a command briefly and returns its trimmed standard output,
// or "" when it failed.
func output(ctx context.Context, name string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func memTotal() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

func osName() string {
	name := runtime.GOOS
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				name = strings.Trim(v, `"`)
			}
		}
	}
	return name + ", " + runtime.GOOS + "/" + runtime.GOARCH
}

// Memory renders MemoryBytes in GiB.
func (m Machine) Memory() string {
	if m.MemoryBytes == 0 {
		return "unknown"
	}
	return strconv.FormatFloat(float64(m.MemoryBytes)/(1<<30), 'f', 1, 64) + " GiB"
}

// builtCommit is the commit the running binary was built from, with
// "-dirty" when its tree had changes; "" when the build recorded none.
func builtCommit() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, modified string
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.modified":
			modified = kv.Value
		}
	}
	if rev == "" {
		return ""
	}
	rev = rev[:min(len(rev), 12)]
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}
