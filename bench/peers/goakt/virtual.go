package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"troubadour/bench/peers/goakt/pb"
)

// nearestRank returns the p-quantile (0 < p <= 1) of sorted, nearest rank.
func nearestRank(sorted []int64, p float64) int64 {
	k := int(p*float64(len(sorted)) + 0.999999999)
	k = max(1, min(k, len(sorted)))
	return sorted[k-1]
}

// allPhase runs cmd on B and C and local on A at the same time; the time is
// from A's start signal to the last node's "done".
func allPhase(kids []*child, cmd string, local func() phaseResult) ([]phaseResult, float64, error) {
	t0 := time.Now()
	results := make([]phaseResult, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, c := range kids {
		if err := c.send(cmd); err != nil {
			return nil, 0, fmt.Errorf("node %s: %v", c.name, err)
		}
		wg.Go(func() {
			rest, err := c.expect("DONE", 30*time.Minute)
			if err == nil {
				err = jsonUnmarshal(rest, &results[i+1])
			}
			errs[i+1] = err
		})
	}
	results[0] = local()
	wg.Wait()
	ms := msSince(t0)
	for _, err := range errs {
		if err != nil {
			return nil, ms, err
		}
	}
	return results, ms, nil
}

func runClusterVirtual(l *line, p params, quick bool) error {
	l.add("identities", p.identities)
	l.add("nodes", 3)
	l.add("clients_per_node", p.clients)
	l.add("rounds_per_client", p.rounds)
	l.add("transport", transportDesc)
	l.add("settings", "GoAkt v4 defaults: static discovery provider, Olric cluster store (271 partitions, replica count 1), memberlist LAN failure detection, grain activation strategy LocalActivation (a grain starts on the node that first addresses it), grain passivation after 2 min idle; nothing changed. Grain handles for counters owned by another node come from ActorSystem.Grains (untimed, between activation and messaging), not GrainIdentity, which is broken across nodes in v4.2.1 (upstream issue #1227)")

	sys, kids, joinMs, err := startCluster("cluster-virtual", quick)
	if err != nil {
		return err
	}
	l.add("join_ms", joinMs)
	ids := newIdentities(sys, p.identities)
	return clusterVirtualPhases(l, p, ids, kids)
}

func clusterVirtualPhases(l *line, p params, ids *identities, kids []*child) error {
	// 2. activation
	res, actMs, err := allPhase(kids, "ACTIVATE", func() phaseResult { return activatePhase(ids, 0, p.identities) })
	if err != nil {
		return err
	}
	l.add("activation_ms", actMs)
	l.add("activations_per_sec", float64(p.identities)/(actMs/1000))
	for k, r := range res {
		if r.Errors > 0 {
			return fmt.Errorf("activation: node %s: %d failed asks (first: %s)", nodeNames[k], r.Errors, r.FirstError)
		}
	}

	// handles (untimed): every node collects the GrainIdentity of every
	// counter (see identities.collect)
	res, hMs, err := allPhase(kids, "HANDLES", func() phaseResult { return handlesPhase(ids) })
	if err != nil {
		return err
	}
	l.add("handles_ms", hMs)
	for k, r := range res {
		if r.Errors > 0 {
			return fmt.Errorf("collecting grain handles: node %s: %s", nodeNames[k], r.FirstError)
		}
	}

	// 3. messaging
	res, ms, err := allPhase(kids, "MESSAGE", func() phaseResult { return messagePhase(ids, 0, p.identities, p.clients, p.rounds) })
	if err != nil {
		return err
	}
	msgs := 3 * p.clients * p.rounds * 10
	l.add("elapsed_ms", f64(ms))
	l.add("msgs_per_sec", f64(float64(msgs)/(ms/1000)))
	l.add("messages", msgs)
	var all []int64
	for _, r := range res {
		all = append(all, r.Samples...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) > 0 {
		l.add("ask_p50_us", float64(nearestRank(all, 0.50))/1000)
		l.add("ask_p99_us", float64(nearestRank(all, 0.99))/1000)
	} else {
		l.add("ask_p50_us", (*float64)(nil))
		l.add("ask_p99_us", (*float64)(nil))
	}
	l.add("ask_samples", len(all))
	for k, r := range res {
		if r.Errors > 0 {
			return fmt.Errorf("messaging: node %s: %d failed tells/asks (first: %s)", nodeNames[k], r.Errors, r.FirstError)
		}
	}
	deact := int64(0)
	for k, r := range res {
		if k == 0 {
			r.Deactivations = deactivations.Load()
		}
		deact += r.Deactivations
	}
	l.add("deactivations", deact)
	if want := 3 * p.clients * p.rounds; len(all) != want {
		return fmt.Errorf("messaging: %d ask samples, expected %d", len(all), want)
	}

	// 4. check: A asks Get of every identity, 100 in flight
	var sum atomic.Int64
	var errs errCount
	var hosted [3]atomic.Int64
	parallel(p.identities, 100, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		id, err := ids.cached(i)
		if err != nil {
			errs.add("check", err)
			return
		}
		r, err := ids.sys.AskGrain(ctx, id, &pb.Get{}, 5*time.Second)
		if err != nil {
			errs.add("check: ask Get "+counterName(i), err)
			return
		}
		v, ok := r.(*pb.Value)
		if !ok {
			errs.add("check: ask Get "+counterName(i), fmt.Errorf("unexpected reply %T", r))
			return
		}
		sum.Add(v.GetCount())
		for k, n := range nodeNames {
			if v.GetNode() == n {
				hosted[k].Add(1)
			}
		}
	})
	l.add("hosted", map[string]int64{"A": hosted[0].Load(), "B": hosted[1].Load(), "C": hosted[2].Load()})
	if n := errs.n.Load(); n > 0 {
		return fmt.Errorf("check: %d failed Get asks (first: %s)", n, errs.first)
	}
	want := int64(p.identities + msgs)
	if got := sum.Load(); got != want {
		return fmt.Errorf("sum %s, expected %s", thousands(got), thousands(want))
	}
	l.ok = true
	return nil
}

func thousands(v int64) string {
	s := fmt.Sprint(v)
	neg := v < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
