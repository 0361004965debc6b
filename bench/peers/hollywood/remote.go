// Remote workloads of the Hollywood peer (9 remote-pingpong, 11 remote-pi):
// Hollywood's `remote` package (DRPC streams over plain TCP on 127.0.0.1:
// no TLS config given), protobuf messages (pb/messages.proto, the remote's
// ProtoSerializer). The second process is this program started again by
// startRemoteProcess (common.go); it hosts the echoes (kind "echo", ids
// 0..pairs-1) or one pi worker per core (kind "piworker", ids 0..), and the
// measuring process reaches them by PID (address + id).
package main

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/anthdm/hollywood/remote"

	"troubadour/bench/peers/hollywood/pb"
)

const remoteTransport = "Hollywood remote: DRPC over TCP (loopback), protobuf"
const remoteWait = 10 * time.Minute

// newRemoteEngine starts an engine with a remote on 127.0.0.1. Hollywood
// uses the listen address it is given as the engine's address (a port 0
// would end up in every PID), so a free port is taken from the OS first
// and the start is retried if another process got it in between.
func newRemoteEngine() (*actor.Engine, string, error) {
	var lastErr error
	for try := 0; try < 20; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", err
		}
		addr := ln.Addr().String()
		ln.Close()
		r := remote.New(addr, remote.NewConfig())
		e, err := actor.NewEngine(actor.NewEngineConfig().WithRemote(r))
		if err == nil {
			return e, addr, nil
		}
		lastErr = err
	}
	return nil, "", fmt.Errorf("could not start the remote: %v", lastErr)
}

// serve is the second process: n echoes (remote-pingpong) or one pi worker
// per core (remote-pi).
func serve(workload string, n int) error {
	e, addr, err := newRemoteEngine()
	if err != nil {
		return err
	}
	switch workload {
	case "remote-pingpong":
		for i := 0; i < n; i++ {
			pid := e.Spawn(func() actor.Receiver { return remoteEcho{} }, "echo", actor.WithID(strconv.Itoa(i)))
			if pid.ID != echoID(i) {
				return fmt.Errorf("echo spawned as %q, expected %q", pid.ID, echoID(i))
			}
		}
	case "remote-pi":
		for i := 0; i < runtime.NumCPU(); i++ {
			pid := e.Spawn(func() actor.Receiver { return remotePiWorker{} }, "piworker", actor.WithID(strconv.Itoa(i)))
			if pid.ID != piWorkerID(i) {
				return fmt.Errorf("worker spawned as %q, expected %q", pid.ID, piWorkerID(i))
			}
		}
	default:
		return fmt.Errorf("unknown remote workload %q", workload)
	}
	serveUntilStdinCloses(addr)
	return nil
}

func echoID(i int) string     { return "echo/" + strconv.Itoa(i) }
func piWorkerID(i int) string { return "piworker/" + strconv.Itoa(i) }

// ------------------------------------------------------------ 9 remote pingpong

type remoteEcho struct{}

func (remoteEcho) Receive(ctx *actor.Context) {
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

func (c *remoteClient) sendBatch(ctx *actor.Context) {
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

func (c *remoteClient) Receive(ctx *actor.Context) {
	switch ctx.Message().(type) {
	case *startPing:
		c.msg = &pb.Ping{ReplyTo: ctx.PID(), Payload: c.payload}
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

func (c *rttClient) Receive(ctx *actor.Context) {
	switch ctx.Message().(type) {
	case *startPing:
		c.msg = &pb.Ping{ReplyTo: ctx.PID(), Payload: c.payload}
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
	e, _, err := newRemoteEngine()
	if err != nil {
		return result{Ok: false, Error: err.Error()}
	}
	payload := makePayload(size)
	done := make(chan int, pairs)
	clients := make([]*actor.PID, pairs)
	echoes := make([]*actor.PID, pairs)
	for i := range clients {
		echoes[i] = actor.NewPID(addr, echoID(i))
		echo := echoes[i]
		clients[i] = e.Spawn(func() actor.Receiver {
			return &remoteClient{echo: echo, payload: payload, perPair: perPair, batch: 100, done: done}
		}, "client")
	}
	t0 := time.Now()
	for _, c := range clients {
		e.Send(c, &startPing{})
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
	rc := e.Spawn(func() actor.Receiver {
		return &rttClient{echo: echoes[0], payload: payload, n: rttN, done: rdone}
	}, "rttclient")
	e.Send(rc, &startPing{})
	var rtts []time.Duration
	select {
	case rtts = <-rdone:
	case <-time.After(remoteWait):
	}
	return remotePingpongResult(ms, counts, pairs, size, perPair, rtts, rttN, remoteTransport)
}

// ------------------------------------------------------------ 11 remote pi
// As pi: the coordinator hands the items round-robin to the workers (now
// in the second process); a worker answers with ctx.Respond, which goes
// back over the remote to the coordinator (the sender).

type remotePiWorker struct{}

func (remotePiWorker) Receive(ctx *actor.Context) {
	if w, ok := ctx.Message().(*pb.PiWork); ok {
		ctx.Respond(&pb.PiPart{Value: leibniz(int(w.Start), int(w.Start+w.Terms))})
	}
}

type remotePiCoordinator struct {
	workers      []*actor.PID
	items, terms int
	got          int
	sum          float64
	done         chan<- float64
}

func (c *remotePiCoordinator) Receive(ctx *actor.Context) {
	switch m := ctx.Message().(type) {
	case *piStart:
		for i := 0; i < c.items; i++ {
			ctx.Send(c.workers[i%len(c.workers)], &pb.PiWork{Start: int64(i * c.terms), Terms: int64(c.terms)})
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
	e, _, err := newRemoteEngine()
	if err != nil {
		return result{Ok: false, Error: err.Error()}
	}
	nw := runtime.NumCPU() // the second process runs one worker per core of this machine
	workers := make([]*actor.PID, nw)
	for i := range workers {
		workers[i] = actor.NewPID(addr, piWorkerID(i))
	}
	done := make(chan float64, 1)
	coord := e.Spawn(func() actor.Receiver {
		return &remotePiCoordinator{workers: workers, items: items, terms: terms, done: done}
	}, "coordinator")
	t0 := time.Now()
	e.Send(coord, &piStart{})
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
	extra := []kv{{"plain_loop_ms", loopMs}, {"workers", nw}, {"items", items}, {"terms", terms},
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
