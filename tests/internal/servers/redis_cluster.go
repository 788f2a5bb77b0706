package servers

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox/tests/internal/faultnet"
)

// RedisCluster is a throw-away Redis Cluster: masters with a replica each,
// every node a redis-server of its own (no persistence: a node that dies
// is replaced by its replica, not restarted), failing over after a second
// of silence (cluster-node-timeout 1000).
type RedisCluster struct {
	Nodes []*RedisNode
}

// RedisNode is one node of a RedisCluster.
type RedisNode struct {
	Port int // where it listens
	// Announced is the port the cluster, its clients and its replicas
	// reach it on: Port, or that of its Tap.
	Announced int
	// Tap is the proxy in front of the first master, which can cut it off
	// from its replica (faultnet.Tap.Drop) while its clients still reach
	// it; nil for the other nodes.
	Tap  *faultnet.Tap
	proc *Process
	rdb  *redis.Client // of the node alone (its own port, no tap)
}

// Addr is the address the cluster knows the node by.
func (n *RedisNode) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.Announced) }

// Kill kills the node with SIGKILL and waits for it to exit.
func (n *RedisNode) Kill(t testing.TB) {
	t.Helper()
	if err := n.proc.SignalGroup(syscall.SIGKILL); err != nil {
		t.Fatalf("killing redis-server on port %d: %v", n.Port, err)
	}
	n.proc.Wait(30 * time.Second)
}

// Restart starts the node again after Kill, empty (no persistence): with
// its cluster configuration it rejoins the cluster, as a replica of the
// node that took its slots over.
func (n *RedisNode) Restart(t testing.TB) {
	t.Helper()
	if err := n.proc.Start(); err != nil {
		t.Fatalf("restarting redis-server on port %d: %v", n.Port, err)
	}
	r := &Redis{Port: n.Port, proc: n.proc}
	if err := r.waitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// StartRedisCluster starts masters × (1 + 1 replica) nodes and joins them
// into a cluster (redis-cli --cluster create … --cluster-replicas 1). The
// first master is reached through a faultnet.Tap. It skips t, or fails it
// under OUTBOX_REQUIRE_SERVICES=1, when redis-server or redis-cli is
// missing; the nodes are killed when t ends.
func StartRedisCluster(t testing.TB, masters int) *RedisCluster {
	t.Helper()
	bins := Need(t, "redis-server", "redis-cli")
	c := &RedisCluster{}
	for i := range 2 * masters {
		c.Nodes = append(c.Nodes, startClusterNode(t, bins[0], i == 0))
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(bins[1], args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	c.WaitHealthy(t, 60*time.Second)
	return c
}

// startClusterNode starts one node, behind a tap if tapped.
func startClusterNode(t testing.TB, bin string, tapped bool) *RedisNode {
	t.Helper()
	root := serverDir(t, "redis-cluster")
	n := &RedisNode{Port: FreePort(t)}
	n.Announced = n.Port
	bus := FreePort(t)
	args := []string{"--port", strconv.Itoa(n.Port), "--bind", "127.0.0.1", "--dir", root, "--daemonize", "no",
		"--protected-mode", "no", "--save", "", "--appendonly", "no",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(root, "nodes.conf"),
		"--cluster-node-timeout", "1000", "--cluster-port", strconv.Itoa(bus), "--cluster-announce-ip", "127.0.0.1"}
	if tapped {
		n.Tap = faultnet.NewTap(t, "127.0.0.1:"+strconv.Itoa(n.Port), "REPLCONF")
		n.Announced = n.Tap.Port()
		args = append(args, "--cluster-announce-port", strconv.Itoa(n.Announced), "--cluster-announce-bus-port", strconv.Itoa(bus))
	}
	n.proc = Spawn(t, Spec{Name: "redis-server (cluster)", Path: bin, Args: args, Log: filepath.Join(root, "redis.log"), Dir: root})
	r := &Redis{Port: n.Port, proc: n.proc}
	if err := r.waitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	n.rdb = redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(n.Port), DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = n.rdb.Close() })
	return n
}

// Masters returns the nodes that are masters now, by the first live
// node's view, and the replica of each (by master address; nil for none).
func (c *RedisCluster) Masters(t testing.TB) (masters []*RedisNode, replicaOf map[string]*RedisNode) {
	t.Helper()
	byAddr := map[string]*RedisNode{}
	for _, n := range c.Nodes {
		byAddr[n.Addr()] = n
	}
	replicaOf = map[string]*RedisNode{}
	ids := map[string]string{} // node id → address
	var lines [][]string
	for _, n := range c.live() {
		out, err := n.rdb.ClusterNodes(context.Background()).Result()
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			ids[f[0]], _, _ = strings.Cut(f[1], "@")
			lines = append(lines, f)
		}
		break
	}
	for _, f := range lines {
		addr := ids[f[0]]
		switch {
		case strings.Contains(f[2], "master") && !strings.Contains(f[2], "fail"):
			masters = append(masters, byAddr[addr])
		case strings.Contains(f[2], "slave") && !strings.Contains(f[2], "fail"):
			replicaOf[ids[f[3]]] = byAddr[addr]
		}
	}
	return masters, replicaOf
}

// WaitHealthy waits until every live node reports cluster_state:ok, sees
// every slot served, and every live replica's link to its master is up.
func (c *RedisCluster) WaitHealthy(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := c.unhealthy()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Redis Cluster is not healthy after %v: %s", timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unhealthy says why the cluster is not healthy, "" when it is.
func (c *RedisCluster) unhealthy() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, n := range c.live() {
		info, err := n.rdb.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Sprintf("node %d: %v", n.Port, err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return fmt.Sprintf("node %d: %s", n.Port, strings.Join(strings.Fields(info)[:3], " "))
		}
		repl, err := n.rdb.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Sprintf("node %d: %v", n.Port, err)
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Sprintf("node %d: its link to its master is down", n.Port)
		}
	}
	return ""
}

// live returns the nodes whose process runs.
func (c *RedisCluster) live() []*RedisNode {
	var out []*RedisNode
	for _, n := range c.Nodes {
		if n.proc.Running() {
			out = append(out, n)
		}
	}
	return out
}

// Addrs returns the addresses of the live nodes, for a cluster client.
func (c *RedisCluster) Addrs() []string {
	var out []string
	for _, n := range c.live() {
		out = append(out, n.Addr())
	}
	return out
}
