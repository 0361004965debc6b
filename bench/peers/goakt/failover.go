package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tochemey/goakt/v4/actor"

	"troubadour/bench/peers/goakt/pb"
)

const transportDesc = "GoAkt remoting: TCP, no TLS, no compression (remote.NewConfig defaults), protobuf messages (default ProtoSerializer); cluster store Olric (TCP, its own protocol), membership hashicorp/memberlist (UDP+TCP gossip)"

const failureDetection = "hashicorp/memberlist LAN defaults as GoAkt configures them (Olric): probe interval 1 s, probe timeout 500 ms, 3 indirect probes, suspicion timeout 4 x probe interval x max(1, log10 n) = 4 s for 3 nodes, gossip every 200 ms; no downing provider, no lease; the member is removed when declared dead, then Olric rebalances its 271 partitions (replica count 1: the crashed node's share of the grain registry is lost) and GoAkt emits NodeLeft; relocation of grains on a graceful leave (on by default)"

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

type ack struct {
	at         time.Time
	node       string
	activation uint64
	count      int64
}

type prober struct {
	i        int
	affected bool
	acks     []ack
	failover atomic.Int64 // ns from t0 to the first reply from A or B after t0; 0 = none yet
	failed   int
	errs     map[string]int // failed asks by error text (diagnostics, stderr)
	slowest  time.Duration  // the longest single call (diagnostics)
	slowWhat string
}

func (pr *prober) took(d time.Duration, what string, err error) {
	if d > pr.slowest {
		pr.slowest = d
		pr.slowWhat = what
		if err != nil {
			pr.slowWhat += ": " + errKey(err)
		}
	}
}

// errKey shortens an error to its kind for the stderr diagnostics.
func errKey(err error) string {
	s := err.Error()
	for _, d := range []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"} {
		s = strings.ReplaceAll(s, d, "#")
	}
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}

func runFailover(l *line, p params, mode string, quick bool) error {
	l.add("mode", mode)
	l.add("identities", p.identities)
	l.add("nodes", 3)
	l.add("transport", transportDesc)
	l.add("failure_detection", failureDetection)
	l.add("settings", "GoAkt v4 defaults, nothing changed: grain placement LocalActivation (node k first addresses, so activates, the identities i mod 3 = k before A's first Add), relocation on; after a failed ask a prober re-addresses the grain with GrainIdentity (the documented way to re-create a grain lost with its node)")

	sys, kids, joinMs, err := startCluster("failover", quick)
	if err != nil {
		return err
	}
	l.add("join_ms", joinMs)
	nodeC := kids[1]
	n := p.identities
	ids := newIdentities(sys, n)

	// set-up (untimed): node k activates the identities i mod 3 = k with
	// GrainIdentity (default placement: where first addressed), then A
	// collects the handles of all of them (identities.collect)
	res, _, err := allPhase(kids, "PLACE", func() phaseResult { return placePhase(ids, 0, n) })
	if err != nil {
		return err
	}
	for k, r := range res {
		if r.Errors > 0 {
			return fmt.Errorf("placing the grains: node %s: %d failed (first: %s)", nodeNames[k], r.Errors, r.FirstError)
		}
	}
	if _, err := ids.collect(); err != nil {
		return err
	}

	// 1. A asks Add{1} of every identity; the replies say where each is.
	probers := make([]*prober, n)
	var errs errCount
	var hosted [3]atomic.Int64
	parallel(n, 100, func(i int) {
		pr := &prober{i: i}
		probers[i] = pr
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		id, err := ids.cached(i)
		if err != nil {
			errs.add("handle", err)
			return
		}
		r, err := sys.AskGrain(ctx, id, &pb.Add{N: 1, Reply: true}, time.Second)
		if err != nil {
			errs.add("ask Add "+counterName(i), err)
			return
		}
		a, ok := r.(*pb.Added)
		if !ok {
			errs.add("ask Add "+counterName(i), fmt.Errorf("unexpected reply %T", r))
			return
		}
		pr.acks = append(pr.acks, ack{time.Now(), a.GetNode(), a.GetActivation(), a.GetCount()})
		pr.affected = a.GetNode() == "C"
		for k, nn := range nodeNames {
			if a.GetNode() == nn {
				hosted[k].Add(1)
			}
		}
	})
	l.add("hosted", map[string]int64{"A": hosted[0].Load(), "B": hosted[1].Load(), "C": hosted[2].Load()})
	if c := errs.n.Load(); c > 0 {
		return fmt.Errorf("placement asks: %d failed (first: %s)", c, errs.first)
	}
	affected := int(hosted[2].Load())
	l.add("affected", affected)
	if affected == 0 {
		return fmt.Errorf("no identity is hosted on C")
	}

	// 2. probing: one prober per identity, sequential asks with a 1 s
	// timeout, 10 ms pause after a failure. After a failure the prober
	// re-addresses the grain (GrainIdentity again) as part of its next ask.
	var t0ns atomic.Int64 // UnixNano of t0; 0 before
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, pr := range probers {
		wg.Go(func() {
			readdress := false
			for !stop.Load() {
				var id *actor.GrainIdentity
				var err error
				if readdress {
					// GrainIdentity has its own 1 s; it is not the ask
					rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
					st := time.Now()
					id, err = ids.resolve(rctx, pr.i)
					rcancel()
					pr.took(time.Since(st), "GrainIdentity", err)
				} else {
					id, err = ids.cached(pr.i)
				}
				var r any
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					st := time.Now()
					r, err = sys.AskGrain(ctx, id, &pb.Add{N: 1, Reply: true}, time.Second)
					cancel()
					pr.took(time.Since(st), "AskGrain", err)
				}
				now := time.Now()
				a, ok := r.(*pb.Added)
				if err != nil || !ok {
					pr.failed++
					if err == nil {
						err = fmt.Errorf("unexpected reply %T", r)
					}
					if pr.errs == nil {
						pr.errs = map[string]int{}
					}
					when := "before t0"
					if t0ns.Load() != 0 {
						when = "after t0"
					}
					if readdress {
						pr.errs[when+", re-address or ask after it: "+errKey(err)]++
					} else {
						pr.errs[when+": "+errKey(err)]++
					}
					readdress = true
					time.Sleep(10 * time.Millisecond)
					continue
				}
				readdress = false
				pr.acks = append(pr.acks, ack{now, a.GetNode(), a.GetActivation(), a.GetCount()})
				if t0 := t0ns.Load(); pr.affected && t0 != 0 && a.GetNode() != "C" && pr.failover.Load() == 0 && now.UnixNano() > t0 {
					pr.failover.Store(max(1, now.UnixNano()-t0))
				}
			}
		})
	}
	time.Sleep(2 * time.Second)

	// 3. t0
	var leftLine chan string
	t0 := time.Now()
	t0ns.Store(t0.UnixNano())
	fmt.Fprintf(os.Stderr, "node A: t0 (%s C) at %s\n", mode, t0.UTC().Format("15:04:05.000"))
	if mode == "kill" {
		if err := syscall.Kill(nodeC.cmd.Process.Pid, syscall.SIGKILL); err != nil {
			stop.Store(true)
			wg.Wait()
			return fmt.Errorf("kill C: %v", err)
		}
	} else {
		if err := nodeC.send("LEAVE"); err != nil {
			stop.Store(true)
			wg.Wait()
			return fmt.Errorf("telling C to leave: %v", err)
		}
		leftLine = make(chan string, 1)
		go func() {
			rest, err := nodeC.expect("LEFT", 200*time.Second)
			if err != nil {
				rest = ""
				fmt.Fprintf(os.Stderr, "node A: %v\n", err)
			}
			leftLine <- rest
		}()
	}

	// 4. until every affected identity has answered from A or B, plus 2 s;
	// at most 180 s after t0
	deadline := t0.Add(180 * time.Second)
	allBack := func() bool {
		for _, pr := range probers {
			if pr.affected && pr.failover.Load() == 0 {
				return false
			}
		}
		return true
	}
	for !allBack() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if allBack() {
		time.Sleep(2 * time.Second)
	}
	stop.Store(true)
	wg.Wait()

	var fo []int64
	dark, failed, acked := 0, 0, 0
	for _, pr := range probers {
		failed += pr.failed
		acked += len(pr.acks)
		if !pr.affected {
			continue
		}
		if d := pr.failover.Load(); d > 0 {
			fo = append(fo, d)
		} else {
			dark++
		}
	}
	sort.Slice(fo, func(i, j int) bool { return fo[i] < fo[j] })
	logProbeDiagnostics(probers)
	l.add("dark", dark)
	l.add("failed_asks", failed)
	l.add("acknowledged_adds", acked)
	if dark == 0 && len(fo) > 0 {
		l.add("elapsed_ms", f64(float64(fo[len(fo)-1])/1e6))
		l.add("failover_p50_ms", float64(nearestRank(fo, 0.50))/1e6)
		l.add("failover_p99_ms", float64(nearestRank(fo, 0.99))/1e6)
		l.add("failover_max_ms", float64(fo[len(fo)-1])/1e6)
	} else {
		l.add("failover_p50_ms", (*float64)(nil))
		l.add("failover_p99_ms", (*float64)(nil))
		l.add("failover_max_ms", (*float64)(nil))
	}
	if leftLine != nil {
		select {
		case s := <-leftLine:
			var left struct {
				Ms    float64 `json:"ms"`
				Error string  `json:"error"`
			}
			if jsonUnmarshal(s, &left) == nil {
				l.add("c_leave_ms", left.Ms)
				if left.Error != "" {
					l.add("c_leave_error", left.Error)
				}
			}
		case <-time.After(5 * time.Second):
			l.add("c_leave_ms", (*float64)(nil))
		}
	}

	// 5. check: A asks Get of every identity (the handle its prober used last)
	type final struct {
		ok         bool
		node       string
		activation uint64
	}
	finals := make([]final, n)
	var gerrs errCount
	parallel(n, 100, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		id, err := ids.get(ctx, i)
		if err != nil {
			gerrs.add("check: GrainIdentity "+counterName(i), err)
			return
		}
		r, err := sys.AskGrain(ctx, id, &pb.Get{}, time.Second)
		if err != nil {
			gerrs.add("check: ask Get "+counterName(i), err)
			return
		}
		v, ok := r.(*pb.Value)
		if !ok {
			gerrs.add("check: ask Get "+counterName(i), fmt.Errorf("unexpected reply %T", r))
			return
		}
		finals[i] = final{true, v.GetNode(), v.GetActivation()}
	})
	lost := 0
	var lostOn [3]int
	lostIDs := 0
	var finalOn [3]int
	for i, pr := range probers {
		f := finals[i]
		if !f.ok {
			continue
		}
		for k, nn := range nodeNames {
			if f.node == nn {
				finalOn[k]++
			}
		}
		had := lost
		for _, a := range pr.acks {
			if a.node != "C" && a.activation != f.activation {
				lost++
				for k, nn := range nodeNames {
					if a.node == nn {
						lostOn[k]++
					}
				}
			}
		}
		if lost > had {
			lostIDs++
		}
	}
	l.add("lost_acknowledged", lost)
	l.add("lost_acknowledged_on", map[string]int{"A": lostOn[0], "B": lostOn[1]})
	l.add("identities_with_lost_adds", lostIDs)
	l.add("final_hosted", map[string]int{"A": finalOn[0], "B": finalOn[1], "C": finalOn[2]})
	l.add("activations_on_a", activations.Load())
	if c := gerrs.n.Load(); c > 0 {
		return fmt.Errorf("check: %d failed Get asks (first: %s); lost_acknowledged counts only the identities that answered", c, gerrs.first)
	}
	if dark > 0 {
		return fmt.Errorf("%d of %d affected identities still dark 180 s after t0", dark, affected)
	}
	if lost > 0 {
		return fmt.Errorf("lost_acknowledged %d: acknowledged Adds on A or B whose activation is not the one answering the final Get", lost)
	}
	l.ok = true
	return nil
}

// logProbeDiagnostics writes to stderr the failed asks by error kind, and
// the slowest affected identities with theirs.
func logProbeDiagnostics(probers []*prober) {
	total := map[string]int{}
	for _, pr := range probers {
		for k, v := range pr.errs {
			total[k] += v
		}
	}
	keys := make([]string, 0, len(total))
	for k := range total {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return total[keys[i]] > total[keys[j]] })
	fmt.Fprintf(os.Stderr, "node A: failed asks while probing, by error:\n")
	for _, k := range keys {
		fmt.Fprintf(os.Stderr, "  %7d  %s\n", total[k], k)
	}
	var aff []*prober
	for _, pr := range probers {
		if pr.affected {
			aff = append(aff, pr)
		}
	}
	sort.Slice(aff, func(i, j int) bool {
		a, b := aff[i].failover.Load(), aff[j].failover.Load()
		if a == 0 {
			return b != 0
		}
		return b != 0 && a > b
	})
	for _, pr := range aff[:min(3, len(aff))] {
		nodes := map[string]int{}
		for _, a := range pr.acks {
			nodes[a.node]++
		}
		fmt.Fprintf(os.Stderr, "node A: %s failover %.0f ms, %d failed asks: %v; acks by node %v; slowest call %v (%s)\n", counterName(pr.i), float64(pr.failover.Load())/1e6, pr.failed, pr.errs, nodes, pr.slowest.Round(time.Millisecond), pr.slowWhat)
	}
	slow := append([]*prober(nil), probers...)
	sort.Slice(slow, func(i, j int) bool { return slow[i].slowest > slow[j].slowest })
	for _, pr := range slow[:min(5, len(slow))] {
		fmt.Fprintf(os.Stderr, "node A: slowest calls: %s %v (%s)\n", counterName(pr.i), pr.slowest.Round(time.Millisecond), pr.slowWhat)
	}
}
