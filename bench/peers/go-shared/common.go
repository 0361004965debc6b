// The harness shared by the Go peers (hollywood/, protoactor-go/): command
// line, the one-line JSON result, memory readings and the shared
// computations. Each peer's folder links to this file (a symlink), so both
// Go packages compile the same source.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
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

// Options of the remote workloads (--pairs N, --size BYTES; ../common.sh
// has checked them).
var optPairs, optSize = 1, 16

func parseArgs(args []string) (string, bool) {
	w, quick := "?", false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--quick" || a == "quick":
			quick = true
		case (a == "--pairs" || a == "--size") && i+1 < len(args):
			setOpt(a, args[i+1])
			i++
		case strings.HasPrefix(a, "--pairs=") || strings.HasPrefix(a, "--size="):
			k, v, _ := strings.Cut(a, "=")
			setOpt(k, v)
		default:
			w = a
		}
	}
	return w, quick
}

func setOpt(k, v string) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return
	}
	if k == "--pairs" && n > 0 {
		optPairs = n
	} else if k == "--size" {
		optSize = n
	}
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
	// remote workloads (nil: unsupported). The measuring process runs
	// remotePingpong / remotePi, which start this same program again as the
	// second process with `__serve <workload> <n>`; serve runs there.
	remotePingpong func(pairs, size, perPair, rttN int) result
	remotePi       func(items, terms int) result
	serve          func(workload string, n int) error
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
	case "remote-pingpong":
		if ws.remotePingpong == nil {
			return result{Ok: false, Error: "unsupported: remote-pingpong is not implemented by this peer"}
		}
		return ws.remotePingpong(optPairs, optSize, pick(5_000, 200_000), pick(1_000, 20_000))
	case "remote-pi":
		if ws.remotePi == nil {
			return result{Ok: false, Error: "unsupported: remote-pi is not implemented by this peer"}
		}
		return ws.remotePi(pick(100, 1000), pick(1000, 10_000))
	}
	return result{Ok: false, Error: "unknown workload " + w}
}

// runAndEmit runs the workload named on the command line, turns a panic into
// a failed result, and prints the result line.
func runAndEmit(impl string, ws workloads) {
	if len(os.Args) == 4 && os.Args[1] == "__serve" {
		// the second process of a remote workload: no JSON line
		n, _ := strconv.Atoi(os.Args[3])
		if err := ws.serve(os.Args[2], n); err != nil {
			fmt.Fprintf(os.Stderr, "remote process: %v\n", err)
			os.Exit(1)
		}
		return
	}
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

// ------------------------------------------------------------ remote workloads

// startRemoteProcess starts this program again as the second process of a
// remote workload (`__serve <workload> <n>`, on 127.0.0.1). That process
// starts its actor system with its remote layer on a port the OS picks,
// spawns its actors, and prints "ADDR <host:port>" on its stdout; it ends
// when its stdin is closed (so also when this process dies). Its pid goes
// to $PEER_PIDFILE, which ../run kills whatever happens. stop() ends it.
func startRemoteProcess(workload string, n int) (addr string, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self, "__serve", workload, strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	if f := os.Getenv("PEER_PIDFILE"); f != "" {
		if pf, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintf(pf, "%d\n", cmd.Process.Pid)
			pf.Close()
		}
	}
	stop = func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
				got <- a
				break
			}
			fmt.Fprintln(os.Stderr, sc.Text())
		}
		io.Copy(os.Stderr, stdout)
		close(got)
	}()
	select {
	case a, ok := <-got:
		if !ok {
			stop()
			return "", nil, fmt.Errorf("the second process ended without reporting its address")
		}
		return a, stop, nil
	case <-time.After(60 * time.Second):
		stop()
		return "", nil, fmt.Errorf("the second process did not report its address within 60 s")
	}
}

// serveUntilStdinCloses is the end of the second process's serve: it
// reports the address and waits until the measuring process closes stdin.
func serveUntilStdinCloses(addr string) {
	fmt.Fprintf(os.Stdout, "ADDR %s\n", addr)
	io.Copy(io.Discard, os.Stdin)
}

// makePayload: the ping payload of `size` bytes, filled once.
func makePayload(size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = 0xa5
	}
	return p
}

// rttPercentiles drops the first `warm` samples and returns p50 and p99
// (nearest rank) in microseconds.
func rttPercentiles(samples []time.Duration, warm int) (p50, p99 float64, kept int) {
	s := append([]time.Duration(nil), samples[warm:]...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) float64 {
		k := int(p*float64(len(s)) + 0.999999999)
		if k < 1 {
			k = 1
		}
		if k > len(s) {
			k = len(s)
		}
		return float64(s[k-1].Nanoseconds()) / 1000
	}
	return rank(0.50), rank(0.99), len(s)
}

// remotePingpongResult builds the line of remote-pingpong from the pair
// counts of phase 1 and the round trips of phase 2.
func remotePingpongResult(ms float64, counts []int, pairs, size, perPair int, rtts []time.Duration, rttN int, transport string) result {
	okAll := len(counts) == pairs
	for _, n := range counts {
		okAll = okAll && n == perPair
	}
	var r result
	if !okAll {
		r = fail(ms, "echo counts %v, expected %d each for %d pairs", counts, perPair, pairs)
	} else if len(rtts) != rttN {
		r = fail(ms, "latency phase: %d of %d round trips", len(rtts), rttN)
	} else {
		r = okRate(ms, float64(2*perPair*pairs))
	}
	r.Extra = []kv{{"pairs", pairs}, {"size_bytes", size}, {"echoes_per_pair", perPair}}
	if len(rtts) == rttN && rttN > 0 {
		p50, p99, kept := rttPercentiles(rtts, rttN/10)
		r.Extra = append(r.Extra, kv{"rtt_p50_us", p50}, kv{"rtt_p99_us", p99}, kv{"rtt_samples", kept})
	} else {
		r.Extra = append(r.Extra, kv{"rtt_p50_us", nil}, kv{"rtt_p99_us", nil})
	}
	r.Extra = append(r.Extra, kv{"tls", false}, kv{"transport", transport})
	return r
}
