// protoactor-go peer of the troubadour benchmark suite.
//
// Usage: protoactor-peer <workload> [--quick] [--pairs N] [--size BYTES] [--mode kill|leave]
// Prints exactly one JSON line on stdout; diagnostics go to stderr. The
// cluster workloads (cluster-virtual, failover) are in cluster.go.
//
// Configuration: the framework defaults (unbounded mailbox, default
// goroutine dispatcher with throughput 300, GOMAXPROCS = number of cores).
package main

import (
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/router"
)

const (
	factorN   uint64 = 28350160440309881
	factorLo  uint64 = 86028157
	factorHi  uint64 = 329545133
	waitLimit        = 30 * time.Minute
)

func newSystem() *actor.ActorSystem {
	// Same as the default logger factory, but only warnings and errors, so
	// the framework's start-up chatter stays out of the way (it is stderr
	// either way).
	return actor.NewActorSystem(actor.WithLoggerFactory(func(system *actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}))
}

func main() {
	if clusterMain() { // cluster-virtual, failover, and their nodes B and C
		return
	}
	runAndEmit("protoactor-go", workloads{
		counting: counting,
		pingpong: pingpong,
		skynet:   skynet,
		fanin:    fanin,
		rings:    rings,
		idle:     idle,
		pi:       pi,

		remotePingpong: remotePingpong,
		remotePi:       remotePi,
		serve:          serve,
	})
}

// ------------------------------------------------------------ 1 counting

type add struct{ n int64 }
type getAndReset struct{}

type counter struct{ total int64 }

func (c *counter) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *add:
		c.total += m.n
	case *getAndReset:
		ctx.Respond(c.total)
		c.total = 0
	}
}

func counting(n int) result {
	sys := newSystem()
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &counter{} }))
	msg := &add{n: 100} // messages are immutable; one value is sent n times
	t0 := time.Now()
	for i := 0; i < n; i++ {
		sys.Root.Send(pid, msg)
	}
	res, err := sys.Root.RequestFuture(pid, &getAndReset{}, waitLimit).Result()
	ms := msSince(t0)
	if err != nil {
		return fail(ms, "GetAndReset failed: %v", err)
	}
	want := int64(n) * 100
	if got, _ := res.(int64); got != want {
		return fail(ms, "reply %v, expected %d", res, want)
	}
	return okRate(ms, float64(n))
}

// ------------------------------------------------------------ 2 pingpong

type ping struct{ replyTo *actor.PID }
type pong struct{}
type startPing struct{}

type echoActor struct{}

var thePong = &pong{}

func (echoActor) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*ping); ok {
		ctx.Send(m.replyTo, thePong)
	}
}

type pingClient struct {
	echo    *actor.PID
	msg     *ping
	perPair int
	batch   int
	inBatch int
	sent    int
	echoed  int
	done    chan<- int
}

func (c *pingClient) sendBatch(ctx actor.Context) {
	b := c.batch
	if left := c.perPair - c.sent; left < b {
		b = left
	}
	c.inBatch = b
	for i := 0; i < b; i++ {
		ctx.Send(c.echo, c.msg)
	}
	c.sent += b
}

func (c *pingClient) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *startPing:
		c.msg = &ping{replyTo: ctx.Self()}
		c.sendBatch(ctx)
	case *pong:
		c.echoed++
		c.inBatch--
		if c.inBatch == 0 {
			if c.sent < c.perPair {
				c.sendBatch(ctx)
			} else {
				c.done <- c.echoed
			}
		}
	}
}

func pingpong(pairs, perPair, batch int) result {
	sys := newSystem()
	done := make(chan int, pairs)
	echoProps := actor.PropsFromProducer(func() actor.Actor { return echoActor{} })
	clients := make([]*actor.PID, pairs)
	for i := range clients {
		echo := sys.Root.Spawn(echoProps)
		clients[i] = sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &pingClient{echo: echo, perPair: perPair, batch: batch, done: done}
		}))
	}
	t0 := time.Now()
	for _, c := range clients {
		sys.Root.Send(c, &startPing{})
	}
	return pingpongResult(t0, done, pairs, perPair)
}

// ------------------------------------------------------------ 3 skynet

type skynetSum struct{ v int64 }

type skynetNode struct {
	replyTo   *actor.PID
	num, size int64
	div       int64
	sum       int64
	got       int64
}

func skynetProps(replyTo *actor.PID, num, size, div int64) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &skynetNode{replyTo: replyTo, num: num, size: size, div: div}
	})
}

func (s *skynetNode) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if s.size == 1 {
			ctx.Send(s.replyTo, &skynetSum{v: s.num})
			ctx.Stop(ctx.Self())
			return
		}
		sub := s.size / s.div
		for i := int64(0); i < s.div; i++ {
			ctx.Spawn(skynetProps(ctx.Self(), s.num+i*sub, sub, s.div))
		}
	case *skynetSum:
		s.sum += m.v
		s.got++
		if s.got == s.div {
			ctx.Send(s.replyTo, &skynetSum{v: s.sum})
			ctx.Stop(ctx.Self())
		}
	}
}

func skynet(leaves, div int) result {
	sys := newSystem()
	fut := actor.NewFuture(sys, waitLimit)
	t0 := time.Now()
	sys.Root.Spawn(skynetProps(fut.PID(), 0, int64(leaves), int64(div)))
	res, err := fut.Result()
	ms := msSince(t0)
	if err != nil {
		return fail(ms, "no sum: %v", err)
	}
	want := int64(leaves) * (int64(leaves) - 1) / 2
	got := res.(*skynetSum).v
	if got != want {
		return fail(ms, "sum %d, expected %d", got, want)
	}
	return okTime(ms)
}

// ------------------------------------------------------------ 4 fan-in
// 20 goroutines send from outside the actor system (RootContext.Send).

type fanMsg struct{}

type fanReceiver struct {
	target, count int
	done          chan<- int
}

func (f *fanReceiver) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*fanMsg); ok {
		f.count++
		if f.count == f.target {
			f.done <- f.count
		}
	}
}

func fanin(senders, n int) result {
	sys := newSystem()
	total := senders * n
	done := make(chan int, 1)
	recv := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &fanReceiver{target: total, done: done}
	}))
	start := make(chan struct{})
	var ready sync.WaitGroup
	for s := 0; s < senders; s++ {
		ready.Add(1)
		go func() {
			msg := &fanMsg{}
			ready.Done()
			<-start
			for i := 0; i < n; i++ {
				sys.Root.Send(recv, msg)
			}
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	got := <-done
	ms := msSince(t0)
	if got != total {
		return fail(ms, "receiver counted %d, expected %d", got, total)
	}
	r := okRate(ms, float64(total))
	r.Extra = []kv{{"senders", senders}, {"senders_are", "goroutines (RootContext.Send)"}}
	return r
}

// ------------------------------------------------------------ 5 rings

type token struct{ v int }
type calc struct{ n uint64 }
type factorsMsg struct{ f []uint64 }
type masterDone struct{}

type chainLink struct{ next *actor.PID }

func (l *chainLink) Receive(ctx actor.Context) {
	if t, ok := ctx.Message().(*token); ok {
		ctx.Send(l.next, t)
		if t.v == 0 {
			ctx.Stop(ctx.Self())
		}
	}
}

type master struct {
	collector, worker *actor.PID
	links, tok        int
	rounds, done      int
	first             *actor.PID
}

func (m *master) startRound(ctx actor.Context) {
	ctx.Send(m.worker, &calc{n: factorN})
	next := ctx.Self()
	for i := 0; i < m.links; i++ {
		n := next
		next = ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return &chainLink{next: n} }))
	}
	m.first = next
	ctx.Send(m.first, &token{v: m.tok})
}

func (m *master) Receive(ctx actor.Context) {
	switch t := ctx.Message().(type) {
	case *actor.Started:
		m.startRound(ctx)
	case *token:
		if t.v > 0 {
			ctx.Send(m.first, &token{v: t.v - 1})
			return
		}
		m.done++
		if m.done < m.rounds {
			m.startRound(ctx)
		} else {
			ctx.Send(m.collector, &masterDone{})
		}
	}
}

type factorWorker struct{ collector *actor.PID }

func (w *factorWorker) Receive(ctx actor.Context) {
	if c, ok := ctx.Message().(*calc); ok {
		ctx.Send(w.collector, &factorsMsg{f: factorize(c.n)})
	}
}

type collector struct {
	facts, masters, bad int
	done                chan<- int
}

func (c *collector) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *factorsMsg:
		if len(m.f) != 2 || m.f[0] != factorLo || m.f[1] != factorHi {
			c.bad++
		}
		c.facts--
	case *masterDone:
		c.masters--
	default:
		return
	}
	if c.facts == 0 && c.masters == 0 {
		c.done <- c.bad
	}
}

func rings(nRings, links, tok, rounds int) result {
	sys := newSystem()
	done := make(chan int, 1)
	t0 := time.Now()
	coll := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &collector{facts: nRings * rounds, masters: nRings, done: done}
	}))
	for i := 0; i < nRings; i++ {
		w := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &factorWorker{collector: coll} }))
		sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &master{collector: coll, worker: w, links: links, tok: tok, rounds: rounds}
		}))
	}
	bad := <-done
	ms := msSince(t0)
	msgs := nRings*rounds*(tok+1)*(links+1) + 2*nRings*rounds + nRings
	if bad != 0 {
		return fail(ms, "%d wrong factorisations", bad)
	}
	r := okRate(ms, float64(msgs))
	r.Extra = []kv{{"messages", msgs}}
	return r
}

// ------------------------------------------------------------ 6 idle

type idleActor struct{ started, stopped *sync.WaitGroup }

func (a *idleActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		a.started.Done()
	case *actor.Stopped:
		a.stopped.Done()
	}
}

func idle(n int) result {
	sys := newSystem()
	var started, stopped sync.WaitGroup
	props := actor.PropsFromProducer(func() actor.Actor {
		return &idleActor{started: &started, stopped: &stopped}
	})
	pids := make([]*actor.PID, 0, n)
	runtime.GC()
	before := currentRSS()
	t0 := time.Now()
	started.Add(n)
	stopped.Add(n)
	for i := 0; i < n; i++ {
		pids = append(pids, sys.Root.Spawn(props))
	}
	started.Wait() // every actor processed Started and is waiting
	ms := msSince(t0)
	runtime.GC()
	after := currentRSS()
	for _, p := range pids {
		sys.Root.Stop(p)
	}
	stopped.Wait()
	pids = nil
	runtime.GC()
	afterStop := currentRSS()
	r := okTime(ms)
	bpa := float64(after-before) / float64(n)
	r.BytesPerActor = &bpa
	r.Extra = []kv{{"rss_before_bytes", before}, {"rss_after_spawn_bytes", after},
		{"rss_after_stop_bytes", afterStop}, {"actors", n}}
	return r
}

// ------------------------------------------------------------ 8 pi
// A coordinator actor hands the items to a round-robin router pool of one
// worker per core and sums the replies.

type piWork struct {
	start, terms int
	replyTo      *actor.PID
}
type piPart struct{ v float64 }
type piStart struct{}

type piWorker struct{}

func (piWorker) Receive(ctx actor.Context) {
	if w, ok := ctx.Message().(*piWork); ok {
		ctx.Send(w.replyTo, &piPart{v: leibniz(w.start, w.start+w.terms)})
	}
}

type piCoordinator struct {
	pool         *actor.PID
	items, terms int
	got          int
	sum          float64
	done         chan<- float64
}

func (c *piCoordinator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *piStart:
		for i := 0; i < c.items; i++ {
			ctx.Send(c.pool, &piWork{start: i * c.terms, terms: c.terms, replyTo: ctx.Self()})
		}
	case *piPart:
		c.sum += m.v
		c.got++
		if c.got == c.items {
			c.done <- c.sum
		}
	}
}

func pi(items, terms int) result {
	sys := newSystem()
	workers := runtime.NumCPU()
	pool := sys.Root.Spawn(router.NewRoundRobinPool(workers,
		actor.WithProducer(func() actor.Actor { return piWorker{} })))
	done := make(chan float64, 1)
	coord := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &piCoordinator{pool: pool, items: items, terms: terms, done: done}
	}))
	t0 := time.Now()
	sys.Root.Send(coord, &piStart{})
	sum := <-done
	ms := msSince(t0)
	t1 := time.Now()
	ref := leibniz(0, items*terms)
	loopMs := msSince(t1)
	if d := sum - ref; d > 1e-9 || d < -1e-9 {
		return fail(ms, "sum %.15f, single loop %.15f", sum, ref)
	}
	r := okTime(ms)
	r.Extra = []kv{{"plain_loop_ms", loopMs}, {"workers", workers}}
	return r
}
