package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tochemey/goakt/v4/actor"
	"github.com/tochemey/goakt/v4/discovery/static"
	goaktlog "github.com/tochemey/goakt/v4/log"
	"github.com/tochemey/goakt/v4/remote"

	"troubadour/bench/peers/goakt/pb"
)

// ---------------------------------------------------------------------------
// The Counter grain

// nodeName is this process's node: "A", "B" or "C".
var nodeName = "A"

// activations / deactivations of Counter grains on this node (informative).
var activations, deactivations atomic.Int64

// Counter is the virtual actor of both workloads. GoAkt creates it with
// its factory or, for activations it starts itself (remote activation,
// relocation), by reflection from the registered kind: the zero value is
// ready, OnActivate sets the state.
type Counter struct {
	count      int64
	activation uint64
}

var _ actor.Grain = (*Counter)(nil)

func newCounter(context.Context) (actor.Grain, error) { return new(Counter), nil }

func (c *Counter) OnActivate(context.Context, *actor.GrainProps) error {
	c.count = 0
	c.activation = rand.Uint64()
	activations.Add(1)
	return nil
}

func (c *Counter) OnReceive(ctx *actor.GrainContext) {
	switch m := ctx.Message().(type) {
	case *pb.Add:
		c.count += m.GetN()
		if m.GetReply() {
			ctx.Response(&pb.Added{Count: c.count, Node: nodeName, Activation: c.activation})
		} else {
			ctx.NoErr()
		}
	case *pb.Get:
		ctx.Response(&pb.Value{Count: c.count, Node: nodeName, Activation: c.activation})
	default:
		ctx.Unhandled()
	}
}

func (c *Counter) OnDeactivate(context.Context, *actor.GrainProps) error {
	deactivations.Add(1)
	return nil
}

func counterName(i int) string { return "counter-" + strconv.Itoa(i) }

// ---------------------------------------------------------------------------
// Nodes, ports, actor systems

type nodeAddr struct {
	Name   string
	IP     string
	Disc   int // memberlist (discovery) port, TCP and UDP
	Peers  int // Olric (cluster store) port
	Remote int // GoAkt remoting port
}

var nodeIPs = []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
var nodeNames = []string{"A", "B", "C"}

func encodeAddrs(as []nodeAddr) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("%s:%s:%d:%d:%d", a.Name, a.IP, a.Disc, a.Peers, a.Remote)
	}
	return strings.Join(parts, ",")
}

func decodeAddrs(s string) ([]nodeAddr, error) {
	var as []nodeAddr
	for _, p := range strings.Split(s, ",") {
		f := strings.Split(p, ":")
		if len(f) != 5 {
			return nil, fmt.Errorf("bad node address %q", p)
		}
		a := nodeAddr{Name: f[0], IP: f[1]}
		var err error
		for i, dst := range []*int{&a.Disc, &a.Peers, &a.Remote} {
			if *dst, err = strconv.Atoi(f[2+i]); err != nil {
				return nil, fmt.Errorf("bad port in %q", p)
			}
		}
		as = append(as, a)
	}
	return as, nil
}

// freePort returns a random port in 20000-39999 that is free on ip right
// now (TCP, and UDP too when udp is set), not one of taken.
func freePort(ip string, udp bool, taken map[int]bool) (int, error) {
	for try := 0; try < 200; try++ {
		p := 20000 + rand.IntN(20000)
		if taken[p] {
			continue
		}
		addr := net.JoinHostPort(ip, strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		if udp {
			u, err := net.ListenPacket("udp", addr)
			if err != nil {
				l.Close()
				continue
			}
			u.Close()
		}
		l.Close()
		taken[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free port found on %s in 20000-39999", ip)
}

func pickAddrs() ([]nodeAddr, error) {
	as := make([]nodeAddr, 3)
	for i := range as {
		taken := map[int]bool{}
		a := nodeAddr{Name: nodeNames[i], IP: nodeIPs[i]}
		var err error
		if a.Disc, err = freePort(a.IP, true, taken); err != nil {
			return nil, err
		}
		if a.Peers, err = freePort(a.IP, false, taken); err != nil {
			return nil, err
		}
		if a.Remote, err = freePort(a.IP, false, taken); err != nil {
			return nil, err
		}
		as[i] = a
	}
	return as, nil
}

// limitedWriter passes at most 20 log lines a second to stderr, prefixed
// with the node's name (a failover makes GoAkt log an error per failed
// request).
type limitedWriter struct {
	mu      sync.Mutex
	window  time.Time
	n       int
	dropped int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if now.Sub(w.window) >= time.Second {
		if w.dropped > 0 {
			fmt.Fprintf(os.Stderr, "[node %s] (%d GoAkt log lines dropped)\n", nodeName, w.dropped)
		}
		w.window, w.n, w.dropped = now, 0, 0
	}
	w.n++
	if w.n > 20 {
		w.dropped++
		return len(p), nil
	}
	fmt.Fprintf(os.Stderr, "[node %s] %s", nodeName, p)
	if len(p) == 0 || p[len(p)-1] != '\n' {
		os.Stderr.Write([]byte{'\n'})
	}
	return len(p), nil
}

// startSystem starts this node's actor system in cluster mode: remoting on
// self.IP:self.Remote, static discovery of the other nodes' memberlist
// ports, the Counter grain kind. Everything else is GoAkt's default.
func startSystem(self nodeAddr, all []nodeAddr) (actor.ActorSystem, error) {
	var hosts []string
	for _, a := range all {
		if a.Name != self.Name {
			hosts = append(hosts, net.JoinHostPort(a.IP, strconv.Itoa(a.Disc)))
		}
	}
	disco := static.NewDiscovery(&static.Config{Hosts: hosts})
	cc := actor.NewClusterConfig().
		WithDiscovery(disco).
		WithDiscoveryPort(self.Disc).
		WithPeersPort(self.Peers).
		WithGrains(new(Counter))
	sys, err := actor.NewActorSystem("troubadour",
		actor.WithLogger(goaktlog.NewSlog(goaktlog.ErrorLevel, &limitedWriter{})),
		actor.WithRemote(remote.NewConfig(self.IP, self.Remote)),
		actor.WithCluster(cc))
	if err != nil {
		return nil, err
	}
	// (GoAkt keeps the context given to Start as the base context of its
	// remoting server's handlers: it must not be cancelled afterwards.)
	if err := sys.Start(context.Background()); err != nil {
		return nil, err
	}
	return sys, nil
}

// waitPeers waits until this node sees `want` other members.
func waitPeers(sys actor.ActorSystem, want int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last int
	var lastErr error
	for time.Now().Before(deadline) {
		peers, err := sys.Peers(context.Background(), time.Second)
		if err == nil && len(peers) >= want {
			return nil
		}
		last, lastErr = len(peers), err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("node %s sees %d peers after %v, expected %d (last error: %v)", nodeName, last, limit, want, lastErr)
}

// ---------------------------------------------------------------------------
// Grain identities

// identities holds, per node, the GrainIdentity handle of each counter
// (TellGrain and AskGrain take one). GoAkt hands them out through
// GrainIdentity, which also activates the grain where it is not active: a
// node calls it for the counters it activates itself (default placement,
// LocalActivation: on the calling node), and takes the handles of counters
// owned elsewhere from ActorSystem.Grains (see collect). The failover
// probers call GrainIdentity again after a failed ask (resolve).
type identities struct {
	sys  actor.ActorSystem
	opts []actor.GrainOption
	ids  []atomic.Pointer[actor.GrainIdentity]
}

func newIdentities(sys actor.ActorSystem, n int, opts ...actor.GrainOption) *identities {
	return &identities{sys: sys, opts: opts, ids: make([]atomic.Pointer[actor.GrainIdentity], n)}
}

func (x *identities) get(ctx context.Context, i int) (*actor.GrainIdentity, error) {
	if id := x.ids[i].Load(); id != nil {
		return id, nil
	}
	return x.resolve(ctx, i)
}

// cached returns the handle this node already holds, or an error.
func (x *identities) cached(i int) (*actor.GrainIdentity, error) {
	if id := x.ids[i].Load(); id != nil {
		return id, nil
	}
	return nil, fmt.Errorf("node %s holds no GrainIdentity for %s", nodeName, counterName(i))
}

// collect fills in the handles of every active counter in the cluster from
// ActorSystem.Grains (it lists the grain registry; the handles it returns
// are the same {kind, name} values GrainIdentity returns, without the
// activation step). This works around GoAkt v4.2.1's cross-node
// GrainIdentity (upstream issue #1227): for a grain whose owner is another
// node, GrainIdentity sends a remote activation with a malformed identity
// ("kind/kind/name"), which the owner rejects; GrainIdentity then takes the
// owner for unreachable, deletes its registry entry and activates a second,
// empty copy of the grain on the calling node. It returns how many of the
// n counters have a handle now.
func (x *identities) collect() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, id := range x.sys.Grains(ctx, 10*time.Minute) {
		num, ok := strings.CutPrefix(id.Name(), "counter-")
		if !ok {
			continue
		}
		i, err := strconv.Atoi(num)
		if err != nil || i < 0 || i >= len(x.ids) || counterName(i) != id.Name() {
			continue
		}
		if x.ids[i].Load() == nil {
			x.ids[i].Store(id)
		}
	}
	have := 0
	for i := range x.ids {
		if x.ids[i].Load() != nil {
			have++
		}
	}
	if have != len(x.ids) {
		return have, fmt.Errorf("node %s: ActorSystem.Grains listed handles for %d of %d counters", nodeName, have, len(x.ids))
	}
	return have, nil
}

// resolve calls GrainIdentity again (re-addressing the grain: GoAkt then
// checks its owner and activates it elsewhere when the owner is gone).
func (x *identities) resolve(ctx context.Context, i int) (*actor.GrainIdentity, error) {
	id, err := x.sys.GrainIdentity(ctx, counterName(i), newCounter, x.opts...)
	if err != nil {
		return nil, err
	}
	x.ids[i].Store(id)
	return id, nil
}

// ---------------------------------------------------------------------------
// The phases a node runs (the same code on A, B and C)

type phaseResult struct {
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Samples    []int64 `json:"samples,omitempty"` // ask latencies, ns
	Replies    int     `json:"replies"`
	// Counter activations / deactivations on the node so far
	Activations   int64 `json:"activations"`
	Deactivations int64 `json:"deactivations"`
}

type errCount struct {
	n     atomic.Int64
	mu    sync.Mutex
	first string
}

func (e *errCount) add(what string, err error) {
	if e.n.Add(1) == 1 {
		e.mu.Lock()
		e.first = what + ": " + err.Error()
		e.mu.Unlock()
	}
}

// parallel runs fn(i) for i in [0, n) on `width` goroutines.
func parallel(n, width int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(width, n); w++ {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// activatePhase (cluster-virtual step 2): node k asks Add{1} of every
// identity i with i mod 3 = k, at most 100 asks in flight.
func activatePhase(ids *identities, k, n int) phaseResult {
	var errs errCount
	var replies atomic.Int64
	mine := (n - k + 2) / 3
	parallel(mine, 100, func(j int) {
		i := k + 3*j
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		id, err := ids.get(ctx, i)
		if err != nil {
			errs.add("GrainIdentity "+counterName(i), err)
			return
		}
		r, err := ids.sys.AskGrain(ctx, id, &pb.Add{N: 1, Reply: true}, 5*time.Second)
		if err != nil {
			errs.add("ask Add "+counterName(i), err)
			return
		}
		if _, ok := r.(*pb.Added); !ok {
			errs.add("ask Add "+counterName(i), fmt.Errorf("unexpected reply %T", r))
			return
		}
		replies.Add(1)
	})
	return phaseResult{Errors: int(errs.n.Load()), FirstError: errs.first, Replies: int(replies.Load())}
}

// placePhase (failover set-up, untimed): node k obtains the GrainIdentity
// of every identity i with i mod 3 = k, which activates the grain on node k
// (GoAkt's default placement, LocalActivation: a grain starts on the node
// that first addresses it); no message is sent.
func placePhase(ids *identities, k, n int) phaseResult {
	var errs errCount
	var placed atomic.Int64
	mine := (n - k + 2) / 3
	parallel(mine, 100, func(j int) {
		i := k + 3*j
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := ids.get(ctx, i); err != nil {
			errs.add("GrainIdentity "+counterName(i), err)
			return
		}
		placed.Add(1)
	})
	return phaseResult{Errors: int(errs.n.Load()), FirstError: errs.first, Replies: int(placed.Load())}
}

// handlesPhase: collect (see there), untimed.
func handlesPhase(ids *identities) phaseResult {
	have, err := ids.collect()
	if err != nil {
		return phaseResult{Errors: 1, FirstError: err.Error(), Replies: have}
	}
	return phaseResult{Replies: have}
}

// messagePhase (cluster-virtual step 3): `clients` concurrent clients on
// this node, each `rounds` rounds of 9 tells and 1 ask of Add{1} to an
// identity picked at random (seeded per node and client).
func messagePhase(ids *identities, k, n, clients, rounds int) phaseResult {
	var errs errCount
	var replies atomic.Int64
	samples := make([][]int64, clients)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(k+1)*0x9E3779B97F4A7C15, uint64(c+1)))
			lat := make([]int64, 0, rounds)
			for r := 0; r < rounds; r++ {
				i := rng.IntN(n)
				id, err := ids.cached(i)
				if err != nil {
					errs.add("handle", err)
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				for t := 0; t < 9; t++ {
					if err := ids.sys.TellGrain(context.Background(), id, &pb.Add{N: 1}); err != nil {
						errs.add("tell Add "+counterName(i), err)
					}
				}
				t0 := time.Now()
				reply, err := ids.sys.AskGrain(ctx, id, &pb.Add{N: 1, Reply: true}, 5*time.Second)
				d := time.Since(t0)
				cancel()
				if err != nil {
					errs.add("ask Add "+counterName(i), err)
					continue
				}
				if _, ok := reply.(*pb.Added); !ok {
					errs.add("ask Add "+counterName(i), fmt.Errorf("unexpected reply %T", reply))
					continue
				}
				replies.Add(1)
				lat = append(lat, d.Nanoseconds())
			}
			samples[c] = lat
		})
	}
	wg.Wait()
	var all []int64
	for _, s := range samples {
		all = append(all, s...)
	}
	return phaseResult{Errors: int(errs.n.Load()), FirstError: errs.first, Samples: all, Replies: int(replies.Load())}
}

// ---------------------------------------------------------------------------
// Child processes (nodes B and C) and their control channel

const ctl = "@@ "

type child struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // control lines (without the prefix); closed at EOF
	done  chan struct{}
}

var (
	childrenMu sync.Mutex
	children   []*child
)

func startChild(name, workload string, quick bool, addrs []nodeAddr) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	q := "0"
	if quick {
		q = "1"
	}
	cmd := exec.Command(self, "__node", name, workload, q, encodeAddrs(addrs))
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
	c := &child{name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 16), done: make(chan struct{})}
	childrenMu.Lock()
	children = append(children, c)
	childrenMu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 256<<20)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), ctl); ok {
				c.lines <- l
			} else {
				fmt.Fprintf(os.Stderr, "[node %s stdout] %s\n", name, sc.Text())
			}
		}
		close(c.lines)
	}()
	go func() {
		cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) send(cmd string) error {
	_, err := io.WriteString(c.stdin, cmd+"\n")
	return err
}

// expect waits for the next control line starting with word and returns
// the rest of it.
func (c *child) expect(word string, limit time.Duration) (string, error) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				return "", fmt.Errorf("node %s ended (%v) while A waited for %s", c.name, c.cmd.ProcessState, word)
			}
			w, rest, _ := strings.Cut(l, " ")
			if w == word {
				return rest, nil
			}
			if w == "ERROR" {
				return "", fmt.Errorf("node %s: %s", c.name, rest)
			}
			fmt.Fprintf(os.Stderr, "[node %s] unexpected control line %q\n", c.name, l)
		case <-timer.C:
			return "", fmt.Errorf("node %s: no %s within %v", c.name, word, limit)
		}
	}
}

func stopChildren() {
	childrenMu.Lock()
	defer childrenMu.Unlock()
	for _, c := range children {
		c.stdin.Close()
		c.cmd.Process.Kill()
	}
}

// startCluster starts nodes B and C and node A's actor system at the same
// time (a fixed set of three nodes, each listing the other two in its static
// discovery provider) and waits until every node sees the other two. It
// returns A's system, B and C, and the join time (from starting the three
// to all three seeing three members).
func startCluster(workload string, quick bool) (actor.ActorSystem, []*child, float64, error) {
	addrs, err := pickAddrs()
	if err != nil {
		return nil, nil, 0, err
	}
	fmt.Fprintf(os.Stderr, "node A: starting the cluster (%s)\n", encodeAddrs(addrs))
	t0 := time.Now()
	var kids []*child
	for _, name := range []string{"B", "C"} {
		c, err := startChild(name, workload, quick, addrs)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("starting node %s: %w", name, err)
		}
		kids = append(kids, c)
	}
	sys, err := startSystem(addrs[0], addrs)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("node A: actor system start: %w", err)
	}
	errc := make(chan error, 3)
	go func() { errc <- waitPeers(sys, 2, 90*time.Second) }()
	for _, c := range kids {
		go func() {
			_, err := c.expect("JOINED", 120*time.Second)
			errc <- err
		}()
	}
	for range 3 {
		if err := <-errc; err != nil {
			return nil, nil, 0, fmt.Errorf("join: %w", err)
		}
	}
	return sys, kids, msSince(t0), nil
}

// childMain is node B or C: `__node <B|C> <workload> <0|1> <addrs>`.
func childMain(args []string) int {
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	say := func(format string, a ...any) {
		outMu.Lock()
		fmt.Fprintf(out, ctl+format+"\n", a...)
		out.Flush()
		outMu.Unlock()
	}
	if len(args) != 4 {
		say("ERROR usage: __node <B|C> <workload> <0|1> <addrs>")
		return 2
	}
	nodeName = args[0]
	workload, quick := args[1], args[2] == "1"
	addrs, err := decodeAddrs(args[3])
	if err != nil {
		say("ERROR %v", err)
		return 2
	}
	k := -1
	for i, a := range addrs {
		if a.Name == nodeName {
			k = i
		}
	}
	if k < 0 {
		say("ERROR unknown node %s", nodeName)
		return 2
	}
	sys, err := startSystem(addrs[k], addrs)
	if err != nil {
		say("ERROR actor system start: %v", err)
		return 1
	}
	if err := waitPeers(sys, 2, 90*time.Second); err != nil {
		say("ERROR %v", err)
		return 1
	}
	say("JOINED")
	p := sizes(workload, quick)
	ids := newIdentities(sys, max(p.identities, 1))
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var r phaseResult
		switch cmd := strings.TrimSpace(sc.Text()); cmd {
		case "ACTIVATE":
			r = activatePhase(ids, k, p.identities)
		case "MESSAGE":
			r = messagePhase(ids, k, p.identities, p.clients, p.rounds)
		case "PLACE":
			r = placePhase(ids, k, p.identities)
		case "HANDLES":
			r = handlesPhase(ids)
		case "LEAVE":
			// graceful leave: GoAkt's coordinated shutdown (Stop), which
			// hands this node's grains to the others (relocation) and
			// leaves the cluster
			t := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			err := sys.Stop(ctx)
			cancel()
			es := ""
			if err != nil {
				es = err.Error()
			}
			b, _ := json.Marshal(map[string]any{"ms": msSince(t), "error": es})
			say("LEFT %s", b)
			return 0
		default:
			say("ERROR unknown command %q", cmd)
			continue
		}
		r.Activations, r.Deactivations = activations.Load(), deactivations.Load()
		b, _ := json.Marshal(r)
		say("DONE %s", b)
	}
	// stdin closed: node A is done (or gone)
	return 0
}
