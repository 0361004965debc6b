// GoAkt peer of the troubadour benchmark suite: the cluster workloads only,
// 12 cluster-virtual and 13 failover (bench/peers/README.md, "Cluster
// workloads").
//
//	goakt-peer cluster-virtual [--quick]
//	goakt-peer failover [--quick] [--mode kill|leave]
//
// The process started by ../run is node A (127.0.0.1). It starts nodes B
// (127.0.0.2) and C (127.0.0.3), this same binary with the arguments
// `__node <B|C> <workload> <0|1 quick> <ports>`, writes their pids to
// $PEER_PIDFILE and drives their phases over their stdin/stdout pipes
// (control lines start with "@@ "; see node.go). A prints exactly one JSON
// line on stdout; everything else goes to stderr.
//
// Every node is a GoAkt v4 actor system in cluster mode: remoting on its own
// address, the static discovery provider listing the other two nodes'
// discovery (memberlist) ports, and the `Counter` grain kind. Counters are
// GoAkt grains (virtual actors) addressed through GrainIdentity /
// TellGrain / AskGrain.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

const impl = "goakt"

type kv struct {
	k string
	v any
}

// line is the one JSON line: the common fields first, then extra ones in
// order. A nil *float64 is written as null.
type line struct {
	workload string
	ok       bool
	err      string
	fields   []kv
}

func (l *line) add(k string, v any) { l.fields = append(l.fields, kv{k, v}) }

func f64(v float64) *float64 { return &v }

func (l *line) emit() {
	var b strings.Builder
	field := func(k string, v any) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		kj, _ := json.Marshal(k)
		var vj []byte
		switch x := v.(type) {
		case *float64:
			if x == nil {
				vj = []byte("null")
			} else {
				vj = []byte(strconv.FormatFloat(*x, 'f', 3, 64))
			}
		case float64:
			vj = []byte(strconv.FormatFloat(x, 'f', 3, 64))
		default:
			vj, _ = json.Marshal(v)
		}
		b.Write(kj)
		b.WriteByte(':')
		b.Write(vj)
	}
	field("workload", l.workload)
	field("impl", impl)
	field("ok", l.ok)
	// elapsed_ms, msgs_per_sec and bytes_per_actor come from fields (null
	// when absent)
	get := func(k string) any {
		for _, f := range l.fields {
			if f.k == k {
				return f.v
			}
		}
		return (*float64)(nil)
	}
	field("elapsed_ms", get("elapsed_ms"))
	field("msgs_per_sec", get("msgs_per_sec"))
	field("peak_rss_bytes", peakRSS())
	field("bytes_per_actor", (*float64)(nil))
	if l.err != "" {
		field("error", l.err)
	}
	for _, f := range l.fields {
		switch f.k {
		case "elapsed_ms", "msgs_per_sec":
			continue
		}
		field(f.k, f.v)
	}
	field("goakt_version", goaktVersion())
	field("gomaxprocs", runtime.GOMAXPROCS(0))
	field("go_version", runtime.Version())
	fmt.Fprintf(os.Stdout, "{%s}\n", b.String())
}

func goaktVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tochemey/goakt/v4" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// peakRSS is VmHWM of this process (node A) in bytes, or -1.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, ln := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(ln, "VmHWM:"); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				if v, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
					return v * 1024
				}
			}
		}
	}
	return -1
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Nanoseconds()) / 1e6 }

// params are the workload sizes (README tables).
type params struct {
	identities int
	clients    int // cluster-virtual: clients per node
	rounds     int // cluster-virtual: rounds per client
}

func sizes(workload string, quick bool) params {
	switch workload {
	case "cluster-virtual":
		if quick {
			return params{identities: 10_000, clients: 10, rounds: 20}
		}
		return params{identities: 100_000, clients: 100, rounds: 200}
	case "failover":
		if quick {
			return params{identities: 300}
		}
		return params{identities: 3_000}
	}
	return params{}
}

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "__node" {
		os.Exit(childMain(os.Args[2:]))
	}
	workload, quick, mode := "?", false, "kill"
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--quick":
			quick = true
		case a == "--mode" && i+1 < len(args):
			mode = args[i+1]
			i++
		case strings.HasPrefix(a, "--mode="):
			mode = strings.TrimPrefix(a, "--mode=")
		default:
			workload = a
		}
	}
	l := &line{workload: workload}
	func() {
		defer func() {
			if p := recover(); p != nil {
				l.ok = false
				l.err = fmt.Sprintf("panic: %v", p)
			}
		}()
		var err error
		switch workload {
		case "cluster-virtual":
			err = runClusterVirtual(l, sizes(workload, quick), quick)
		case "failover":
			if mode != "kill" && mode != "leave" {
				err = fmt.Errorf("bad --mode %q (kill or leave)", mode)
				break
			}
			err = runFailover(l, sizes(workload, quick), mode, quick)
		default:
			err = errors.New("unsupported: the goakt peer implements only the cluster workloads 12 and 13")
		}
		if err != nil {
			l.ok = false
			l.err = err.Error()
		}
	}()
	l.emit()
	stopChildren()
	// The actor system of node A is not stopped: the line is printed and
	// the children are gone, so the process just ends.
	os.Exit(0)
}
