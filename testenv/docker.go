package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// dockerClient connects to the engine named by the environment (DOCKER_HOST,
// DOCKER_API_VERSION, ...) or the local socket, negotiating the API version
// (the reference machine's engine speaks API 1.41), and checks that it
// answers.
func dockerClient(ctx context.Context) (*client.Client, error) {
	c, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDockerUnavailable, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Ping(pingCtx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("%w at %s: %v (is the Docker daemon running, and may this user use it?)", ErrDockerUnavailable, c.DaemonHost(), err)
	}
	return c, nil
}

// DockerAvailable reports whether a Docker engine answers, and why not.
func DockerAvailable(ctx context.Context) error {
	c, err := dockerClient(ctx)
	if err != nil {
		return err
	}
	return c.Close()
}

// ImageExists reports whether the image ref is in the local engine. It
// pulls nothing; an error means the engine could not be asked.
func ImageExists(ctx context.Context, ref string) (bool, error) {
	c, err := dockerClient(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	_, err = c.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("inspecting image %s: %w", ref, err)
	}
}

// checkImage returns an error naming `make images` when img is not in the
// local engine: images are built here, never pulled.
func checkImage(ctx context.Context, c *client.Client, img string) error {
	_, err := c.ImageInspect(ctx, img)
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: image %s is not in the local Docker engine: run `make images` in the outboxlab repository (images are built locally, never pulled)", ErrImageNotFound, img)
	default:
		return fmt.Errorf("inspecting image %s: %w", img, err)
	}
}

// dockerHostAddress is the address at which published ports are reached
// from this process: the host of a tcp:// DOCKER_HOST, else loopback.
func dockerHostAddress() string {
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "tcp://") {
		if u, err := url.Parse(h); err == nil && u.Hostname() != "" {
			return u.Hostname()
		}
	}
	return "127.0.0.1"
}

func newRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var owner = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	pid := os.Getpid()
	return host + ":" + strconv.Itoa(pid) + ":" + procStart(pid)
})

// ownerID names this process: host:pid:start time. The start time tells a
// live process from a later one that got the same pid.
func ownerID() string { return owner() }

// OwnerLabel names this process as the owner of what it leaves behind,
// host:pid:start time, as the containers' owner label does: a later run
// gives it to OwnerDead to tell whether the owner has ended.
func OwnerLabel() string { return owner() }

// OwnerDead reports whether the process an OwnerLabel names has ended:
// by its pid and start time on this host, or, for a label of another host
// or none (empty), by created, the leftover's age.
func OwnerDead(label string, created time.Time) bool { return ownerDead(label, created) }

// procStart returns the start time of process pid (field 22 of
// /proc/<pid>/stat, in clock ticks since boot), or "" where there is no
// /proc.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces; it ends at the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return ""
	}
	return fields[19]
}

// staleAfter is how old a leftover must be before it is removed when its
// owner cannot be checked (another host, no /proc).
const staleAfter = 6 * time.Hour

// ownerDead reports whether the process named by an owner label has
// ended. Leftovers from other hosts or without the label are judged by age.
func ownerDead(label string, created time.Time) bool {
	parts := strings.Split(label, ":")
	host, _ := os.Hostname()
	if len(parts) != 3 || parts[0] != host || parts[2] == "" || procStart(os.Getpid()) == "" {
		return !created.IsZero() && time.Since(created) > staleAfter
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return true
	}
	return procStart(pid) != parts[2]
}

// sweep removes the containers and networks of the harness whose owning
// process has died (a run killed by a timeout or a signal cannot clean up
// after itself). Those of live processes, such as test binaries of other
// packages running at the same time, are left alone.
func sweep(ctx context.Context, c *client.Client, logf func(string, ...any)) (int, error) {
	filter := make(client.Filters).Add("label", LabelHarness+"=true")
	cs, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filter})
	if err != nil {
		return 0, fmt.Errorf("listing containers: %w", err)
	}
	removed := 0
	var errs []error
	for _, ctr := range cs.Items {
		if !ownerDead(ctr.Labels[LabelOwner], time.Unix(ctr.Created, 0)) {
			continue
		}
		if _, err := c.ContainerRemove(ctx, ctr.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		logf("testenv: removed leftover container %s (run %s)", strings.TrimPrefix(firstOf(ctr.Names), "/"), ctr.Labels[LabelRun])
		removed++
	}
	ns, err := c.NetworkList(ctx, client.NetworkListOptions{Filters: filter})
	if err != nil {
		return removed, errors.Join(append(errs, fmt.Errorf("listing networks: %w", err))...)
	}
	for _, n := range ns.Items {
		if !ownerDead(n.Labels[LabelOwner], n.Created) {
			continue
		}
		if _, err := c.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		logf("testenv: removed leftover network %s", n.Name)
		removed++
	}
	return removed, errors.Join(errs...)
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// removeRun removes every container, then the network, labelled with run.
func removeRun(ctx context.Context, c *client.Client, run string) error {
	filter := make(client.Filters).Add("label", LabelRun+"="+run)
	cs, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filter})
	if err != nil {
		return fmt.Errorf("listing containers: %w", err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, ctr := range cs.Items {
		wg.Go(func() {
			_, err := c.ContainerRemove(ctx, ctr.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			if err != nil && !cerrdefs.IsNotFound(err) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("removing container %s: %w", firstOf(ctr.Names), err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	ns, err := c.NetworkList(ctx, client.NetworkListOptions{Filters: filter})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing networks: %w", err))...)
	}
	for _, n := range ns.Items {
		if _, err := c.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing network %s: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}
