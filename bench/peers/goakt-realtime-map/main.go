// Realtime bus map, GoAkt peer.
//
// The service subscribes to the Helsinki HFP v2 vehicle-position feed over
// MQTT and keeps one GoAkt actor per vehicle. The MQTT callback routes each
// position to its vehicle's actor with Tell, spawning the actor on the
// vehicle's first position. Each actor is spawned with GoAkt's time-based
// passivation strategy, so it is stopped after --idle without messages and
// spawned again (with fresh state) by the next position. HTTP queries are
// answered by the vehicle actors themselves, through Ask.
//
//	goakt-realtime-map --mqtt mqtt://127.0.0.1:1883 --listen 127.0.0.1:8080 [--idle 60s]
//
// When subscribed and listening it prints one line to stdout:
//
//	listening on http://127.0.0.1:8080
//
// and it exits with status 0 on SIGINT or SIGTERM.
//
// # Cluster mode
//
// With --cluster-node NAME the process is one node of a GoAkt cluster
// (GoAkt's clustered mode: memberlist membership, the Olric cluster registry,
// TCP remoting; peers are found with GoAkt's static discovery provider, from
// the --seeds list). Each vehicle is then a GoAkt grain (a virtual actor,
// named "vehicle-<oper>-<veh>"), activated on the node that first sends it a
// message and registered in the cluster registry, so that any node reaches it
// with TellGrain / AskGrain. Every node subscribes to the MQTT shared
// subscription "$share/goakt-realtime-map//hfp/v2/journey/ongoing/vp/#", so
// the broker hands each position to one node, which sends it to the
// vehicle's grain wherever it lives. Every node serves the same HTTP API;
// /vehicle answers have an extra "node" field, the --cluster-node of the node
// hosting the grain. State is in memory only (no persistence): a node killed
// with kill -9 loses its vehicles' states, and the next position or query
// for such a vehicle activates it again, fresh, on a live node. Three nodes
// on one machine (loopback addresses), started one after the other or all at
// once:
//
//	goakt-realtime-map --mqtt mqtt://127.0.0.1:1883 --listen 127.0.0.1:8080 \
//	    --cluster-node n1 --cluster-bind 127.0.0.1 \
//	    --seeds 127.0.0.1:7946,127.0.0.2:7946,127.0.0.3:7946
//	goakt-realtime-map --mqtt mqtt://127.0.0.1:1883 --listen 127.0.0.2:8080 \
//	    --cluster-node n2 --cluster-bind 127.0.0.2 \
//	    --seeds 127.0.0.1:7946,127.0.0.2:7946,127.0.0.3:7946
//	goakt-realtime-map --mqtt mqtt://127.0.0.1:1883 --listen 127.0.0.3:8080 \
//	    --cluster-node n3 --cluster-bind 127.0.0.3 \
//	    --seeds 127.0.0.1:7946,127.0.0.2:7946,127.0.0.3:7946
//
// Each node uses three ports on its --cluster-bind address: --discovery-port
// (memberlist gossip, TCP and UDP; the port named in --seeds, default 7946),
// --peers-port (Olric, default 7947) and --remoting-port (GoAkt remoting,
// default 7948). A node prints its "listening" line once it has joined the
// cluster (through any seed that answers; with none, it starts a cluster of
// its own, which later nodes join), subscribed, and listens. README.md has
// the details and the limitations.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	stdlog "log"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/tochemey/goakt/v4/actor"
	"github.com/tochemey/goakt/v4/discovery/static"
	gerrors "github.com/tochemey/goakt/v4/errors"
	goaktlog "github.com/tochemey/goakt/v4/log"
	"github.com/tochemey/goakt/v4/passivation"
	"github.com/tochemey/goakt/v4/remote"
)

const (
	topicFilter = "/hfp/v2/journey/ongoing/vp/#"
	// sharedTopicFilter is topicFilter as an MQTT shared subscription of
	// the cluster's nodes: the broker hands each position to one of them.
	sharedTopicFilter = "$share/goakt-realtime-map/" + topicFilter
	askTimeout        = time.Second
	// actorPrefix starts the name of every vehicle actor; the rest is
	// "<oper>-<veh>" (GoAkt actor names may not contain '/').
	actorPrefix = "vehicle-"
)

var logger = stdlog.New(os.Stderr, "goakt-realtime-map: ", stdlog.LstdFlags)

// ---------------------------------------------------------------------------
// Messages

// position is one vehicle position, sent with Tell to the vehicle's actor.
// It is never modified after it is sent.
type position struct {
	Route     string
	Line      string
	Lat       float64
	Long      float64
	Speed     float64
	Heading   float64
	Timestamp string
}

// getState asks a vehicle actor for its state; the reply is a VehicleState.
type getState struct{}

var getStateMsg = new(getState)

// VehicleState is a vehicle actor's state, the reply to getState, and the
// JSON object served over HTTP. Optional fields missing from the latest
// payload are "" or 0, as in the troubadour service.
type VehicleState struct {
	ID        string  `json:"id"`
	Route     string  `json:"route"`
	Line      string  `json:"line"`
	Lat       float64 `json:"lat"`
	Long      float64 `json:"long"`
	Speed     float64 `json:"speed"`
	Heading   float64 `json:"heading"`
	Timestamp string  `json:"timestamp"`
	Updates   uint64  `json:"updates"`
	// Node is the cluster node hosting the vehicle (cluster mode only).
	Node string `json:"node,omitempty"`
}

// apply records a new position.
func (s *VehicleState) apply(msg *position) {
	s.Route = msg.Route
	s.Line = msg.Line
	s.Lat = msg.Lat
	s.Long = msg.Long
	s.Speed = msg.Speed
	s.Heading = msg.Heading
	s.Timestamp = msg.Timestamp
	s.Updates++
}

// ---------------------------------------------------------------------------
// The vehicle actor

type vehicle struct {
	state VehicleState
}

var _ actor.Actor = (*vehicle)(nil)

func newVehicle(id string) *vehicle {
	return &vehicle{state: VehicleState{ID: id}}
}

func (v *vehicle) PreStart(*actor.Context) error { return nil }

func (v *vehicle) Receive(ctx *actor.ReceiveContext) {
	switch msg := ctx.Message().(type) {
	case *position:
		v.state.apply(msg)
	case *getState:
		ctx.Response(v.state) // a copy
	case *actor.PostStart:
	default:
		ctx.Unhandled()
	}
}

func (v *vehicle) PostStop(*actor.Context) error { return nil }

// ---------------------------------------------------------------------------
// Payload parsing

type hfpPayload struct {
	VP *struct {
		Desi  *string  `json:"desi"`
		Oper  *uint32  `json:"oper"`
		Veh   *uint32  `json:"veh"`
		Tst   *string  `json:"tst"`
		Spd   *float64 `json:"spd"`
		Hdg   *float64 `json:"hdg"`
		Lat   *float64 `json:"lat"`
		Long  *float64 `json:"long"`
		Route *string  `json:"route"`
	} `json:"VP"`
}

// parsePosition decodes an HFP "vp" payload into the vehicle id
// ("<oper>/<veh>"), its actor name and the position message.
func parsePosition(payload []byte) (id, name string, pos *position, err error) {
	var p hfpPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return "", "", nil, fmt.Errorf("not an HFP vehicle position: %v", err)
	}
	vp := p.VP
	switch {
	case vp == nil:
		return "", "", nil, errors.New("not an HFP vehicle position: no VP object")
	case vp.Oper == nil:
		return "", "", nil, errors.New("required field `oper` is missing")
	case vp.Veh == nil:
		return "", "", nil, errors.New("required field `veh` is missing")
	case vp.Lat == nil:
		return "", "", nil, errors.New("required field `lat` is missing")
	case vp.Long == nil:
		return "", "", nil, errors.New("required field `long` is missing")
	case *vp.Lat < -90 || *vp.Lat > 90 || *vp.Long < -180 || *vp.Long > 180:
		return "", "", nil, fmt.Errorf("position lat=%v, long=%v is outside the globe", *vp.Lat, *vp.Long)
	}
	oper := strconv.FormatUint(uint64(*vp.Oper), 10)
	veh := strconv.FormatUint(uint64(*vp.Veh), 10)
	return oper + "/" + veh, actorPrefix + oper + "-" + veh, &position{
		Route:     deref(vp.Route),
		Line:      deref(vp.Desi),
		Lat:       *vp.Lat,
		Long:      *vp.Long,
		Speed:     deref(vp.Spd),
		Heading:   deref(vp.Hdg),
		Timestamp: deref(vp.Tst),
	}, nil
}

// deref returns *p, or the zero value when the field was absent or null.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// actorNameOf maps a vehicle id given over HTTP ("22/1043") to its actor's
// name. Only the canonical form produced by parsePosition can name a vehicle.
func actorNameOf(id string) (string, bool) {
	oper, veh, ok := strings.Cut(id, "/")
	if !ok || !canonicalInt(oper) || !canonicalInt(veh) {
		return "", false
	}
	return actorPrefix + oper + "-" + veh, true
}

func canonicalInt(s string) bool {
	n, err := strconv.ParseUint(s, 10, 32)
	return err == nil && strconv.FormatUint(n, 10) == s
}

// ---------------------------------------------------------------------------
// The fleet: routes positions to vehicle actors

type fleet struct {
	system    actor.ActorSystem
	spawnOpts []actor.SpawnOption
	spawnMu   sync.Mutex // serialises spawns, so a new vehicle is spawned once

	positions atomic.Uint64
	malformed atomic.Uint64

	logLimiter
}

// logBurst is how many problem lines (malformed payloads, undeliverable
// positions) are logged per second at most.
const logBurst = 10

// logLimiter rate limits the problem log lines.
type logLimiter struct {
	logMu     sync.Mutex
	logWindow time.Time
	logLines  int
}

func newFleet(system actor.ActorSystem, idle time.Duration) *fleet {
	return &fleet{
		system: system,
		spawnOpts: []actor.SpawnOption{
			actor.WithPassivationStrategy(passivation.NewTimeBasedStrategy(idle)),
		},
	}
}

// onMessage is the MQTT message handler.
func (f *fleet) onMessage(_ mqtt.Client, m mqtt.Message) {
	id, name, pos, err := parsePosition(m.Payload())
	if err != nil {
		n := f.malformed.Add(1)
		f.logLimited("malformed payload on %s (%d malformed so far): %v", m.Topic(), n, err)
		return
	}
	if err := f.route(context.Background(), id, name, pos); err != nil {
		f.logLimited("cannot deliver a position to vehicle %s: %v", id, err)
		return
	}
	f.positions.Add(1)
}

// route delivers pos to the vehicle's actor, spawning the actor when the
// vehicle has none (first position, or the actor was passivated).
func (f *fleet) route(ctx context.Context, id, name string, pos *position) error {
	var err error
	for range 3 {
		var pid *actor.PID
		pid, err = f.system.ActorOf(ctx, name)
		if err != nil {
			if !errors.Is(err, gerrors.ErrActorNotFound) {
				return err
			}
			if pid, err = f.spawn(ctx, id, name); err != nil {
				return err
			}
		}
		err = f.system.NoSender().Tell(ctx, pid, pos)
		if !errors.Is(err, gerrors.ErrDead) {
			return err
		}
		// The actor was passivated between the lookup and the Tell: the next
		// round spawns a new one.
	}
	return err
}

func (f *fleet) spawn(ctx context.Context, id, name string) (*actor.PID, error) {
	f.spawnMu.Lock()
	defer f.spawnMu.Unlock()
	// Spawn returns the running actor when another position created it
	// between our lookup and taking the lock.
	return f.system.Spawn(ctx, name, newVehicle(id), f.spawnOpts...)
}

func (f *logLimiter) logLimited(format string, args ...any) {
	f.logMu.Lock()
	now := time.Now()
	if now.Sub(f.logWindow) >= time.Second {
		f.logWindow, f.logLines = now, 0
	}
	f.logLines++
	ok := f.logLines <= logBurst
	f.logMu.Unlock()
	if ok {
		logger.Printf(format, args...)
	}
}

// ---------------------------------------------------------------------------
// HTTP

type api struct {
	system actor.ActorSystem
}

func (a *api) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /vehicle", a.vehicle)
	mux.HandleFunc("GET /vehicles", a.vehicles)
	return mux
}

// vehicle: GET /vehicle?id=22/1043, answered by the vehicle's actor.
func (a *api) vehicle(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		writeError(w, http.StatusBadRequest, "missing query parameter id")
		return
	}
	state, err := a.ask(r.Context(), id)
	switch {
	case err == nil && state.Updates > 0:
		writeJSON(w, http.StatusOK, &state)
	case err == nil:
		// Spawned, and asked before its first position was applied.
		writeError(w, http.StatusNotFound, "vehicle "+id+" has no position yet")
	case errors.Is(err, gerrors.ErrActorNotFound):
		writeError(w, http.StatusNotFound, "no vehicle with id "+id)
	case errors.Is(err, gerrors.ErrRequestTimeout):
		writeError(w, http.StatusServiceUnavailable,
			fmt.Sprintf("vehicle %s did not answer within %d ms", id, askTimeout.Milliseconds()))
	default:
		// For instance passivated between the look-up and the Ask.
		writeError(w, http.StatusServiceUnavailable, "vehicle "+id+" could not answer ("+err.Error()+"); try again")
	}
}

func (a *api) ask(ctx context.Context, id string) (VehicleState, error) {
	name, ok := actorNameOf(id)
	if !ok {
		return VehicleState{}, gerrors.ErrActorNotFound
	}
	pid, err := a.system.ActorOf(ctx, name)
	if err != nil {
		return VehicleState{}, err
	}
	return askState(ctx, a.system, pid)
}

func askState(ctx context.Context, system actor.ActorSystem, pid *actor.PID) (VehicleState, error) {
	reply, err := system.NoSender().Ask(ctx, pid, getStateMsg, askTimeout)
	if err != nil {
		return VehicleState{}, err
	}
	state, ok := reply.(VehicleState)
	if !ok {
		return VehicleState{}, fmt.Errorf("unexpected reply %T", reply)
	}
	return state, nil
}

type bbox struct{ minLon, minLat, maxLon, maxLat float64 }

// parseBBox parses "minlon,minlat,maxlon,maxlat": four finite numbers,
// each min not above its max.
func parseBBox(s string) (bbox, error) {
	bad := fmt.Errorf("bbox must be minlon,minlat,maxlon,maxlat in degrees (for example 24.9,60.15,25.0,60.2); got `%s`", s)
	parts := strings.Split(s, ",")
	if len(parts) != 4 {
		return bbox{}, bad
	}
	var v [4]float64
	for i, p := range parts {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return bbox{}, bad
		}
		v[i] = f
	}
	b := bbox{v[0], v[1], v[2], v[3]}
	if b.minLon > b.maxLon || b.minLat > b.maxLat {
		return bbox{}, bad
	}
	return b, nil
}

func (b bbox) contains(s *VehicleState) bool {
	return s.Long >= b.minLon && s.Long <= b.maxLon && s.Lat >= b.minLat && s.Lat <= b.maxLat
}

type vehiclesReply struct {
	Count    int            `json:"count"`
	Vehicles []VehicleState `json:"vehicles"`
}

// vehicles: GET /vehicles?bbox=minlon,minlat,maxlon,maxlat. Every live
// vehicle actor is asked for its state, a few at a time.
func (a *api) vehicles(w http.ResponseWriter, r *http.Request) {
	q, ok := r.URL.Query()["bbox"]
	if !ok {
		writeError(w, http.StatusBadRequest, "missing query parameter bbox=minlon,minlat,maxlon,maxlat")
		return
	}
	box, err := parseBBox(q[0])
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), askTimeout)
	defer cancel()
	pids, err := a.system.Actors(ctx, askTimeout)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "cannot list the vehicles: "+err.Error())
		return
	}
	live := pids[:0]
	for _, pid := range pids {
		if strings.HasPrefix(pid.Name(), actorPrefix) {
			live = append(live, pid)
		}
	}

	// A vehicle that passivated meanwhile, or does not answer in time, is
	// left out.
	workers := min(runtime.GOMAXPROCS(0)*2, len(live))
	found := make([][]VehicleState, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for k := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(live) {
					return
				}
				state, err := askState(ctx, a.system, live[i])
				if err == nil && state.Updates > 0 && box.contains(&state) {
					found[k] = append(found[k], state)
				}
			}
		})
	}
	wg.Wait()

	reply := vehiclesReply{Vehicles: make([]VehicleState, 0)}
	for _, states := range found {
		reply.Vehicles = append(reply.Vehicles, states...)
	}
	sort.Slice(reply.Vehicles, func(i, j int) bool { return reply.Vehicles[i].ID < reply.Vehicles[j].ID })
	reply.Count = len(reply.Vehicles)
	writeJSON(w, http.StatusOK, &reply)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":"cannot encode the reply"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, struct {
		Error string `json:"error"`
	}{msg})
}

// ---------------------------------------------------------------------------
// main

// idleFlag is --idle: a Go duration (60s, 500ms, 5m) or plain seconds.
type idleFlag time.Duration

func (d *idleFlag) String() string { return time.Duration(*d).String() }

func (d *idleFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return fmt.Errorf("%q is not a duration; write e.g. 60s, 500ms, 5m", s)
		}
		v = time.Duration(secs * float64(time.Second))
	}
	if v <= 0 {
		return errors.New("the idle time must be positive")
	}
	*d = idleFlag(v)
	return nil
}

// brokerURL checks an mqtt://host[:port] (or tcp://) address and adds the
// default port, 1883, when there is none.
func brokerURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "mqtt" && u.Scheme != "tcp") || u.Hostname() == "" || strings.Trim(u.Path, "/") != "" {
		return "", fmt.Errorf("%q is not an MQTT address; expected mqtt://host:port", s)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "1883")
	}
	return u.Scheme + "://" + u.Host, nil
}

func main() {
	if err := run(); err != nil {
		logger.Print(err)
		os.Exit(1)
	}
}

// clusterFlags are the flags of cluster mode.
type clusterFlags struct {
	node          string
	bind          string
	discoveryPort int
	peersPort     int
	remotingPort  int
	seeds         string
}

func run() error {
	mqttFlag := flag.String("mqtt", "mqtt://127.0.0.1:1883", "MQTT broker, mqtt://host[:port]")
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP listen address")
	idle := idleFlag(60 * time.Second)
	flag.Var(&idle, "idle", "passivate a vehicle actor after this long without messages (60s, 500ms, 5m, or seconds)")
	var cf clusterFlags
	flag.StringVar(&cf.node, "cluster-node", "", "run as the cluster node of this name, unique in the cluster (enables cluster mode)")
	flag.StringVar(&cf.bind, "cluster-bind", "127.0.0.1", "cluster mode: IP address of this node's discovery, peers and remoting ports")
	flag.IntVar(&cf.discoveryPort, "discovery-port", 7946, "cluster mode: memberlist (gossip) port, TCP and UDP; the port of this node in --seeds")
	flag.IntVar(&cf.peersPort, "peers-port", 7947, "cluster mode: cluster registry (Olric) port")
	flag.IntVar(&cf.remotingPort, "remoting-port", 7948, "cluster mode: GoAkt remoting port")
	flag.StringVar(&cf.seeds, "seeds", "", "cluster mode: the nodes' host:discovery-port, comma-separated (static discovery; default: this node only)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}
	mqttURL, err := brokerURL(*mqttFlag)
	if err != nil {
		return err
	}
	if cf.node == "" {
		var clusterOnly []string
		flag.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "cluster-bind", "discovery-port", "peers-port", "remoting-port", "seeds":
				clusterOnly = append(clusterOnly, "--"+f.Name)
			}
		})
		if len(clusterOnly) > 0 {
			return fmt.Errorf("%s only apply to cluster mode: add --cluster-node NAME", strings.Join(clusterOnly, ", "))
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if cf.node != "" {
		return runCluster(ctx, mqttURL, *listen, time.Duration(idle), &cf)
	}

	// The actor system. GoAkt's logger only reports errors: it would
	// otherwise log every lookup of an unknown vehicle and every passivation.
	system, err := actor.NewActorSystem("realtime-map",
		actor.WithLogger(goaktlog.NewSlog(goaktlog.ErrorLevel, os.Stderr)))
	if err != nil {
		return fmt.Errorf("actor system: %w", err)
	}
	if err := system.Start(context.Background()); err != nil {
		return fmt.Errorf("actor system start: %w", err)
	}
	defer stopSystem(system)
	f := newFleet(system, time.Duration(idle))

	return serve(ctx, mqttURL, fmt.Sprintf("goakt-realtime-map-%d", os.Getpid()), topicFilter, f.onMessage,
		*listen, (&api{system: system}).routes(), func() {
			logger.Printf("%d positions routed, %d malformed payloads", f.positions.Load(), f.malformed.Load())
		})
}

func stopSystem(system actor.ActorSystem) {
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := system.Stop(stopCtx); err != nil {
		logger.Printf("actor system stop: %v", err)
	}
	logger.Printf("actor system stopped in %v", time.Since(start).Round(time.Millisecond))
}

// serve subscribes to topic on the broker, serves handler on listen, prints
// the "listening" line and runs until ctx is done (or the HTTP server
// fails). Then it stops the HTTP server, calls stopped, and disconnects from
// the broker.
func serve(ctx context.Context, mqttURL, clientID, topic string, onMessage mqtt.MessageHandler,
	listen string, handler http.Handler, stopped func()) error {
	// MQTT: subscribe on every (re)connection; the first subscription
	// unblocks start-up.
	subscribed := make(chan error, 1)
	var once sync.Once
	opts := mqtt.NewClientOptions().
		AddBroker(mqttURL).
		SetClientID(clientID).
		SetCleanSession(true).
		SetAutoReconnect(true).
		SetConnectTimeout(10 * time.Second).
		SetOnConnectHandler(func(c mqtt.Client) {
			t := c.Subscribe(topic, 0, onMessage)
			t.Wait()
			if err := t.Error(); err != nil {
				logger.Printf("subscribe %s: %v", topic, err)
			}
			once.Do(func() { subscribed <- t.Error() })
		}).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) {
			logger.Printf("MQTT connection lost: %v", err)
		})
	client := mqtt.NewClient(opts)
	if t := client.Connect(); !t.WaitTimeout(15*time.Second) || t.Error() != nil {
		return fmt.Errorf("cannot connect to MQTT broker %s: %v", mqttURL, t.Error())
	}
	defer func() {
		start := time.Now()
		client.Disconnect(250)
		logger.Printf("MQTT client disconnected in %v", time.Since(start).Round(time.Millisecond))
	}()
	select {
	case err := <-subscribed:
		if err != nil {
			return fmt.Errorf("cannot subscribe to %s: %w", topic, err)
		}
	case <-time.After(15 * time.Second):
		return fmt.Errorf("no subscription acknowledgement from %s", mqttURL)
	case <-ctx.Done():
		return nil
	}

	// HTTP
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(os.Stdout, "listening on http://%s\n", ln.Addr())

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("HTTP server: %w", err)
	}
	logger.Print("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Printf("HTTP shutdown: %v", err)
	}
	stopped()
	return nil
}

// ---------------------------------------------------------------------------
// Cluster mode: vehicles are grains

// nodeName is this node's --cluster-node; set before the actor system
// starts, read by the vehicle grains.
var nodeName string

// vehicleGrain is a vehicle in cluster mode: a GoAkt grain (virtual actor)
// named "vehicle-<oper>-<veh>". GoAkt activates it on its first message, on
// the node that sends it (unless it is active elsewhere in the cluster), and
// deactivates it after --idle without messages.
type vehicleGrain struct {
	state VehicleState
}

var _ actor.Grain = (*vehicleGrain)(nil)

func newVehicleGrain(context.Context) (actor.Grain, error) { return new(vehicleGrain), nil }

// OnActivate starts with a fresh state: a grain keeps its state in memory
// only, so one activated again (after passivation, or on another node after
// its node crashed) has no position until the next one arrives.
func (g *vehicleGrain) OnActivate(_ context.Context, props *actor.GrainProps) error {
	name := strings.TrimPrefix(props.Identity().Name(), actorPrefix)
	g.state = VehicleState{ID: strings.Replace(name, "-", "/", 1), Node: nodeName}
	return nil
}

func (g *vehicleGrain) OnReceive(ctx *actor.GrainContext) {
	switch msg := ctx.Message().(type) {
	case *position:
		g.state.apply(msg)
		ctx.NoErr()
	case *getState:
		state := g.state // a copy
		ctx.Response(&state)
	default:
		ctx.Unhandled()
	}
}

func (g *vehicleGrain) OnDeactivate(context.Context, *actor.GrainProps) error { return nil }

// Ingest workers: positions are sent to their grains by ingestWorkers
// goroutines, each vehicle always by the same one, so that a vehicle's
// positions arrive in order while sends to different grains (each a round
// trip to the grain's node) overlap.
const (
	ingestWorkers    = 16
	ingestQueue      = 256
	grainSendTimeout = 5 * time.Second
)

type ingest struct {
	id, name string
	pos      *position
}

// clusterFleet routes positions and queries to the vehicle grains.
type clusterFleet struct {
	system actor.ActorSystem
	idle   time.Duration
	ids    sync.Map // grain name -> *actor.GrainIdentity

	// Scans of the cluster registry for the vehicle grains' identities
	// (see identity).
	scanMu       sync.Mutex
	scanDone     *sync.Cond
	scanning     bool
	scansStarted uint64
	scansDone    uint64

	queueMu sync.RWMutex
	closed  bool
	queues  []chan ingest
	workers sync.WaitGroup

	positions   atomic.Uint64
	malformed   atomic.Uint64
	undelivered atomic.Uint64

	logLimiter
}

func newClusterFleet(system actor.ActorSystem, idle time.Duration) *clusterFleet {
	f := &clusterFleet{system: system, idle: idle}
	f.scanDone = sync.NewCond(&f.scanMu)
	for range ingestWorkers {
		q := make(chan ingest, ingestQueue)
		f.queues = append(f.queues, q)
		f.workers.Go(func() {
			for job := range q {
				ctx, cancel := context.WithTimeout(context.Background(), grainSendTimeout)
				err := f.tell(ctx, job.name, job.pos)
				cancel()
				if err != nil {
					n := f.undelivered.Add(1)
					f.logLimited("cannot deliver a position to vehicle %s (%d undelivered so far): %v", job.id, n, err)
					continue
				}
				f.positions.Add(1)
			}
		})
	}
	return f
}

// onMessage is the MQTT message handler.
func (f *clusterFleet) onMessage(_ mqtt.Client, m mqtt.Message) {
	id, name, pos, err := parsePosition(m.Payload())
	if err != nil {
		n := f.malformed.Add(1)
		f.logLimited("malformed payload on %s (%d malformed so far): %v", m.Topic(), n, err)
		return
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	f.queueMu.RLock()
	defer f.queueMu.RUnlock()
	if !f.closed {
		f.queues[h.Sum32()%uint32(len(f.queues))] <- ingest{id: id, name: name, pos: pos}
	}
}

// close stops the ingest workers once they have sent the queued positions.
func (f *clusterFleet) close() {
	f.queueMu.Lock()
	f.closed = true
	for _, q := range f.queues {
		close(q)
	}
	f.queueMu.Unlock()
	f.workers.Wait()
}

// identity returns the grain identity of a vehicle, for TellGrain and
// AskGrain; identities are kept once known.
//
// GoAkt's GrainIdentity is the way to get the identity of a grain that is
// active nowhere: it claims the grain in the cluster registry and activates
// it on this node. For a grain active on another node it would ask that node
// to activate it (a no-op) but, in GoAkt v4.2.1, that request is malformed
// (the grain's name is sent with its kind prefixed, which the other node
// rejects), so GrainIdentity takes the failure for a crashed owner: it drops
// the registry entry and activates a second, fresh instance here. So a
// vehicle unknown to this node is first looked for among the grains of the
// cluster registry (ActorSystem.Grains, which returns their identities),
// and GrainIdentity is used only for one that is not there. With fresh set
// (a send failed: the owner crashed), GrainIdentity is called directly, as
// activating the grain here is then the point.
func (f *clusterFleet) identity(ctx context.Context, name string, fresh bool) (*actor.GrainIdentity, error) {
	if !fresh {
		if id, ok := f.ids.Load(name); ok {
			return id.(*actor.GrainIdentity), nil
		}
		f.scanRegistry()
		if id, ok := f.ids.Load(name); ok {
			return id.(*actor.GrainIdentity), nil
		}
	}
	id, err := f.system.GrainIdentity(ctx, name, newVehicleGrain, actor.WithGrainDeactivateAfter(f.idle))
	if err != nil {
		return nil, err
	}
	f.ids.Store(name, id)
	return id, nil
}

// grainsTimeout is far longer than any scan of the cluster registry takes.
// In GoAkt v4.2.1 a scan whose context expires crashes the process: olric's
// EmbeddedIterator.Close panics with the context's error and then unlocks
// an unlocked mutex, a fatal error no recover catches (the three-node runs
// of 2026-11-26 and 2026-11-27 died of it under load). So the peer never
// lets one expire; a slow scan makes the requests waiting for it slow.
const grainsTimeout = 5 * time.Minute

// allGrains lists the cluster registry's grains (see grainsTimeout).
func allGrains(system actor.ActorSystem) []*actor.GrainIdentity {
	return system.Grains(context.Background(), grainsTimeout)
}

// scanRegistry returns once a scan of the cluster registry that started
// after the call has stored the identities of the cluster's vehicle grains.
// One scan runs at a time; callers that arrive during a scan share the next.
func (f *clusterFleet) scanRegistry() {
	f.scanMu.Lock()
	defer f.scanMu.Unlock()
	need := f.scansStarted + 1
	for f.scansDone < need {
		if f.scanning {
			f.scanDone.Wait()
			continue
		}
		f.scanning = true
		f.scansStarted++
		this := f.scansStarted
		f.scanMu.Unlock()
		for _, id := range allGrains(f.system) {
			if strings.HasPrefix(id.Name(), actorPrefix) {
				f.ids.LoadOrStore(id.Name(), id)
			}
		}
		f.scanMu.Lock()
		f.scanning = false
		f.scansDone = this
		f.scanDone.Broadcast()
	}
}

// tell sends a position to its vehicle's grain, wherever it lives. When the
// send fails other than by a timeout (typically: the grain's node crashed
// and the cluster registry still names it), GrainIdentity resolves the grain
// again (it drops the registry entry of an unreachable owner and activates
// the grain on this node) and the position is sent once more.
func (f *clusterFleet) tell(ctx context.Context, name string, pos *position) error {
	id, err := f.identity(ctx, name, false)
	if err != nil {
		return err
	}
	err = f.system.TellGrain(ctx, id, pos)
	if err == nil || isTimeout(err) {
		return err
	}
	id, err2 := f.identity(ctx, name, true)
	if err2 != nil {
		return fmt.Errorf("%v; resolving the grain again: %v", err, err2)
	}
	return f.system.TellGrain(ctx, id, pos)
}

// ask asks a vehicle's grain for its state, resolving the grain again as
// tell does when the first Ask fails other than by a timeout.
func (f *clusterFleet) ask(ctx context.Context, name string) (VehicleState, error) {
	id, err := f.identity(ctx, name, false)
	if err != nil {
		return VehicleState{}, err
	}
	reply, err := f.system.AskGrain(ctx, id, getStateMsg, askTimeout)
	if err != nil && !isTimeout(err) {
		if id, err2 := f.identity(ctx, name, true); err2 == nil {
			reply, err = f.system.AskGrain(ctx, id, getStateMsg, askTimeout)
		}
	}
	if err != nil {
		return VehicleState{}, err
	}
	return grainState(reply)
}

func grainState(reply any) (VehicleState, error) {
	switch s := reply.(type) {
	case *VehicleState:
		return *s, nil
	case VehicleState:
		return s, nil
	default:
		return VehicleState{}, fmt.Errorf("unexpected reply %T", reply)
	}
}

// isTimeout tells whether a send failed by a timeout (a remote grain's
// timeout arrives as an error with the same text).
func isTimeout(err error) bool {
	return errors.Is(err, gerrors.ErrRequestTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), gerrors.ErrRequestTimeout.Error())
}

type clusterAPI struct {
	fleet *clusterFleet
}

func (a *clusterAPI) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /vehicle", a.vehicle)
	mux.HandleFunc("GET /vehicles", a.vehicles)
	return mux
}

// vehicle: GET /vehicle?id=22/1043, answered by the vehicle's grain,
// wherever it lives. Every well-formed id names a grain: one without a
// position (it never had one, or it was activated again after passivation
// or after its node crashed) answers 404.
func (a *clusterAPI) vehicle(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		writeError(w, http.StatusBadRequest, "missing query parameter id")
		return
	}
	name, ok := actorNameOf(id)
	if !ok {
		writeError(w, http.StatusNotFound, "no vehicle with id "+id)
		return
	}
	// The Ask itself times out after askTimeout; the whole answer, with the
	// grain's look-up in the cluster registry and a second try after a
	// failure, after twice that.
	ctx, cancel := context.WithTimeout(r.Context(), 2*askTimeout)
	defer cancel()
	state, err := a.fleet.ask(ctx, name)
	switch {
	case err == nil && state.Updates > 0:
		writeJSON(w, http.StatusOK, &state)
	case err == nil:
		writeError(w, http.StatusNotFound, "no vehicle with id "+id)
	case isTimeout(err):
		writeError(w, http.StatusServiceUnavailable,
			fmt.Sprintf("vehicle %s did not answer within %d ms", id, askTimeout.Milliseconds()))
	default:
		writeError(w, http.StatusServiceUnavailable, "vehicle "+id+" could not answer ("+err.Error()+"); try again")
	}
}

// vehicles: GET /vehicles?bbox=minlon,minlat,maxlon,maxlat. Every vehicle
// grain in the cluster registry is asked for its state, a few at a time.
func (a *clusterAPI) vehicles(w http.ResponseWriter, r *http.Request) {
	q, ok := r.URL.Query()["bbox"]
	if !ok {
		writeError(w, http.StatusBadRequest, "missing query parameter bbox=minlon,minlat,maxlon,maxlat")
		return
	}
	box, err := parseBBox(q[0])
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), askTimeout)
	defer cancel()
	system := a.fleet.system
	var live []*actor.GrainIdentity
	for _, id := range allGrains(system) {
		if strings.HasPrefix(id.Name(), actorPrefix) {
			live = append(live, id)
		}
	}

	// A vehicle that passivated meanwhile, or does not answer in time, is
	// left out.
	workers := min(runtime.GOMAXPROCS(0)*4, len(live))
	found := make([][]VehicleState, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for k := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(live) {
					return
				}
				reply, err := system.AskGrain(ctx, live[i], getStateMsg, askTimeout)
				if err != nil {
					continue
				}
				state, err := grainState(reply)
				if err == nil && state.Updates > 0 && box.contains(&state) {
					found[k] = append(found[k], state)
				}
			}
		})
	}
	wg.Wait()

	reply := vehiclesReply{Vehicles: make([]VehicleState, 0)}
	for _, states := range found {
		reply.Vehicles = append(reply.Vehicles, states...)
	}
	sort.Slice(reply.Vehicles, func(i, j int) bool { return reply.Vehicles[i].ID < reply.Vehicles[j].ID })
	reply.Count = len(reply.Vehicles)
	writeJSON(w, http.StatusOK, &reply)
}

// runCluster runs this process as one node of a GoAkt cluster.
func runCluster(ctx context.Context, mqttURL, listen string, idle time.Duration, cf *clusterFlags) error {
	if strings.IndexFunc(cf.node, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) >= 0 {
		return fmt.Errorf("--cluster-node %q: use letters, digits, '-', '_' and '.'", cf.node)
	}
	if net.ParseIP(cf.bind) == nil {
		return fmt.Errorf("--cluster-bind %q is not an IP address", cf.bind)
	}
	for _, p := range []struct {
		name string
		port int
	}{{"discovery-port", cf.discoveryPort}, {"peers-port", cf.peersPort}, {"remoting-port", cf.remotingPort}} {
		if p.port <= 0 || p.port > 65535 {
			return fmt.Errorf("--%s %d is not a port", p.name, p.port)
		}
	}
	var seeds []string
	for s := range strings.SplitSeq(cf.seeds, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
			return fmt.Errorf("--seeds: %q is not host:port", s)
		}
		seeds = append(seeds, s)
	}
	if len(seeds) == 0 {
		seeds = []string{net.JoinHostPort(cf.bind, strconv.Itoa(cf.discoveryPort))}
	}
	nodeName = cf.node

	// GoAkt's clustered mode: static discovery of the seeds, the vehicle
	// grain kind registered with the cluster, and remoting, whose CBOR
	// serializer carries the messages between nodes. The cluster registry
	// keeps GoAkt's default of one replica per entry (with two, a node
	// cannot start a cluster alone): entries held by a crashed node are lost,
	// and the live nodes put their grains back when they see it leave.
	clusterConfig := actor.NewClusterConfig().
		WithDiscovery(static.NewDiscovery(&static.Config{Hosts: seeds})).
		WithDiscoveryPort(cf.discoveryPort).
		WithPeersPort(cf.peersPort).
		WithGrains(new(vehicleGrain)).
		WithShutdownTimeout(10 * time.Second)
	remoteConfig := remote.NewConfig(cf.bind, cf.remotingPort,
		remote.WithSerializables(new(position), new(getState), new(VehicleState)))
	system, err := actor.NewActorSystem("realtime-map",
		actor.WithLogger(goaktlog.NewSlog(goaktlog.ErrorLevel, os.Stderr)),
		actor.WithRemote(remoteConfig),
		actor.WithCluster(clusterConfig))
	if err != nil {
		return fmt.Errorf("actor system: %w", err)
	}
	if err := system.Start(context.Background()); err != nil {
		return fmt.Errorf("actor system start (cluster node %s): %w", cf.node, err)
	}
	defer stopSystem(system)
	peers, err := system.Peers(ctx, time.Second)
	if err != nil {
		logger.Printf("node %s: cannot list the cluster's nodes: %v", cf.node, err)
	} else {
		logger.Printf("node %s (%s) joined the cluster; %d other nodes", cf.node, cf.bind, len(peers))
	}

	f := newClusterFleet(system, idle)
	err = serve(ctx, mqttURL, fmt.Sprintf("goakt-realtime-map-%s-%d", cf.node, os.Getpid()), sharedTopicFilter,
		f.onMessage, listen, (&clusterAPI{fleet: f}).routes(), func() {})
	f.close()
	logger.Printf("%d positions routed, %d undeliverable, %d malformed payloads",
		f.positions.Load(), f.undelivered.Load(), f.malformed.Load())
	return err
}
