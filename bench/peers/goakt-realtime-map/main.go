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
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
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
	gerrors "github.com/tochemey/goakt/v4/errors"
	goaktlog "github.com/tochemey/goakt/v4/log"
	"github.com/tochemey/goakt/v4/passivation"
)

const (
	topicFilter = "/hfp/v2/journey/ongoing/vp/#"
	askTimeout  = time.Second
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
		s := &v.state
		s.Route = msg.Route
		s.Line = msg.Line
		s.Lat = msg.Lat
		s.Long = msg.Long
		s.Speed = msg.Speed
		s.Heading = msg.Heading
		s.Timestamp = msg.Timestamp
		s.Updates++
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

	logMu     sync.Mutex // rate limit of the problem log lines
	logWindow time.Time
	logLines  int
}

// logBurst is how many problem lines (malformed payloads, undeliverable
// positions) are logged per second at most.
const logBurst = 10

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

func (f *fleet) logLimited(format string, args ...any) {
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

func run() error {
	mqttFlag := flag.String("mqtt", "mqtt://127.0.0.1:1883", "MQTT broker, mqtt://host[:port]")
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP listen address")
	idle := idleFlag(60 * time.Second)
	flag.Var(&idle, "idle", "passivate a vehicle actor after this long without messages (60s, 500ms, 5m, or seconds)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}
	mqttURL, err := brokerURL(*mqttFlag)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

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
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		if err := system.Stop(stopCtx); err != nil {
			logger.Printf("actor system stop: %v", err)
		}
		logger.Printf("actor system stopped in %v", time.Since(start).Round(time.Millisecond))
	}()
	f := newFleet(system, time.Duration(idle))

	// MQTT: subscribe on every (re)connection; the first subscription
	// unblocks start-up.
	subscribed := make(chan error, 1)
	var once sync.Once
	opts := mqtt.NewClientOptions().
		AddBroker(mqttURL).
		SetClientID(fmt.Sprintf("goakt-realtime-map-%d", os.Getpid())).
		SetCleanSession(true).
		SetAutoReconnect(true).
		SetConnectTimeout(10 * time.Second).
		SetOnConnectHandler(func(c mqtt.Client) {
			t := c.Subscribe(topicFilter, 0, f.onMessage)
			t.Wait()
			if err := t.Error(); err != nil {
				logger.Printf("subscribe %s: %v", topicFilter, err)
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
			return fmt.Errorf("cannot subscribe to %s: %w", topicFilter, err)
		}
	case <-time.After(15 * time.Second):
		return fmt.Errorf("no subscription acknowledgement from %s", mqttURL)
	case <-ctx.Done():
		return nil
	}

	// HTTP
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           (&api{system: system}).routes(),
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
	logger.Printf("%d positions routed, %d malformed payloads", f.positions.Load(), f.malformed.Load())
	return nil
}
