// Cluster workloads of the protoactor-go peer (12 cluster-virtual, 13
// failover): protoactor-go's cluster package (virtual actors, "grains") of
// the module version pinned in go.mod.
//
//   - three OS processes: node A (this process, which measures and prints
//     the line) on 127.0.0.1 and nodes B and C on 127.0.0.2 / 127.0.0.3,
//     which are this program started again as `__node <workload> <index>
//     <port-A> <port-B> <port-C>`; their pids go to $PEER_PIDFILE;
//   - cluster provider: cluster/clusterproviders/automanaged (no external
//     service): every node serves GET /_health over HTTP on its own port
//     (random free ports in 20000-39999, chosen by A) and polls the static
//     list of the three nodes every refreshTTL (2 s, the value
//     automanaged.New() uses); the members that answer are the topology;
//   - identity lookup: cluster/identitylookup/disthash (rendezvous hashing
//     over the members; each member's "partition-activator" spawns the
//     activations it owns);
//   - remote: the cluster's remote layer, gRPC over TCP on the node's
//     loopback address, port chosen by the OS; messages are protobuf
//     (pb/messages.proto: Add, Added, Get, Value);
//   - everything else is cluster.Configure's defaults (gossip every
//     300 ms, gossip heartbeat expiration 20 s, ...).
//
// Asks are cluster.Request(identity, "Counter", msg, cluster.WithTimeout(t)).
// Request's own deadline is only checked between its retries, and the
// disthash lookup inside it waits up to a fixed 5 s for the owner's
// partition-activator, so Request can overrun t: a reply that comes later
// than t is counted as a timed-out ask (not acknowledged). The call is not
// abandoned, so each asker has one request in flight at a time.
//
// Tells: the cluster API of this version has no tell (its Context has
// Request and RequestFuture only), so a tell is the activation's PID, looked
// up the way cluster.Request does it (the cluster's PidCache, else
// cluster.Get, the documented lookup, whose answer is cached), then
// RootContext.Send to it.
//
// Control traffic between A and B/C goes over the children's stdin/stdout
// pipes: A writes one command a line; a child answers with lines
// "@@ <json>" on its stdout (anything else it prints is passed on to
// stderr).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"

	"troubadour/bench/peers/protoactor-go/pb"
)

const (
	clusterImpl      = "protoactor-go"
	clusterName      = "troubadour"
	counterKind      = "Counter"
	refreshTTL       = 2 * time.Second // what automanaged.New() uses
	clusterTransport = "protoactor-go cluster on its remote layer: gRPC over TCP (loopback), protobuf"
	clusterSettings  = "automanaged provider (static list of the 3 nodes; HTTP /_health poll every 2 s, 2 s HTTP timeout: automanaged.New's values), " +
		"disthash identity lookup, cluster.Configure defaults (gossip 300 ms, heartbeat expiration 20 s); " +
		"asks cluster.Request+WithTimeout, tells PidCache/cluster.Get+Send; nothing changed"
	failureDetection = "automanaged: every node polls every node's HTTP /_health every 2 s (2 s HTTP timeout); a node that does not answer " +
		"is dropped from the topology at that poll and blocked for good; gossip heartbeat expiration 20 s (gossip every 300 ms); " +
		"leave = cluster.Shutdown(true); no downing/lease; all defaults"
	joinLimit = 120 * time.Second
)

var (
	nodeNames = []string{"A", "B", "C"}
	nodeHosts = []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
)

func identityName(i int) string { return "counter-" + strconv.Itoa(i) }

// ------------------------------------------------------------ the grain

// counterGrain is the Counter virtual actor: count, the activation's
// random number and the node's name.
type counterGrain struct {
	node       string
	count      int64
	activation uint64
}

func (g *counterGrain) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.activation = rand.Uint64()
	case *pb.Add:
		g.count += m.N
		if ctx.Sender() != nil { // asked (a tell has no sender)
			ctx.Respond(&pb.Added{Count: g.count, Node: g.node, Activation: g.activation})
		}
	case *pb.Get:
		ctx.Respond(&pb.Value{Count: g.count, Node: g.node, Activation: g.activation})
	}
}

// ------------------------------------------------------------ one node

type clusterNode struct {
	idx  int
	name string
	sys  *actor.ActorSystem
	c    *cluster.Cluster
}

// startClusterNode starts this process's cluster member (node idx of the
// three); ports are the automanaged HTTP ports of A, B and C.
func startClusterNode(idx int, ports []int) *clusterNode {
	// as newSystem (warnings and errors only; PEER_LOG_LEVEL=info or debug
	// for more), with the node's name
	level := slog.LevelWarn
	level.UnmarshalText([]byte(os.Getenv("PEER_LOG_LEVEL")))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(system *actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).
			With(slog.String("node", nodeNames[idx]))
	}))
	hosts := make([]string, len(ports))
	for i, p := range ports {
		hosts[i] = fmt.Sprintf("%s:%d", nodeHosts[i], p)
	}
	name := nodeNames[idx]
	provider := automanaged.NewWithConfig(refreshTTL, ports[idx], hosts...)
	kind := cluster.NewKind(counterKind, actor.PropsFromProducer(func() actor.Actor {
		return &counterGrain{node: name}
	}))
	cfg := cluster.Configure(clusterName, provider, disthash.New(),
		remote.Configure(nodeHosts[idx], 0), cluster.WithKinds(kind))
	c := cluster.New(sys, cfg)
	// diagnostics (stderr): every topology change this node sees
	sys.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*cluster.ClusterTopology); ok {
			names := func(ms []*cluster.Member) string {
				var out []string
				for _, m := range ms {
					out = append(out, memberName(m))
				}
				return "[" + strings.Join(out, " ") + "]"
			}
			fmt.Fprintf(os.Stderr, "%s node %s: topology members %s joined %s left %s\n",
				time.Now().UTC().Format("15:04:05.000"), name, names(t.Members), names(t.Joined), names(t.Left))
		}
	})
	c.StartMember()
	return &clusterNode{idx: idx, name: name, sys: sys, c: c}
}

// memberName: "A", "B" or "C" from a member's host.
func memberName(m *cluster.Member) string {
	for i, h := range nodeHosts {
		if m.Host == h {
			return nodeNames[i]
		}
	}
	return m.Address()
}

var errAskTimeout = errors.New("reply later than the ask's timeout")

// ask: cluster.Request with WithTimeout(timeout). Request can overrun its
// timeout (see the top of the file); a reply that comes later than
// timeout counts as a timed-out ask.
func (n *clusterNode) ask(id string, msg any, timeout time.Duration) (any, error) {
	t0 := time.Now()
	v, err := n.c.Request(id, counterKind, msg, cluster.WithTimeout(timeout))
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, errors.New("no reply")
	}
	if time.Since(t0) > timeout {
		return nil, errAskTimeout
	}
	return v, nil
}

// pidOf: the activation's PID as cluster.Request finds it (PidCache, else
// cluster.Get, cached).
func (n *clusterNode) pidOf(id string) *actor.PID {
	if pid, ok := n.c.PidCache.Get(id, counterKind); ok && pid != nil {
		return pid
	}
	pid := n.c.Get(id, counterKind)
	if pid != nil {
		n.c.PidCache.Set(id, counterKind, pid)
	}
	return pid
}

// failures counts failed operations of a phase and keeps the first reason.
type failures struct {
	mu    sync.Mutex
	n     int
	first string
}

func (f *failures) add(format string, args ...any) {
	f.mu.Lock()
	if f.n == 0 {
		f.first = fmt.Sprintf(format, args...)
	}
	f.n++
	f.mu.Unlock()
}

// forEachIdentity runs fn(i) for the given identities with at most
// `inFlight` running at once.
func forEachIdentity(ids []int, inFlight int, fn func(i int)) {
	ch := make(chan int, inFlight)
	var wg sync.WaitGroup
	for w := 0; w < inFlight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				fn(i)
			}
		}()
	}
	for _, i := range ids {
		ch <- i
	}
	close(ch)
	wg.Wait()
}

// activate: cluster-virtual phase 2 on this node: ask Add{1} of every
// identity i with i mod 3 == idx, at most 100 in flight.
func (n *clusterNode) activate(identities int, timeout time.Duration) (int, string) {
	var ids []int
	for i := n.idx; i < identities; i += 3 {
		ids = append(ids, i)
	}
	var f failures
	forEachIdentity(ids, 100, func(i int) {
		r, err := n.ask(identityName(i), &pb.Add{N: 1}, timeout)
		if err != nil {
			f.add("node %s: ask Add of %s: %v", n.name, identityName(i), err)
		} else if _, ok := r.(*pb.Added); !ok {
			f.add("node %s: ask Add of %s: reply %T", n.name, identityName(i), r)
		}
	})
	return f.n, f.first
}

// messaging: cluster-virtual phase 3 on this node; returns the asks'
// latencies in ns.
func (n *clusterNode) messaging(identities, clients, rounds int, timeout time.Duration) ([]int64, int, string) {
	var f failures
	lat := make([][]int64, clients)
	var wg sync.WaitGroup
	add := &pb.Add{N: 1} // immutable, reused for the tells
	for cl := 0; cl < clients; cl++ {
		wg.Add(1)
		go func(cl int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(n.idx)+1, uint64(cl)+1))
			samples := make([]int64, 0, rounds)
			for r := 0; r < rounds; r++ {
				id := identityName(rng.IntN(identities))
				pid := n.pidOf(id)
				if pid == nil {
					f.add("node %s: no PID for %s (tells not sent)", n.name, id)
				} else {
					for k := 0; k < 9; k++ {
						n.sys.Root.Send(pid, add)
					}
				}
				t0 := time.Now()
				rep, err := n.ask(id, &pb.Add{N: 1}, timeout)
				d := time.Since(t0)
				if err != nil {
					f.add("node %s: ask Add of %s: %v", n.name, id, err)
					continue
				}
				if _, ok := rep.(*pb.Added); !ok {
					f.add("node %s: ask Add of %s: reply %T", n.name, id, rep)
					continue
				}
				samples = append(samples, d.Nanoseconds())
			}
			lat[cl] = samples
		}(cl)
	}
	wg.Wait()
	var all []int64
	for _, s := range lat {
		all = append(all, s...)
	}
	return all, f.n, f.first
}

// ------------------------------------------------------------ child process (B, C)

type nodeMsg struct {
	Kind    string  `json:"kind"`
	Members int     `json:"members,omitempty"`
	Failed  int     `json:"failed,omitempty"`
	Err     string  `json:"err,omitempty"`
	Samples []int64 `json:"samples,omitempty"`
}

// runNode is process B or C: `__node <workload> <index> <portA> <portB> <portC>`.
func runNode(args []string) {
	if len(args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: __node <workload> <index> <portA> <portB> <portC>")
		os.Exit(2)
	}
	idx, _ := strconv.Atoi(args[1])
	ports := make([]int, 3)
	for i := range ports {
		ports[i], _ = strconv.Atoi(args[2+i])
	}
	var outMu sync.Mutex
	reply := func(m nodeMsg) {
		b, _ := json.Marshal(m)
		outMu.Lock()
		fmt.Fprintf(os.Stdout, "@@ %s\n", b)
		outMu.Unlock()
	}
	n := startClusterNode(idx, ports)
	reply(nodeMsg{Kind: "ready"})
	in := bufio.NewReader(os.Stdin)
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			os.Exit(0) // A closed the pipe (or died)
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		num := func(k int) int {
			if k < len(f) {
				v, _ := strconv.Atoi(f[k])
				return v
			}
			return 0
		}
		switch f[0] {
		case "members":
			reply(nodeMsg{Kind: "members", Members: n.c.MemberList.Length()})
		case "activate": // activate <identities> <timeout-ms>
			failed, first := n.activate(num(1), time.Duration(num(2))*time.Millisecond)
			reply(nodeMsg{Kind: "done", Failed: failed, Err: first})
		case "messaging": // messaging <identities> <clients> <rounds> <timeout-ms>
			s, failed, first := n.messaging(num(1), num(2), num(3), time.Duration(num(4))*time.Millisecond)
			reply(nodeMsg{Kind: "done", Failed: failed, Err: first, Samples: s})
		case "leave":
			// the documented graceful leave
			n.c.Shutdown(true)
			reply(nodeMsg{Kind: "left"})
			os.Exit(0)
		default:
			reply(nodeMsg{Kind: "error", Err: "unknown command " + f[0]})
		}
	}
}

// ------------------------------------------------------------ A's side of a child

type childNode struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan nodeMsg
	exited  chan struct{}
}

func startChildNode(workload string, idx int, ports []int) (*childNode, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "__node", workload, strconv.Itoa(idx),
		strconv.Itoa(ports[0]), strconv.Itoa(ports[1]), strconv.Itoa(ports[2]))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if f := os.Getenv("PEER_PIDFILE"); f != "" {
		if pf, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintf(pf, "%d\n", cmd.Process.Pid)
			pf.Close()
		}
	}
	ch := &childNode{name: nodeNames[idx], cmd: cmd, stdin: stdin,
		replies: make(chan nodeMsg, 16), exited: make(chan struct{})}
	go func() {
		rd := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := rd.ReadString('\n')
			if s, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "@@ "); ok {
				var m nodeMsg
				if json.Unmarshal([]byte(s), &m) == nil {
					ch.replies <- m
				} else {
					fmt.Fprintf(os.Stderr, "node %s: bad control line: %.200s\n", ch.name, s)
				}
			} else if strings.TrimSpace(line) != "" {
				fmt.Fprintf(os.Stderr, "[node %s stdout] %s", ch.name, line)
				if !strings.HasSuffix(line, "\n") {
					fmt.Fprintln(os.Stderr)
				}
			}
			if err != nil {
				break
			}
		}
		cmd.Wait()
		close(ch.exited)
	}()
	return ch, nil
}

func (ch *childNode) send(format string, args ...any) error {
	_, err := fmt.Fprintf(ch.stdin, format+"\n", args...)
	return err
}

// recv waits for the child's next control line.
func (ch *childNode) recv(timeout time.Duration) (nodeMsg, error) {
	select {
	case m := <-ch.replies:
		return m, nil
	case <-ch.exited:
		select { // a reply written just before exiting
		case m := <-ch.replies:
			return m, nil
		default:
		}
		return nodeMsg{}, fmt.Errorf("node %s exited", ch.name)
	case <-time.After(timeout):
		return nodeMsg{}, fmt.Errorf("node %s did not answer within %v", ch.name, timeout)
	}
}

// stop closes the child's stdin (it exits) and kills it if it is still
// there after 3 s.
func (ch *childNode) stop() {
	ch.stdin.Close()
	select {
	case <-ch.exited:
	case <-time.After(3 * time.Second):
		ch.cmd.Process.Kill()
		<-ch.exited
	}
}

// pickPorts: n distinct random ports in 20000-39999 that are free on
// 0.0.0.0 (the automanaged provider listens on 0.0.0.0:<port>).
func pickPorts(n int) ([]int, error) {
	var ports []int
	used := map[int]bool{}
	for tries := 0; len(ports) < n && tries < 1000; tries++ {
		p := 20000 + rand.IntN(20000)
		if used[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		used[p] = true
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, errors.New("no free ports in 20000-39999")
	}
	return ports, nil
}

// ------------------------------------------------------------ the cluster (A's view)

type testCluster struct {
	a        *clusterNode
	children []*childNode // B, C
	joinMs   float64
}

func (tc *testCluster) stop() {
	for _, ch := range tc.children {
		if ch != nil {
			ch.stop()
		}
	}
}

// formCluster starts B and C and A's own member and waits until all three
// see three members.
func formCluster(workload string) (*testCluster, error) {
	ports, err := pickPorts(3)
	if err != nil {
		return nil, err
	}
	tc := &testCluster{}
	fmt.Fprintf(os.Stderr, "%s: automanaged HTTP ports A %d, B %d, C %d\n", workload, ports[0], ports[1], ports[2])
	t0 := time.Now()
	for idx := 1; idx <= 2; idx++ {
		ch, err := startChildNode(workload, idx, ports)
		if err != nil {
			tc.stop()
			return nil, fmt.Errorf("starting node %s: %v", nodeNames[idx], err)
		}
		tc.children = append(tc.children, ch)
	}
	tc.a = startClusterNode(0, ports)
	for _, ch := range tc.children {
		m, err := ch.recv(joinLimit)
		if err != nil || m.Kind != "ready" {
			tc.stop()
			return nil, fmt.Errorf("node %s did not start: %v %v", ch.name, err, m)
		}
	}
	deadline := time.Now().Add(joinLimit)
	for {
		seen := []int{tc.a.c.MemberList.Length()}
		for _, ch := range tc.children {
			if err := ch.send("members"); err != nil {
				tc.stop()
				return nil, err
			}
			m, err := ch.recv(30 * time.Second)
			if err != nil {
				tc.stop()
				return nil, err
			}
			seen = append(seen, m.Members)
		}
		if seen[0] == 3 && seen[1] == 3 && seen[2] == 3 {
			break
		}
		if time.Now().After(deadline) {
			tc.stop()
			return nil, fmt.Errorf("join: members seen by A, B, C: %v after %v", seen, joinLimit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tc.joinMs = msSince(t0)
	return tc, nil
}

// phase sends cmd to B and C, runs local on A, and waits for the three
// "done"s; it returns the elapsed time and the children's answers.
func (tc *testCluster) phase(cmd string, local func(), limit time.Duration) (float64, []nodeMsg, error) {
	t0 := time.Now()
	for _, ch := range tc.children {
		if err := ch.send("%s", cmd); err != nil {
			return 0, nil, fmt.Errorf("node %s: %v", ch.name, err)
		}
	}
	local()
	var msgs []nodeMsg
	for _, ch := range tc.children {
		m, err := ch.recv(limit)
		if err != nil {
			return 0, nil, err
		}
		if m.Kind != "done" {
			return 0, nil, fmt.Errorf("node %s answered %q: %s", ch.name, m.Kind, m.Err)
		}
		msgs = append(msgs, m)
	}
	return msSince(t0), msgs, nil
}

// nearestRank: the ceil(p*n)-th smallest of sorted s.
func nearestRank(s []int64, p float64) int64 {
	k := int(p*float64(len(s)) + 0.999999999)
	if k < 1 {
		k = 1
	}
	if k > len(s) {
		k = len(s)
	}
	return s[k-1]
}

// clusterMain handles the cluster workloads and the child role; false when
// the command line is for another workload.
func clusterMain() bool {
	if len(os.Args) >= 2 && os.Args[1] == "__node" {
		runNode(os.Args[2:])
		return true
	}
	workload, quick, mode := "", false, "kill"
	for i := 1; i < len(os.Args); i++ {
		a := os.Args[i]
		switch {
		case a == "--quick" || a == "quick":
			quick = true
		case a == "--mode" && i+1 < len(os.Args):
			mode = os.Args[i+1]
			i++
		case strings.HasPrefix(a, "--mode="):
			mode = strings.TrimPrefix(a, "--mode=")
		case !strings.HasPrefix(a, "-") && workload == "":
			workload = a
		}
	}
	if workload != "cluster-virtual" && workload != "failover" {
		return false
	}
	var r result
	func() {
		defer func() {
			if p := recover(); p != nil {
				r = result{Ok: false, Error: fmt.Sprintf("panic: %v", p)}
			}
		}()
		if workload == "cluster-virtual" {
			r = clusterVirtual(quick)
		} else {
			r = failover(quick, mode)
		}
	}()
	emit(workload, clusterImpl, r)
	return true
}

// ------------------------------------------------------------ 12 cluster-virtual

func clusterVirtual(quick bool) result {
	identities, clients, rounds := 100_000, 100, 200
	if quick {
		identities, clients, rounds = 10_000, 10, 20
	}
	const askTimeout = 5 * time.Second
	const phaseLimit = 30 * time.Minute
	extra := func(actMs, joinMs *float64, p50, p99 *float64, samples *int) []kv {
		var actRate *float64
		if actMs != nil {
			v := float64(identities) / (*actMs / 1000)
			actRate = &v
		}
		return []kv{{"activation_ms", actMs}, {"activations_per_sec", actRate},
			{"ask_p50_us", p50}, {"ask_p99_us", p99}, {"ask_samples", samples},
			{"identities", identities}, {"nodes", 3}, {"join_ms", joinMs},
			{"clients_per_node", clients}, {"rounds_per_client", rounds},
			{"transport", clusterTransport}, {"settings", clusterSettings}}
	}
	failLine := func(ms *float64, err string, ex []kv) result {
		return result{Ok: false, ElapsedMs: ms, Error: err, Extra: ex}
	}

	tc, err := formCluster("cluster-virtual")
	if err != nil {
		return failLine(nil, err.Error(), extra(nil, nil, nil, nil, nil))
	}
	defer tc.stop()
	joinMs := tc.joinMs
	fmt.Fprintf(os.Stderr, "cluster-virtual: joined in %.0f ms\n", joinMs)

	// 2. activation
	var aFailed int
	var aFirst string
	actMs, msgs, err := tc.phase(fmt.Sprintf("activate %d %d", identities, askTimeout.Milliseconds()),
		func() { aFailed, aFirst = tc.a.activate(identities, askTimeout) }, phaseLimit)
	if err != nil {
		return failLine(nil, "activation: "+err.Error(), extra(nil, &joinMs, nil, nil, nil))
	}
	for _, m := range msgs {
		if m.Failed > 0 && aFailed == 0 {
			aFirst = m.Err
		}
		aFailed += m.Failed
	}
	if aFailed > 0 {
		return failLine(nil, fmt.Sprintf("activation: %d failed asks, first: %s", aFailed, aFirst),
			extra(&actMs, &joinMs, nil, nil, nil))
	}
	fmt.Fprintf(os.Stderr, "cluster-virtual: activation %.0f ms\n", actMs)

	// 3. messaging
	var samples []int64
	var mFailed int
	var mFirst string
	ms, msgs, err := tc.phase(fmt.Sprintf("messaging %d %d %d %d", identities, clients, rounds, askTimeout.Milliseconds()),
		func() { samples, mFailed, mFirst = tc.a.messaging(identities, clients, rounds, askTimeout) }, phaseLimit)
	if err != nil {
		return failLine(nil, "messaging: "+err.Error(), extra(&actMs, &joinMs, nil, nil, nil))
	}
	for _, m := range msgs {
		samples = append(samples, m.Samples...)
		if m.Failed > 0 && mFailed == 0 {
			mFirst = m.Err
		}
		mFailed += m.Failed
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	var p50, p99 *float64
	nSamples := len(samples)
	if nSamples > 0 {
		a := float64(nearestRank(samples, 0.50)) / 1000
		b := float64(nearestRank(samples, 0.99)) / 1000
		p50, p99 = &a, &b
	}
	ex := extra(&actMs, &joinMs, p50, p99, &nSamples)
	if mFailed > 0 {
		return failLine(&ms, fmt.Sprintf("messaging: %d failed operations, first: %s", mFailed, mFirst), ex)
	}
	fmt.Fprintf(os.Stderr, "cluster-virtual: messaging %.0f ms\n", ms)

	// 4. check
	var sum atomic.Int64
	var f failures
	all := make([]int, identities)
	for i := range all {
		all[i] = i
	}
	forEachIdentity(all, 100, func(i int) {
		r, err := tc.a.ask(identityName(i), &pb.Get{}, askTimeout)
		if err != nil {
			f.add("Get of %s: %v", identityName(i), err)
			return
		}
		v, ok := r.(*pb.Value)
		if !ok {
			f.add("Get of %s: reply %T", identityName(i), r)
			return
		}
		sum.Add(v.Count)
	})
	if f.n > 0 {
		return failLine(&ms, fmt.Sprintf("check: %d failed Gets, first: %s", f.n, f.first), ex)
	}
	want := int64(identities) + int64(3*clients*rounds*10)
	if got := sum.Load(); got != want {
		return failLine(&ms, fmt.Sprintf("verification failed: sum %d, expected %d", got, want), ex)
	}
	r := okRate(ms, float64(3*clients*rounds*10))
	r.Extra = ex
	return r
}

// ------------------------------------------------------------ 13 failover

// ackRun: consecutive acknowledged replies to one identity's asks that
// came from the same activation (every acknowledged reply is recorded,
// runs keep it small and free of pointers for the GC)
type ackRun struct {
	node       byte // 'A', 'B', 'C'
	activation uint64
	n          int64 // acknowledged replies in the run
	firstAt    int64 // ns since the run's base time
	lastAt     int64
	lastCount  int64 // count in the last reply
}

func recordAck(runs []ackRun, at int64, v *pb.Added) []ackRun {
	node := byte('?')
	if len(v.Node) == 1 {
		node = v.Node[0]
	}
	if k := len(runs) - 1; k >= 0 && runs[k].node == node && runs[k].activation == v.Activation {
		runs[k].n++
		runs[k].lastAt = at
		runs[k].lastCount = v.Count
		return runs
	}
	return append(runs, ackRun{node: node, activation: v.Activation, n: 1, firstAt: at, lastAt: at, lastCount: v.Count})
}

func failover(quick bool, mode string) result {
	identities := 3000
	if quick {
		identities = 300
	}
	const askTimeout = time.Second
	const maxAfterT0 = 180 * time.Second
	nullF := (*float64)(nil)
	baseExtra := func(joinMs *float64) []kv {
		return []kv{{"mode", mode}, {"identities", identities}, {"nodes", 3}, {"join_ms", joinMs},
			{"transport", clusterTransport}, {"failure_detection", failureDetection}}
	}
	failLine := func(err string, ex []kv) result {
		return result{Ok: false, Error: err, Extra: ex}
	}
	if mode != "kill" && mode != "leave" {
		return failLine("bad --mode "+mode, baseExtra(nil))
	}

	tc, err := formCluster("failover")
	if err != nil {
		return failLine(err.Error(), baseExtra(nil))
	}
	defer tc.stop()
	joinMs := tc.joinMs
	fmt.Fprintf(os.Stderr, "failover: joined in %.0f ms\n", joinMs)
	a := tc.a
	c := tc.children[1]
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }

	// 1. one ask of every identity: where is it?
	acks := make([][]ackRun, identities)
	onC := make([]bool, identities)
	var f failures
	all := make([]int, identities)
	for i := range all {
		all[i] = i
	}
	forEachIdentity(all, 100, func(i int) {
		r, err := a.ask(identityName(i), &pb.Add{N: 1}, askTimeout)
		if err != nil {
			f.add("initial ask Add of %s: %v", identityName(i), err)
			return
		}
		v, ok := r.(*pb.Added)
		if !ok {
			f.add("initial ask Add of %s: reply %T", identityName(i), r)
			return
		}
		acks[i] = recordAck(acks[i], now(), v)
		onC[i] = v.Node == "C"
	})
	if f.n > 0 {
		return failLine(fmt.Sprintf("%d initial asks failed, first: %s", f.n, f.first), baseExtra(&joinMs))
	}
	affected := 0
	for _, b := range onC {
		if b {
			affected++
		}
	}
	if affected == 0 {
		return failLine("no identity on node C", baseExtra(&joinMs))
	}
	fmt.Fprintf(os.Stderr, "failover: %d of %d identities on C\n", affected, identities)

	// 2. probing
	var t0 atomic.Int64 // ns since base + 1; 0 = not yet
	first := make([]atomic.Int64, identities)
	var remaining atomic.Int64
	remaining.Store(int64(affected))
	var failedAsks atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < identities; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			id := identityName(i)
			for !stop.Load() {
				r, err := a.ask(id, &pb.Add{N: 1}, askTimeout)
				var v *pb.Added
				if err == nil {
					v, _ = r.(*pb.Added)
				}
				if v == nil {
					failedAsks.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				at := now()
				acks[i] = recordAck(acks[i], at, v)
				if tz := t0.Load(); tz != 0 && onC[i] && v.Node != "C" && at >= tz-1 {
					if first[i].CompareAndSwap(0, at-(tz-1)+1) {
						remaining.Add(-1)
					}
				}
			}
		}(i)
	}
	fmt.Fprintf(os.Stderr, "failover: probing from %s\n", time.Now().UTC().Format("15:04:05.000"))
	time.Sleep(2 * time.Second)

	// 3. t0
	var t0ns int64
	if mode == "kill" {
		t0ns = now()
		t0.Store(t0ns + 1)
		c.cmd.Process.Kill() // SIGKILL
	} else {
		t0ns = now()
		t0.Store(t0ns + 1)
		if err := c.send("leave"); err != nil {
			fmt.Fprintf(os.Stderr, "failover: leave command to C: %v\n", err)
		}
	}
	fmt.Fprintf(os.Stderr, "failover: t0 (%s) at %s\n", mode, time.Now().UTC().Format("15:04:05.000"))

	// 4. until every affected identity answered from A or B, plus 2 s; at
	// most 180 s after t0
	limitAt := t0ns + int64(maxAfterT0)
	lastLog := now()
	for remaining.Load() > 0 && now() < limitAt {
		time.Sleep(10 * time.Millisecond)
		if now()-lastLog >= int64(5*time.Second) {
			lastLog = now()
			fmt.Fprintf(os.Stderr, "failover: t0+%.1f s: %d affected identities not yet answered from A/B; %d failed asks so far; A sees %d members\n",
				float64(now()-t0ns)/1e9, remaining.Load(), failedAsks.Load(), a.c.MemberList.Length())
		}
	}
	if remaining.Load() == 0 {
		time.Sleep(2 * time.Second)
	}
	stop.Store(true)
	wg.Wait()
	probeFailed := failedAsks.Load()
	var aView []string // the members A's topology has at the end of probing
	for _, m := range a.c.MemberList.Members().Members() {
		aView = append(aView, memberName(m))
	}
	sort.Strings(aView)
	topologyA := "[" + strings.Join(aView, " ") + "]"

	var fo []int64
	dark := 0
	for i := 0; i < identities; i++ {
		if !onC[i] {
			continue
		}
		if v := first[i].Load(); v != 0 {
			fo = append(fo, v-1)
		} else {
			dark++
		}
	}
	sort.Slice(fo, func(i, j int) bool { return fo[i] < fo[j] })
	ex := []kv{{"mode", mode}}
	var elapsed *float64
	p50, p99, pmax := nullF, nullF, nullF
	if dark == 0 && len(fo) > 0 {
		toMs := func(ns int64) *float64 { v := float64(ns) / 1e6; return &v }
		elapsed = toMs(fo[len(fo)-1])
		p50, p99, pmax = toMs(nearestRank(fo, 0.50)), toMs(nearestRank(fo, 0.99)), toMs(fo[len(fo)-1])
	}
	ex = append(ex, kv{"failover_p50_ms", p50}, kv{"failover_p99_ms", p99}, kv{"failover_max_ms", pmax},
		kv{"affected", affected}, kv{"dark", dark})

	// 5. check: Get of every identity
	finals := make([]*pb.Value, identities)
	var gf failures
	forEachIdentity(all, 100, func(i int) {
		var lastErr error
		for try := 0; try < 5; try++ {
			r, err := a.ask(identityName(i), &pb.Get{}, askTimeout)
			if err == nil {
				if v, ok := r.(*pb.Value); ok {
					finals[i] = v
					return
				}
				err = fmt.Errorf("reply %T", r)
			}
			lastErr = err
			time.Sleep(10 * time.Millisecond)
		}
		gf.add("final Get of %s (5 tries): %v", identityName(i), lastErr)
	})
	var lost *int
	acknowledged := 0
	for i := 0; i < identities; i++ {
		for _, k := range acks[i] {
			acknowledged += int(k.n)
		}
	}
	if gf.n == 0 {
		n := 0
		for i := 0; i < identities; i++ {
			for _, k := range acks[i] {
				if (k.node == 'A' || k.node == 'B') && k.activation != finals[i].Activation {
					n += int(k.n)
				}
			}
		}
		lost = &n
	}
	ex = append(ex, kv{"lost_acknowledged", lost}, kv{"failed_asks", probeFailed},
		kv{"acknowledged_adds", acknowledged}, kv{"topology_of_a_at_end", topologyA},
		kv{"identities", identities}, kv{"nodes", 3}, kv{"join_ms", joinMs},
		kv{"transport", clusterTransport}, kv{"failure_detection", failureDetection})

	var reasons []string
	if dark > 0 {
		reasons = append(reasons, fmt.Sprintf("%d of %d affected identities still dark %v after t0", dark, affected, maxAfterT0))
	}
	if gf.n > 0 {
		reasons = append(reasons, fmt.Sprintf("%d final Gets failed, first: %s", gf.n, gf.first))
	}
	if lost != nil && *lost > 0 {
		reasons = append(reasons, fmt.Sprintf("lost_acknowledged %d (acknowledged Adds on A/B whose activation is not the one answering the final Get)", *lost))
	}
	r := result{Ok: len(reasons) == 0, ElapsedMs: elapsed, Extra: ex}
	if !r.Ok {
		r.Error = "verification failed: " + strings.Join(reasons, "; ") +
			"; node A's topology at the end of probing: " + topologyA
	}
	return r
}
