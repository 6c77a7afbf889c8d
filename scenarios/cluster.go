package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/outboxlab/outboxlab/chaos"
	"github.com/outboxlab/outboxlab/history"
	"github.com/outboxlab/outboxlab/relay"
	"github.com/outboxlab/outboxlab/testenv"
)

// Names of the broker cluster scenarios.
const (
	ClusterLeaderKill = "cluster-leader-kill"
)

// clusterNodes is the size of the cluster scenarios' broker cluster.
const clusterNodes = 3

// ClusterCatalogue returns the scenarios of the broker cluster tier: each
// runs on a three-node RabbitMQ cluster (EnvOptionsFor) whose consumer
// queues are quorum queues, the relays and consumers given every node's
// URL to fail over. They are apart from Catalogue: their environment is
// another one.
func ClusterCatalogue() []Scenario {
	return []Scenario{clusterLeaderKill()}
}

// ClusterNames returns the names of ClusterCatalogue's scenarios.
func ClusterNames() []string {
	var out []string
	for _, s := range ClusterCatalogue() {
		out = append(out, s.Name)
	}
	return out
}

// queueType is the consumer queues' type: quorum on a cluster.
func (r *run) queueType() string {
	if r.sc.BrokerNodes > 1 {
		return relay.QueueQuorum
	}
	return relay.QueueClassic
}

func clusterLeaderKill() Scenario {
	return Scenario{
		Name:        ClusterLeaderKill,
		Summary:     "the node that hosts the quorum queue's leader is killed while confirms are in flight, and started again; publishers and consumers fail over to the other nodes",
		Workload:    defaultWorkload(),
		Safety:      9 * time.Second,
		BrokerNodes: clusterNodes,
		faults: func(s stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			f := &leaderKill{cl: s.Cluster(), queue: s.Queue(0)}
			if f.cl == nil {
				return nil, fmt.Errorf("%s needs a broker cluster", ClusterLeaderKill)
			}
			if err := s.AddFault(f, ""); err != nil {
				return nil, err
			}
			at := between(rng, 2*time.Second, 4*time.Second)
			return []chaos.Step{step(f, at, between(rng, 2*time.Second, 4*time.Second))}, nil
		},
	}
}

// leaderKill kills the cluster node that hosts a quorum queue's leader,
// found when the fault is injected, and starts it again when healed,
// waiting until the cluster has all its nodes again. Everyone connected
// to that node loses the connection, so it targets every process.
type leaderKill struct {
	faultState
	cl    *testenv.Cluster
	queue string

	mu     sync.Mutex
	killed int // index of the node down
	nodes  []string
}

func (f *leaderKill) Name() string              { return "quorum leader of " + f.queue + " killed" }
func (f *leaderKill) Class() history.FaultClass { return history.ClassBroker }
func (f *leaderKill) Targets() []string         { return nil }
func (f *leaderKill) Kind() string              { return chaos.KindKill }

// Inject finds the queue's leader and kills its node.
func (f *leaderKill) Inject(ctx context.Context) error {
	leader, err := QuorumLeader(ctx, f.cl, f.queue)
	if err != nil {
		return err
	}
	if err := f.cl.Node(leader).Kill(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	f.killed = leader
	f.nodes = append(f.nodes, f.cl.NodeName(leader))
	f.mu.Unlock()
	f.active.Store(true)
	f.hits.Add(1)
	return nil
}

// Heal starts the killed node and waits for the whole cluster.
func (f *leaderKill) Heal(ctx context.Context) error {
	if !f.active.Swap(false) {
		return nil
	}
	f.mu.Lock()
	i := f.killed
	f.mu.Unlock()
	if err := f.cl.Node(i).Start(ctx); err != nil {
		return err
	}
	if err := f.cl.Node(i).WaitReady(ctx); err != nil {
		return fmt.Errorf("%s after restart: %w", f.cl.NodeName(i), err)
	}
	return f.cl.WaitRunning(ctx, f.cl.Len())
}

// Killed names the nodes the fault killed, in order.
func (f *leaderKill) Killed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.nodes...)
}

// QuorumLeader returns the index of the cluster node that leads the
// quorum queue queue, as the first node that answers reports it.
func QuorumLeader(ctx context.Context, cl *testenv.Cluster, queue string) (int, error) {
	var errs []string
	for i := range cl.Len() {
		code, out, err := cl.Node(i).Exec(ctx, "rabbitmqctl", "list_queues", "name", "type", "leader", "--formatter", "json")
		if err != nil || code != 0 {
			errs = append(errs, fmt.Sprintf("%s: exit %d %v %s", cl.NodeName(i), code, err, strings.TrimSpace(out)))
			continue
		}
		var qs []struct {
			Name, Type, Leader string
		}
		if j := strings.IndexByte(out, '['); j >= 0 {
			out = out[j:]
		}
		if err := json.Unmarshal([]byte(out), &qs); err != nil {
			return -1, fmt.Errorf("reading the queues of %s: %w", cl.NodeName(i), err)
		}
		for _, q := range qs {
			if q.Name != queue {
				continue
			}
			if q.Type != relay.QueueQuorum {
				return -1, fmt.Errorf("queue %s is a %s queue, not a quorum queue", queue, q.Type)
			}
			for k := range cl.Len() {
				if cl.NodeName(k) == q.Leader {
					return k, nil
				}
			}
			return -1, fmt.Errorf("queue %s is led by %q, not a node of the cluster", queue, q.Leader)
		}
		return -1, fmt.Errorf("no queue %s on %s", queue, cl.NodeName(i))
	}
	return -1, fmt.Errorf("no node lists the queues: %s", strings.Join(errs, "; "))
}
