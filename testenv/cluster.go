package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// Cluster is a RabbitMQ cluster on the environment's network: nodes
// rabbitmq-1 to rabbitmq-N, each a container of the RabbitMQ image whose
// Erlang node is rabbit@rabbitmq-K (its name on the network, so that the
// others find it), with the image's one Erlang cookie, joined to the first
// node by the harness. Each node publishes its AMQP port on the host.
type Cluster struct {
	env   *Env
	image string
	mu    sync.Mutex
	nodes []*Container
	ports []int // host port of each node's AMQP listener
}

// NetTicktime is the cluster nodes' Erlang net_ticktime in seconds: a
// node that stops answering is taken for down after about this long.
const NetTicktime = 6

// ClusterNodePrefix is the prefix of a cluster node's container name.
const ClusterNodePrefix = "rabbitmq-"

// StartCluster starts an n-node RabbitMQ cluster from the environment's
// RabbitMQ image and forms it: the nodes boot in parallel, the second and
// later ones join the first (stop_app, join_cluster, start_app), and
// StartCluster returns once the first node reports all n running. The
// nodes are the environment's containers: Close removes them.
func (e *Env) StartCluster(ctx context.Context, image string, n int) (_ *Cluster, err error) {
	if n < 2 {
		return nil, fmt.Errorf("a cluster needs at least 2 nodes, not %d", n)
	}
	if err := checkImage(ctx, e.docker, image); err != nil {
		return nil, err
	}
	cl := &Cluster{env: e, nodes: make([]*Container, n), ports: make([]int, n)}
	defer func() {
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			for _, c := range cl.nodes {
				if c != nil {
					_ = c.Remove(rctx)
				}
			}
		}
	}()
	cl.image = image
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = cl.runNode(ctx, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("starting the cluster's nodes: %w", err)
	}
	for i := 1; i < n; i++ {
		if err := cl.join(ctx, i, 0); err != nil {
			return nil, err
		}
	}
	if err := cl.WaitRunning(ctx, n); err != nil {
		return nil, err
	}
	return cl, nil
}

// runNode starts node i afresh, empty, and waits until it takes AMQP
// connections; it joins no cluster.
func (cl *Cluster) runNode(ctx context.Context, i int) error {
	name := ClusterNodePrefix + strconv.Itoa(i+1)
	c, host, err := cl.env.run(ctx, ContainerSpec{
		Name: name, Image: cl.image, Role: "rabbitmq", StopTimeout: 15 * time.Second,
		Env: map[string]string{
			"RABBITMQ_NODENAME": "rabbit@" + name,
			// A node cut off is noticed within seconds, not the
			// default minute; the side of a partition with fewer
			// nodes pauses until it sees the others again.
			"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel net_ticktime " + strconv.Itoa(NetTicktime) +
				" -rabbit cluster_partition_handling pause_minority",
		},
	}, []int{rabbitMQPort})
	if err != nil {
		return err
	}
	cl.mu.Lock()
	cl.nodes[i], cl.ports[i] = c, host[rabbitMQPort]
	cl.mu.Unlock()
	c.ready = func(ctx context.Context) error { return pingRabbitMQ(ctx, cl.AMQPURL(i)) }
	return c.WaitReady(ctx)
}

// join makes node i a member of the cluster of node to (stop_app,
// join_cluster, start_app).
func (cl *Cluster) join(ctx context.Context, i, to int) error {
	for _, cmd := range [][]string{
		{"rabbitmqctl", "stop_app"},
		{"rabbitmqctl", "join_cluster", cl.NodeName(to)},
		{"rabbitmqctl", "start_app"},
	} {
		if err := cl.exec(ctx, i, cmd...); err != nil {
			return fmt.Errorf("joining %s to %s: %w", cl.NodeName(i), cl.NodeName(to), err)
		}
	}
	return nil
}

// Lose removes node i's container and its data (as a lost disk would) and
// has node other, which must be running, forget it: the cluster runs on
// without it, and the quorum queues drop it from their members. Replace
// brings an empty node back under the same name.
func (cl *Cluster) Lose(ctx context.Context, i, other int) error {
	if err := cl.Node(i).Remove(ctx); err != nil {
		return err
	}
	if err := cl.exec(ctx, other, "rabbitmqctl", "forget_cluster_node", cl.NodeName(i)); err != nil {
		return fmt.Errorf("forgetting the lost %s: %w", cl.NodeName(i), err)
	}
	return nil
}

// Replace starts an empty node i in place of one Lose removed, joins it to
// node other's cluster, adds it back to every quorum queue's members
// (rabbitmq-queues grow) and waits until every node runs.
func (cl *Cluster) Replace(ctx context.Context, i, other int) error {
	if err := cl.runNode(ctx, i); err != nil {
		return fmt.Errorf("starting an empty %s: %w", cl.NodeName(i), err)
	}
	if err := cl.join(ctx, i, other); err != nil {
		return err
	}
	if err := cl.WaitRunning(ctx, cl.Len()); err != nil {
		return err
	}
	if err := cl.exec(ctx, other, "rabbitmq-queues", "grow", cl.NodeName(i), "all"); err != nil {
		return fmt.Errorf("adding %s back to the quorum queues: %w", cl.NodeName(i), err)
	}
	return nil
}

// exec runs cmd in node i and fails with its output unless it exits 0.
func (cl *Cluster) exec(ctx context.Context, i int, cmd ...string) error {
	code, out, err := cl.Node(i).Exec(ctx, cmd...)
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(cmd, " "), err)
	}
	if code != 0 {
		return fmt.Errorf("%s exited %d: %s", strings.Join(cmd, " "), code, strings.TrimSpace(out))
	}
	return nil
}

// Len returns the number of nodes.
func (cl *Cluster) Len() int { return len(cl.nodes) }

// Node returns node i's container (0-based).
func (cl *Cluster) Node(i int) *Container {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.nodes[i]
}

// NodeName returns node i's Erlang node name, e.g. "rabbit@rabbitmq-1".
func (cl *Cluster) NodeName(i int) string { return "rabbit@" + ClusterNodePrefix + strconv.Itoa(i+1) }

// AMQPURL returns node i's AMQP URI as this process reaches it.
func (cl *Cluster) AMQPURL(i int) string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return amqpURL(cl.env.host, cl.ports[i])
}

// AMQPURLs returns every node's AMQP URI, comma-separated, in node order:
// the list a failing-over client takes (relay.SplitAMQPURLs).
func (cl *Cluster) AMQPURLs() string {
	urls := make([]string, len(cl.nodes))
	for i := range cl.nodes {
		urls[i] = cl.AMQPURL(i)
	}
	return strings.Join(urls, ",")
}

// ContainerAMQPURLs returns every node's AMQP URI as containers on the
// network reach them, comma-separated.
func (cl *Cluster) ContainerAMQPURLs() string {
	urls := make([]string, len(cl.nodes))
	for i, c := range cl.nodes {
		urls[i] = amqpURL(c.Name(), rabbitMQPort)
	}
	return strings.Join(urls, ",")
}

// Running returns the nodes the first reachable node reports running.
func (cl *Cluster) Running(ctx context.Context) ([]string, error) {
	var errs []error
	for i := range cl.nodes {
		code, out, err := cl.Node(i).Exec(ctx, "rabbitmqctl", "cluster_status", "--formatter", "json")
		if err == nil && code == 0 {
			var st struct {
				Running []string `json:"running_nodes"`
			}
			if err := json.Unmarshal([]byte(jsonPart(out)), &st); err != nil {
				return nil, fmt.Errorf("reading the cluster status of %s: %w", cl.NodeName(i), err)
			}
			slices.Sort(st.Running)
			return st.Running, nil
		}
		if err == nil {
			err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(out))
		}
		errs = append(errs, fmt.Errorf("%s: %w", cl.NodeName(i), err))
	}
	return nil, fmt.Errorf("no node reports the cluster's status: %w", errors.Join(errs...))
}

// jsonPart returns out from its first '{': rabbitmqctl may print a banner
// line before the JSON.
func jsonPart(out string) string {
	if i := strings.IndexByte(out, '{'); i >= 0 {
		return out[i:]
	}
	return out
}

// WaitRunning waits until a node reports n nodes running, bounded by ctx
// (default 2 minutes).
func (cl *Cluster) WaitRunning(ctx context.Context, n int) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	var last []string
	err := WaitUntil(ctx, 250*time.Millisecond, func(ctx context.Context) error {
		running, err := cl.Running(ctx)
		if err != nil {
			return err
		}
		last = running
		if len(running) != n {
			return fmt.Errorf("%d of %d nodes running: %v", len(running), n, running)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d running nodes (last seen %v): %w", n, last, err)
	}
	return nil
}

// Partition takes node i off the environment's network: the other nodes,
// toxiproxy and the containers there no longer reach it, nor does this
// process through its published port. Heal puts it back under its name.
func (cl *Cluster) Partition(ctx context.Context, i int) error {
	_, err := cl.env.docker.NetworkDisconnect(ctx, cl.env.networkID, client.NetworkDisconnectOptions{Container: cl.Node(i).ID(), Force: true})
	if err != nil {
		return fmt.Errorf("partitioning %s: %w", cl.NodeName(i), err)
	}
	return nil
}

// Heal reconnects node i to the environment's network under its name.
func (cl *Cluster) Heal(ctx context.Context, i int) error {
	_, err := cl.env.docker.NetworkConnect(ctx, cl.env.networkID, client.NetworkConnectOptions{
		Container:      cl.Node(i).ID(),
		EndpointConfig: &network.EndpointSettings{Aliases: []string{cl.Node(i).Name()}},
	})
	if err != nil {
		return fmt.Errorf("healing the partition of %s: %w", cl.NodeName(i), err)
	}
	return nil
}
