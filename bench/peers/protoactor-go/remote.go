// Remote workloads of the protoactor-go peer (9 remote-pingpong, 11
// remote-pi): protoactor-go's `remote` package (gRPC streams over TCP on
// 127.0.0.1, no TLS: its default insecure dial option), protobuf messages
// (pb/messages.proto, the remote's default proto serializer). The second
// process is this program started again by startRemoteProcess (common.go);
// it hosts the echoes (named "echo-<i>") or the pi worker pool (named
// "pi-workers") and the measuring process reaches them by PID
// (address + name).
package main

import (
	"fmt"
	"runtime"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/asynkron/protoactor-go/router"

	"troubadour/bench/peers/protoactor-go/pb"
)

const remoteTransport = "protoactor-go remote: gRPC over TCP (loopback), protobuf"
const remoteWait = 10 * time.Minute

// startRemote starts the actor system's remote layer on 127.0.0.1 with a
// port the OS picks and returns its address.
func startRemote(sys *actor.ActorSystem) (*remote.Remote, string) {
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	r.Start()
	return r, sys.Address()
}

// serve is the second process: n echoes (remote-pingpong) or a pool of one
// pi worker per core (remote-pi).
func serve(workload string, n int) error {
	sys := newSystem()
	_, addr := startRemote(sys)
	switch workload {
	case "remote-pingpong":
		for i := 0; i < n; i++ {
			if _, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return remoteEcho{} }),
				fmt.Sprintf("echo-%d", i)); err != nil {
				return err
			}
		}
	case "remote-pi":
		if _, err := sys.Root.SpawnNamed(router.NewRoundRobinPool(runtime.NumCPU(),
			actor.WithProducer(func() actor.Actor { return remotePiWorker{} })), "pi-workers"); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown remote workload %q", workload)
	}
	serveUntilStdinCloses(addr)
	return nil
}

// ------------------------------------------------------------ 9 remote pingpong

type remoteEcho struct{}

func (remoteEcho) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*pb.Ping); ok {
		ctx.Send(m.ReplyTo, &pb.Pong{Payload: m.Payload})
	}
}

// remoteClient: as pingClient, with the payload in the ping.
type remoteClient struct {
	echo    *actor.PID
	payload []byte
	msg     *pb.Ping
	perPair int
	batch   int
	inBatch int
	sent    int
	echoed  int
	done    chan<- int
}

func (c *remoteClient) sendBatch(ctx actor.Context) {
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

func (c *remoteClient) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *startPing:
		c.msg = &pb.Ping{ReplyTo: ctx.Self(), Payload: c.payload}
		c.sendBatch(ctx)
	case *pb.Pong:
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

// rttClient does n sequential round trips and times each one.
type rttClient struct {
	echo    *actor.PID
	payload []byte
	msg     *pb.Ping
	n       int
	t0      time.Time
	rtts    []time.Duration
	done    chan<- []time.Duration
}

func (c *rttClient) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *startPing:
		c.msg = &pb.Ping{ReplyTo: ctx.Self(), Payload: c.payload}
		c.t0 = time.Now()
		ctx.Send(c.echo, c.msg)
	case *pb.Pong:
		c.rtts = append(c.rtts, time.Since(c.t0))
		if len(c.rtts) == c.n {
			c.done <- c.rtts
			return
		}
		c.t0 = time.Now()
		ctx.Send(c.echo, c.msg)
	}
}

func remotePingpong(pairs, size, perPair, rttN int) result {
	addr, stop, err := startRemoteProcess("remote-pingpong", pairs)
	if err != nil {
		return result{Ok: false, Error: err.Error()}
	}
	defer stop()
	sys := newSystem()
	startRemote(sys)
	payload := makePayload(size)
	done := make(chan int, pairs)
	clients := make([]*actor.PID, pairs)
	echoes := make([]*actor.PID, pairs)
	for i := range clients {
		echoes[i] = actor.NewPID(addr, fmt.Sprintf("echo-%d", i))
		echo := echoes[i]
		clients[i] = sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &remoteClient{echo: echo, payload: payload, perPair: perPair, batch: 100, done: done}
		}))
	}
	t0 := time.Now()
	for _, c := range clients {
		sys.Root.Send(c, &startPing{})
	}
	var counts []int
	timeout := time.After(remoteWait)
wait:
	for len(counts) < pairs {
		select {
		case n := <-done:
			counts = append(counts, n)
		case <-timeout:
			break wait
		}
	}
	ms := msSince(t0)
	// phase 2: latency, one client, one echo
	rdone := make(chan []time.Duration, 1)
	rc := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &rttClient{echo: echoes[0], payload: payload, n: rttN, done: rdone}
	}))
	sys.Root.Send(rc, &startPing{})
	var rtts []time.Duration
	select {
	case rtts = <-rdone:
	case <-time.After(remoteWait):
	}
	return remotePingpongResult(ms, counts, pairs, size, perPair, rtts, rttN, remoteTransport)
}

// ------------------------------------------------------------ 11 remote pi

type remotePiWorker struct{}

func (remotePiWorker) Receive(ctx actor.Context) {
	if w, ok := ctx.Message().(*pb.PiWork); ok {
		ctx.Send(w.ReplyTo, &pb.PiPart{Value: leibniz(int(w.Start), int(w.Start+w.Terms))})
	}
}

type remotePiCoordinator struct {
	pool         *actor.PID
	items, terms int
	got          int
	sum          float64
	done         chan<- float64
}

func (c *remotePiCoordinator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *piStart:
		for i := 0; i < c.items; i++ {
			ctx.Send(c.pool, &pb.PiWork{Start: int64(i * c.terms), Terms: int64(c.terms), ReplyTo: ctx.Self()})
		}
	case *pb.PiPart:
		c.sum += m.Value
		c.got++
		if c.got == c.items {
			c.done <- c.sum
		}
	}
}

func remotePi(items, terms int) result {
	addr, stop, err := startRemoteProcess("remote-pi", 0)
	if err != nil {
		return result{Ok: false, Error: err.Error()}
	}
	defer stop()
	sys := newSystem()
	startRemote(sys)
	pool := actor.NewPID(addr, "pi-workers")
	done := make(chan float64, 1)
	coord := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &remotePiCoordinator{pool: pool, items: items, terms: terms, done: done}
	}))
	t0 := time.Now()
	sys.Root.Send(coord, &piStart{})
	var sum float64
	select {
	case sum = <-done:
	case <-time.After(remoteWait):
		return fail(msSince(t0), "no complete sum within %v", remoteWait)
	}
	ms := msSince(t0)
	t1 := time.Now()
	ref := leibniz(0, items*terms)
	loopMs := msSince(t1)
	extra := []kv{{"plain_loop_ms", loopMs}, {"workers", runtime.NumCPU()}, {"items", items}, {"terms", terms},
		{"tls", false}, {"transport", remoteTransport}}
	if d := sum - ref; d > 1e-9 || d < -1e-9 {
		r := fail(ms, "sum %.15f, single loop %.15f", sum, ref)
		r.Extra = extra
		return r
	}
	r := okRate(ms, float64(2*items))
	r.Extra = extra
	return r
}
