// Hollywood peer of the troubadour benchmark suite.
//
// Usage: hollywood-peer <workload> [--quick]
// Prints exactly one JSON line on stdout; diagnostics go to stderr.
//
// Configuration: the engine defaults (actor.NewEngineConfig(), default inbox,
// which is a growing ring buffer, default goroutine scheduler with throughput
// 300, GOMAXPROCS = number of cores).
package main

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/anthdm/hollywood/actor"
)

const (
	factorN   uint64 = 28350160440309881
	factorLo  uint64 = 86028157
	factorHi  uint64 = 329545133
	waitLimit        = 30 * time.Minute
)

func newEngine() *actor.Engine {
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		panic(fmt.Sprintf("NewEngine: %v", err))
	}
	return e
}

func main() {
	runAndEmit("hollywood", workloads{
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

func (c *counter) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *add:
		c.total += m.n
	case *getAndReset:
		ctx.Respond(c.total)
		c.total = 0
	}
}

func counting(n int) result {
	e := newEngine()
	pid := e.Spawn(func() actor.Receiver { return &counter{} }, "counter")
	msg := &add{n: 100} // messages are immutable; one value is sent n times
	t0 := time.Now()
	for i := 0; i < n; i++ {
		e.Send(pid, msg)
	}
	res, err := e.Request(pid, &getAndReset{}, waitLimit).Result()
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

var thePong = &pong{}

type echoActor struct{}

func (echoActor) Receive(ctx *actor.Context) {
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

func (c *pingClient) sendBatch(ctx *actor.Context) {
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

func (c *pingClient) Receive(ctx *actor.Context) {
	switch ctx.Message().(type) {
	case *startPing:
		c.msg = &ping{replyTo: ctx.PID()}
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
	e := newEngine()
	done := make(chan int, pairs)
	clients := make([]*actor.PID, pairs)
	for i := range clients {
		echo := e.Spawn(func() actor.Receiver { return echoActor{} }, "echo")
		clients[i] = e.Spawn(func() actor.Receiver {
			return &pingClient{echo: echo, perPair: perPair, batch: batch, done: done}
		}, "client")
	}
	t0 := time.Now()
	for _, c := range clients {
		e.Send(c, &startPing{})
	}
	return pingpongResult(t0, done, pairs, perPair)
}

// ------------------------------------------------------------ 3 skynet

type skynetSum struct{ v int64 }

type skynetNode struct {
	num, size, div int64
	sum, got       int64
	root           chan<- int64 // set on the root only: where its sum goes
}

func newSkynetNode(num, size, div int64, root chan<- int64) actor.Producer {
	return func() actor.Receiver {
		return &skynetNode{num: num, size: size, div: div, root: root}
	}
}

func (s *skynetNode) reply(ctx *actor.Context, v int64) {
	if s.root != nil {
		s.root <- v
	} else {
		ctx.Send(ctx.Parent(), &skynetSum{v: v})
	}
	ctx.Engine().Poison(ctx.PID())
}

func (s *skynetNode) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case actor.Started:
		if s.size == 1 {
			s.reply(ctx, s.num)
			return
		}
		sub := s.size / s.div
		for i := int64(0); i < s.div; i++ {
			ctx.SpawnChild(newSkynetNode(s.num+i*sub, sub, s.div, nil), "s")
		}
	case *skynetSum:
		s.sum += m.v
		s.got++
		if s.got == s.div {
			s.reply(ctx, s.sum)
		}
	}
}

func skynet(leaves, div int) result {
	e := newEngine()
	root := make(chan int64, 1)
	t0 := time.Now()
	e.Spawn(newSkynetNode(0, int64(leaves), int64(div), root), "skynet")
	var got int64
	select {
	case got = <-root:
	case <-time.After(waitLimit):
		return fail(msSince(t0), "no sum within %v", waitLimit)
	}
	ms := msSince(t0)
	want := int64(leaves) * (int64(leaves) - 1) / 2
	if got != want {
		return fail(ms, "sum %d, expected %d", got, want)
	}
	return okTime(ms)
}

// ------------------------------------------------------------ 4 fan-in
// 20 goroutines send from outside the actors (Engine.Send).

type fanMsg struct{}

type fanReceiver struct {
	target, count int
	done          chan<- int
}

func (f *fanReceiver) Receive(ctx *actor.Context) {
	if _, ok := ctx.Message().(*fanMsg); ok {
		f.count++
		if f.count == f.target {
			f.done <- f.count
		}
	}
}

func fanin(senders, n int) result {
	e := newEngine()
	total := senders * n
	done := make(chan int, 1)
	recv := e.Spawn(func() actor.Receiver { return &fanReceiver{target: total, done: done} }, "receiver")
	start := make(chan struct{})
	var ready sync.WaitGroup
	for s := 0; s < senders; s++ {
		ready.Add(1)
		go func() {
			msg := &fanMsg{}
			ready.Done()
			<-start
			for i := 0; i < n; i++ {
				e.Send(recv, msg)
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
	r.Extra = []kv{{"senders", senders}, {"senders_are", "goroutines (Engine.Send)"}}
	return r
}

// ------------------------------------------------------------ 5 rings

type token struct{ v int }
type calc struct{ n uint64 }
type factorsMsg struct{ f []uint64 }
type masterDone struct{}

type chainLink struct{ next *actor.PID }

func (l *chainLink) Receive(ctx *actor.Context) {
	if t, ok := ctx.Message().(*token); ok {
		ctx.Send(l.next, t)
		if t.v == 0 {
			ctx.Engine().Poison(ctx.PID())
		}
	}
}

type master struct {
	collector, worker *actor.PID
	links, tok        int
	rounds, done      int
	first             *actor.PID
}

func (m *master) startRound(ctx *actor.Context) {
	ctx.Send(m.worker, &calc{n: factorN})
	next := ctx.PID()
	for i := 0; i < m.links; i++ {
		n := next
		next = ctx.SpawnChild(func() actor.Receiver { return &chainLink{next: n} }, "link")
	}
	m.first = next
	ctx.Send(m.first, &token{v: m.tok})
}

func (m *master) Receive(ctx *actor.Context) {
	switch t := ctx.Message().(type) {
	case actor.Started:
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

func (w *factorWorker) Receive(ctx *actor.Context) {
	if c, ok := ctx.Message().(*calc); ok {
		ctx.Send(w.collector, &factorsMsg{f: factorize(c.n)})
	}
}

type collector struct {
	facts, masters, bad int
	done                chan<- int
}

func (c *collector) Receive(ctx *actor.Context) {
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
	e := newEngine()
	done := make(chan int, 1)
	t0 := time.Now()
	coll := e.Spawn(func() actor.Receiver {
		return &collector{facts: nRings * rounds, masters: nRings, done: done}
	}, "collector")
	for i := 0; i < nRings; i++ {
		w := e.Spawn(func() actor.Receiver { return &factorWorker{collector: coll} }, "worker")
		e.Spawn(func() actor.Receiver {
			return &master{collector: coll, worker: w, links: links, tok: tok, rounds: rounds}
		}, "master")
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

func (a *idleActor) Receive(ctx *actor.Context) {
	switch ctx.Message().(type) {
	case actor.Started:
		a.started.Done()
	case actor.Stopped:
		a.stopped.Done()
	}
}

func idle(n int) result {
	e := newEngine()
	var started, stopped sync.WaitGroup
	producer := func() actor.Receiver { return &idleActor{started: &started, stopped: &stopped} }
	pids := make([]*actor.PID, 0, n)
	runtime.GC()
	before := currentRSS()
	t0 := time.Now()
	started.Add(n)
	stopped.Add(n)
	for i := 0; i < n; i++ {
		pids = append(pids, e.Spawn(producer, "idle"))
	}
	started.Wait()
	ms := msSince(t0)
	runtime.GC()
	after := currentRSS()
	for _, p := range pids {
		e.Poison(p)
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
// Hollywood has no router: the coordinator actor hands the items
// round-robin to one worker actor per core and sums the replies.

type piWork struct{ start, terms int }
type piPart struct{ v float64 }
type piStart struct{}

type piWorker struct{}

func (piWorker) Receive(ctx *actor.Context) {
	if w, ok := ctx.Message().(*piWork); ok {
		ctx.Respond(&piPart{v: leibniz(w.start, w.start+w.terms)})
	}
}

type piCoordinator struct {
	workers      []*actor.PID
	items, terms int
	got          int
	sum          float64
	done         chan<- float64
}

func (c *piCoordinator) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *piStart:
		for i := 0; i < c.items; i++ {
			ctx.Send(c.workers[i%len(c.workers)], &piWork{start: i * c.terms, terms: c.terms})
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
	e := newEngine()
	nw := runtime.NumCPU()
	workers := make([]*actor.PID, nw)
	for i := range workers {
		workers[i] = e.Spawn(func() actor.Receiver { return piWorker{} }, "piworker")
	}
	done := make(chan float64, 1)
	coord := e.Spawn(func() actor.Receiver {
		return &piCoordinator{workers: workers, items: items, terms: terms, done: done}
	}, "coordinator")
	t0 := time.Now()
	e.Send(coord, &piStart{})
	sum := <-done
	ms := msSince(t0)
	t1 := time.Now()
	ref := leibniz(0, items*terms)
	loopMs := msSince(t1)
	if d := sum - ref; d > 1e-9 || d < -1e-9 {
		return fail(ms, "sum %.15f, single loop %.15f", sum, ref)
	}
	r := okTime(ms)
	r.Extra = []kv{{"plain_loop_ms", loopMs}, {"workers", nw}}
	return r
}
