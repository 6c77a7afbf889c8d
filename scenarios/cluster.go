package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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
	ClusterLeaderKill     = "cluster-leader-kill"
	ClusterNodePause      = "cluster-node-pause"
	ClusterPartition      = "cluster-partition"
	ClusterMinorityLoss   = "cluster-minority-loss"
	ClusterRollingRestart = "cluster-rolling-restart"
	ClusterFullRestart    = "cluster-full-restart"
)

// clusterNodes is the size of the cluster scenarios' broker cluster.
const clusterNodes = 3

// ClusterCatalogue returns the scenarios of the broker cluster tier: each
// runs on a three-node RabbitMQ cluster (EnvOptionsFor) whose consumer
// queues are quorum queues (Options.QueueType: classic for the contrast),
// the relays and consumers given every node's URL to fail over. They are
// apart from Catalogue: their environment is another one.
func ClusterCatalogue() []Scenario {
	return named(
		clusterLeaderKill(), clusterNodePause(), clusterPartition(), clusterMinorityLoss(),
		clusterRollingRestart(), clusterFullRestart(),
	)
}

// ClusterNames returns the names of ClusterCatalogue's scenarios.
func ClusterNames() []string {
	var out []string
	for _, s := range ClusterCatalogue() {
		out = append(out, s.Name)
	}
	return out
}

// queueType is the consumer queues' type: on a cluster the one the
// options ask for, quorum by default; classic on one node.
func (r *run) queueType() string {
	if r.sc.BrokerNodes > 1 {
		if r.opts.QueueType != "" {
			return r.opts.QueueType
		}
		return relay.QueueQuorum
	}
	return relay.QueueClassic
}

// QueueTypes are the queue types a cluster scenario's consumer queues may
// have (Options.QueueType).
var QueueTypes = []string{relay.QueueQuorum, relay.QueueClassic}

// validQueueType checks Options.QueueType against the scenario.
func validQueueType(sc Scenario, qt string) error {
	switch {
	case qt == "":
		return nil
	case qt != relay.QueueQuorum && qt != relay.QueueClassic:
		return fmt.Errorf("queue type %q: want %s or %s", qt, relay.QueueQuorum, relay.QueueClassic)
	case sc.BrokerNodes < 2:
		return fmt.Errorf("scenario %s runs on one broker node, whose queues are classic: a queue type is for the cluster scenarios (%s)", sc.Name, strings.Join(ClusterNames(), ", "))
	}
	return nil
}

// clusterScenario is the frame of a cluster scenario: the default
// workload on a three-node cluster, and the confirm stall measured after
// the run.
func clusterScenario(name, summary string, safety time.Duration, faults func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error)) Scenario {
	return Scenario{
		Name: name, Summary: summary, Workload: defaultWorkload(), Safety: safety, BrokerNodes: clusterNodes,
		Faults: func(s Stage, rng *rand.Rand, safety time.Duration) ([]chaos.Step, error) {
			if s.Cluster() == nil {
				return nil, fmt.Errorf("%s needs a broker cluster", name)
			}
			return faults(s, rng, safety)
		},
		Check: func(ctx context.Context, s Stage, res *Result) {
			if res.Records.Known {
				res.ConfirmStall = confirmStall(res.History)
			}
		},
	}
}

// queueNodeScenario is a cluster scenario with one fault of act on the
// node that hosts context 0's consumer queue (the quorum leader, or a
// classic queue's home), found when it is injected, from 2 to 4 s into
// the run for a time between lo and hi (drawn first).
func queueNodeScenario(name, summary string, safety time.Duration, act nodeAct, lo, hi time.Duration) Scenario {
	return clusterScenario(name, summary, safety, func(s Stage, rng *rand.Rand, _ time.Duration) ([]chaos.Step, error) {
		f := &queueNode{cl: s.Cluster(), queue: s.Queue(0), qtype: s.QueueType(), act: act}
		if err := s.AddFault(f, ""); err != nil {
			return nil, err
		}
		dur := between(rng, lo, hi)
		return []chaos.Step{Step(f, between(rng, 2*time.Second, 4*time.Second), dur)}, nil
	})
}

func clusterLeaderKill() Scenario {
	return queueNodeScenario(ClusterLeaderKill,
		"the node that hosts the quorum queue's leader is killed while confirms are in flight, and started again; publishers and consumers fail over to the other nodes",
		9*time.Second, actKill, 2*time.Second, 4*time.Second)
}

func clusterNodePause() Scenario {
	return queueNodeScenario(ClusterNodePause,
		"the node that hosts the quorum queue's leader is frozen (docker pause) for less than the Erlang net tick time, as a long GC pause or a stalled VM would: its clients' confirms stall and the queue elects a new leader, and it is thawed",
		12*time.Second, actPause, 3*time.Second, 4*time.Second)
}

func clusterPartition() Scenario {
	tick := time.Duration(testenv.NetTicktime) * time.Second
	return queueNodeScenario(ClusterPartition,
		"the node that hosts the quorum queue's leader is cut off from the other two and from every client, past the net tick time (it pauses itself, pause_minority), and reconnected",
		14*time.Second, actPartition, tick+2*time.Second, tick+4*time.Second)
}

func clusterMinorityLoss() Scenario {
	return queueNodeScenario(ClusterMinorityLoss,
		"the node that hosts the quorum queue's leader is lost with its data (its container and volume removed, the cluster told to forget it); the two left keep the queue; an empty node takes its place and joins",
		12*time.Second, actLoss, 3*time.Second, 5*time.Second)
}

func clusterRollingRestart() Scenario {
	sc := clusterScenario(ClusterRollingRestart,
		"every node in turn is stopped (SIGTERM) and started again, the next one only once the cluster has all its nodes, while the workload runs",
		40*time.Second,
		func(s Stage, rng *rand.Rand, _ time.Duration) ([]chaos.Step, error) {
			var steps []chaos.Step
			for i := range s.Cluster().Len() {
				f := &nodeRestart{cl: s.Cluster(), node: i}
				if err := s.AddFault(f, "rolling"); err != nil {
					return nil, err
				}
				steps = append(steps, Step(f, between(rng, 2*time.Second, 3*time.Second), between(rng, 2*time.Second, 3*time.Second)))
			}
			return steps, nil
		})
	sc.Workload.Events = 400
	return sc
}

func clusterFullRestart() Scenario {
	return clusterScenario(ClusterFullRestart,
		"every node of the cluster is stopped at once (SIGTERM), so that no broker takes a publish, and all are started again together",
		12*time.Second,
		func(s Stage, rng *rand.Rand, _ time.Duration) ([]chaos.Step, error) {
			f := &clusterStop{cl: s.Cluster()}
			if err := s.AddFault(f, ""); err != nil {
				return nil, err
			}
			return []chaos.Step{Step(f, between(rng, 2*time.Second, 4*time.Second), between(rng, 2*time.Second, 4*time.Second))}, nil
		})
}

// nodeAct is what a queueNode fault does to its node.
type nodeAct string

const (
	actKill      nodeAct = "killed"
	actPause     nodeAct = "paused"
	actPartition nodeAct = "partitioned"
	actLoss      nodeAct = "lost with its data"
)

// queueNode acts on the cluster node that hosts a queue (the quorum
// queue's leader, or a classic queue's home node), found when the fault is
// injected: it kills it (started again at heal), pauses it (thawed),
// partitions it from every other container (reconnected) or loses it with
// its data (an empty node takes its place at heal). The heal waits until
// the cluster has all its nodes again. Everyone connected to that node
// loses the connection, so it targets every process.
type queueNode struct {
	faultState
	cl           *testenv.Cluster
	queue, qtype string
	act          nodeAct

	mu    sync.Mutex
	node  int // index of the node acted on
	nodes []string
}

func (f *queueNode) Name() string {
	role := "quorum leader's node"
	if f.qtype == relay.QueueClassic {
		role = "classic queue's node"
	}
	return fmt.Sprintf("%s %s", role, f.act)
}
func (f *queueNode) Class() history.FaultClass { return history.ClassBroker }
func (f *queueNode) Targets() []string         { return nil }
func (f *queueNode) Kind() string {
	switch f.act {
	case actPause:
		return chaos.KindPause
	case actPartition:
		return chaos.KindDown
	}
	return chaos.KindKill
}

// Inject finds the queue's node and acts on it.
func (f *queueNode) Inject(ctx context.Context) error {
	i, err := QueueNode(ctx, f.cl, f.queue)
	if err != nil {
		return err
	}
	switch f.act {
	case actKill:
		err = f.cl.Node(i).Kill(ctx)
	case actPause:
		err = f.cl.Node(i).Pause(ctx)
	case actPartition:
		err = f.cl.Partition(ctx, i)
	case actLoss:
		err = f.cl.Lose(ctx, i, (i+1)%f.cl.Len())
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.node = i
	f.nodes = append(f.nodes, f.cl.NodeName(i))
	f.mu.Unlock()
	f.active.Store(true)
	f.hits.Add(1)
	return nil
}

// Heal undoes the act and waits for the whole cluster.
func (f *queueNode) Heal(ctx context.Context) error {
	if !f.active.Swap(false) {
		return nil
	}
	f.mu.Lock()
	i := f.node
	f.mu.Unlock()
	var err error
	switch f.act {
	case actKill:
		if err = f.cl.Node(i).Start(ctx); err == nil {
			err = f.cl.Node(i).WaitReady(ctx)
		}
	case actPause:
		err = f.cl.Node(i).Unpause(ctx)
	case actPartition:
		err = f.cl.Heal(ctx, i)
	case actLoss:
		err = f.cl.Replace(ctx, i, (i+1)%f.cl.Len())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.cl.NodeName(i), err)
	}
	return f.cl.WaitRunning(ctx, f.cl.Len())
}

// Nodes names the nodes the fault acted on, in order.
func (f *queueNode) Nodes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.nodes...)
}

// nodeRestart stops one node gracefully (SIGTERM, as an upgrade does) and
// starts it at heal, waiting until the cluster has all its nodes.
type nodeRestart struct {
	faultState
	cl   *testenv.Cluster
	node int
}

func (f *nodeRestart) Name() string              { return f.cl.NodeName(f.node) + " restarted" }
func (f *nodeRestart) Class() history.FaultClass { return history.ClassBroker }
func (f *nodeRestart) Targets() []string         { return nil }
func (f *nodeRestart) Kind() string              { return chaos.KindRestart }

// Inject stops the node.
func (f *nodeRestart) Inject(ctx context.Context) error {
	f.active.Store(true)
	if err := f.cl.Node(f.node).Stop(ctx, 15*time.Second); err != nil {
		return err
	}
	f.hits.Add(1)
	return nil
}

// Heal starts it and waits for the whole cluster.
func (f *nodeRestart) Heal(ctx context.Context) error {
	if !f.active.Swap(false) {
		return nil
	}
	if err := f.cl.Node(f.node).Start(ctx); err != nil {
		return err
	}
	if err := f.cl.Node(f.node).WaitReady(ctx); err != nil {
		return fmt.Errorf("%s after restart: %w", f.cl.NodeName(f.node), err)
	}
	return f.cl.WaitRunning(ctx, f.cl.Len())
}

// clusterStop stops every node at once (SIGTERM) and starts them all
// together at heal, waiting until the cluster has all its nodes.
type clusterStop struct {
	faultState
	cl *testenv.Cluster
}

func (f *clusterStop) Name() string              { return "every broker node stopped" }
func (f *clusterStop) Class() history.FaultClass { return history.ClassBroker }
func (f *clusterStop) Targets() []string         { return nil }
func (f *clusterStop) Kind() string              { return chaos.KindStop }

// Inject stops every node, in parallel.
func (f *clusterStop) Inject(ctx context.Context) error {
	f.active.Store(true)
	if err := f.eachNode(func(c *testenv.Container) error { return c.Stop(ctx, 15*time.Second) }); err != nil {
		return err
	}
	f.hits.Add(1)
	return nil
}

// Heal starts every node, in parallel: a node that was stopped waits at
// boot for the others it knew.
func (f *clusterStop) Heal(ctx context.Context) error {
	if !f.active.Swap(false) {
		return nil
	}
	if err := f.eachNode(func(c *testenv.Container) error {
		if err := c.Start(ctx); err != nil {
			return err
		}
		return c.WaitReady(ctx)
	}); err != nil {
		return err
	}
	return f.cl.WaitRunning(ctx, f.cl.Len())
}

func (f *clusterStop) eachNode(do func(c *testenv.Container) error) error {
	var wg sync.WaitGroup
	errs := make([]error, f.cl.Len())
	for i := range f.cl.Len() {
		wg.Go(func() { errs[i] = do(f.cl.Node(i)) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// confirmStall returns the longest time, from the moment any fault of the
// broker class began to act (its invoke: injecting may take seconds, as
// forgetting a lost node does) to the last confirm of the run, in which the relays'
// records show no publish confirmed (ack): the publish stall a failover
// costs.
func confirmStall(h []history.Op) time.Duration {
	var acks, starts []time.Time
	for _, op := range h {
		switch {
		case op.F == history.Publish && op.Type == history.OK && op.Confirm == history.ConfirmAck:
			acks = append(acks, op.Time)
		case op.F == history.FaultStart && op.Type == history.Invoke && op.Meta.Fault != nil && op.Meta.Fault.Class == history.ClassBroker:
			starts = append(starts, op.Time)
		}
	}
	slices.SortFunc(acks, func(a, b time.Time) int { return a.Compare(b) })
	var stall time.Duration
	for _, from := range starts {
		prev := from
		for _, t := range acks {
			if t.After(prev) {
				stall = max(stall, t.Sub(prev))
				prev = t
			}
		}
	}
	return stall
}

// QueueNode returns the index of the cluster node that hosts queue, as
// the first node that answers reports it: a quorum queue's leader, or a
// classic queue's home node (the node that lists it among its own queues,
// rabbitmqctl list_queues --local).
func QueueNode(ctx context.Context, cl *testenv.Cluster, queue string) (int, error) {
	var errs []string
	for i := range cl.Len() {
		qs, err := listQueues(ctx, cl, i, false)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		for _, q := range qs {
			if q.Name != queue {
				continue
			}
			if q.Type != relay.QueueQuorum {
				return homeNode(ctx, cl, queue)
			}
			for k := range cl.Len() {
				if cl.NodeName(k) == q.Leader {
					return k, nil
				}
			}
			return -1, fmt.Errorf("quorum queue %s is led by %q, not a node of the cluster", queue, q.Leader)
		}
		return -1, fmt.Errorf("no queue %s on %s", queue, cl.NodeName(i))
	}
	return -1, fmt.Errorf("no node lists the queues: %s", strings.Join(errs, "; "))
}

// homeNode returns the node that lists the classic queue queue among its
// own.
func homeNode(ctx context.Context, cl *testenv.Cluster, queue string) (int, error) {
	var errs []string
	for i := range cl.Len() {
		qs, err := listQueues(ctx, cl, i, true)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if slices.ContainsFunc(qs, func(q listedQueue) bool { return q.Name == queue }) {
			return i, nil
		}
	}
	if len(errs) > 0 {
		return -1, fmt.Errorf("no node lists classic queue %s as its own: %s", queue, strings.Join(errs, "; "))
	}
	return -1, fmt.Errorf("no node lists classic queue %s as its own", queue)
}

// listedQueue is a queue as rabbitmqctl list_queues prints it.
type listedQueue struct {
	Name, Type, Leader string
}

// listQueues lists the queues node i knows (local: only those it hosts).
func listQueues(ctx context.Context, cl *testenv.Cluster, i int, local bool) ([]listedQueue, error) {
	cmd := []string{"rabbitmqctl", "list_queues", "name", "type", "leader", "--formatter", "json"}
	if local {
		cmd = append(cmd, "--local")
	}
	code, out, err := cl.Node(i).Exec(ctx, cmd...)
	if err != nil || code != 0 {
		return nil, fmt.Errorf("%s: exit %d %v %s", cl.NodeName(i), code, err, strings.TrimSpace(out))
	}
	if j := strings.IndexByte(out, '['); j >= 0 {
		out = out[j:]
	}
	var qs []listedQueue
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		return nil, fmt.Errorf("reading the queues of %s: %w", cl.NodeName(i), err)
	}
	return qs, nil
}
