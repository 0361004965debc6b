// The harness shared by the Go peers (hollywood/, protoactor-go/): command
// line, the one-line JSON result, memory readings and the shared
// computations. Each peer's folder links to this file (a symlink), so both
// Go packages compile the same source.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

type kv struct {
	k string
	v any
}

type result struct {
	Ok            bool
	ElapsedMs     *float64
	MsgsPerSec    *float64
	BytesPerActor *float64
	Error         string
	Extra         []kv
}

func parseArgs(args []string) (string, bool) {
	w, quick := "?", false
	for _, a := range args {
		if a == "--quick" || a == "quick" {
			quick = true
		} else {
			w = a
		}
	}
	return w, quick
}

func msSince(t0 time.Time) float64 { return float64(time.Since(t0).Nanoseconds()) / 1e6 }

func okTime(ms float64) result { return result{Ok: true, ElapsedMs: &ms} }

func okRate(ms, msgs float64) result {
	rate := msgs / (ms / 1000)
	return result{Ok: true, ElapsedMs: &ms, MsgsPerSec: &rate}
}

func fail(ms float64, format string, args ...any) result {
	return result{Ok: false, ElapsedMs: &ms, Error: "verification failed: " + fmt.Sprintf(format, args...)}
}

// procStatus returns a "kB" field of /proc/self/status in bytes, or -1.
func procStatus(key string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, key+":") {
			fields := strings.Fields(line[len(key)+1:])
			if len(fields) > 0 {
				if v, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
					return v * 1024
				}
			}
		}
	}
	return -1
}

func currentRSS() int64 { return procStatus("VmRSS") }
func peakRSS() int64    { return procStatus("VmHWM") }

func emit(workload, impl string, r result) {
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
	field("workload", workload)
	field("impl", impl)
	field("ok", r.Ok)
	field("elapsed_ms", r.ElapsedMs)
	field("msgs_per_sec", r.MsgsPerSec)
	field("peak_rss_bytes", peakRSS())
	field("bytes_per_actor", r.BytesPerActor)
	if r.Error != "" {
		field("error", r.Error)
	}
	for _, e := range r.Extra {
		field(e.k, e.v)
	}
	field("gomaxprocs", runtime.GOMAXPROCS(0))
	field("go_version", runtime.Version())
	fmt.Fprintf(os.Stdout, "{%s}\n", b.String())
}

// factorize: trial division by 2, then by odd d while d*d <= n; what is
// left (> 1) is prime. The same algorithm in every peer.
func factorize(n uint64) []uint64 {
	var f []uint64
	d := uint64(2)
	for n > 1 {
		if d*d > n {
			f = append(f, n)
			break
		}
		if n%d == 0 {
			f = append(f, d)
			n /= d
			continue
		}
		if d == 2 {
			d = 3
		} else {
			d += 2
		}
	}
	return f
}

// leibniz sums the terms k = from .. to-1 of 4 * (-1)^k / (2k + 1).
func leibniz(from, to int) float64 {
	s := 0.0
	for k := from; k < to; k++ {
		t := 4.0 / float64(2*k+1)
		if k&1 == 0 {
			s += t
		} else {
			s -= t
		}
	}
	return s
}

// workloads is one Go peer's implementation of each workload; the sizes
// (full and --quick) are defined once, here, for every Go peer.
type workloads struct {
	counting func(n int) result
	pingpong func(pairs, perPair, batch int) result
	skynet   func(leaves, div int) result
	fanin    func(senders, n int) result
	rings    func(nRings, links, tok, rounds int) result
	idle     func(n int) result
	pi       func(items, terms int) result
}

func (ws workloads) run(w string, quick bool) result {
	pick := func(q, full int) int {
		if quick {
			return q
		}
		return full
	}
	switch w {
	case "counting":
		return ws.counting(pick(100_000, 3_000_000))
	case "pingpong":
		return ws.pingpong(runtime.NumCPU()*2, pick(10_000, 1_000_000), 100)
	case "skynet":
		return ws.skynet(pick(10_000, 1_000_000), 10)
	case "fanin":
		return ws.fanin(20, pick(10_000, 1_000_000))
	case "rings":
		return ws.rings(20, 49, pick(100, 10_000), pick(2, 5))
	case "idle":
		return ws.idle(pick(10_000, 1_000_000))
	case "pi":
		return ws.pi(pick(100, 1000), pick(1000, 10_000))
	}
	return result{Ok: false, Error: "unknown workload " + w}
}

// runAndEmit runs the workload named on the command line, turns a panic into
// a failed result, and prints the result line.
func runAndEmit(impl string, ws workloads) {
	workload, quick := parseArgs(os.Args[1:])
	var r result
	func() {
		defer func() {
			if p := recover(); p != nil {
				r = result{Ok: false, Error: fmt.Sprintf("panic: %v", p)}
			}
		}()
		r = ws.run(workload, quick)
	}()
	emit(workload, impl, r)
}

// pingpongResult waits for each of `pairs` pairs to report how many echoes
// it saw on done, and checks every pair saw perPair.
func pingpongResult(t0 time.Time, done <-chan int, pairs, perPair int) result {
	counts := make([]int, 0, pairs)
	okAll := true
	for i := 0; i < pairs; i++ {
		n := <-done
		counts = append(counts, n)
		okAll = okAll && n == perPair
	}
	ms := msSince(t0)
	if !okAll {
		return fail(ms, "echo counts %v, expected %d each", counts, perPair)
	}
	r := okRate(ms, float64(2*perPair*pairs))
	r.Extra = []kv{{"pairs", pairs}}
	return r
}
