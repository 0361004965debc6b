// Apache Pekko (typed actors, Java API) peer of the troubadour benchmark suite.
//
// Usage: java -cp ... troubadour.peer.Main <workload> [--quick] [--pairs N] [--size B]
//        [--mode kill|leave]   (cluster workloads: see Clustered.java)
// Prints exactly one JSON line on stdout; diagnostics go to stderr.
//
// The JVM runs PEKKO_WARMUPS (default 3) warm-up iterations of the workload
// in the same JVM and actor system first; their times are reported in
// "warmup_ms" and the last iteration is the measured one. The idle workload
// runs no warm-up, because a heap already grown by a warm-up would hide the
// memory that the measured iteration takes.
//
// Configuration: Pekko's defaults (default dispatcher, a fork-join executor,
// default unbounded mailbox, throughput 5) except the dispatcher's
// parallelism, which is pinned to the number of cores (Pekko's default
// parallelism-min is 8).
package troubadour.peer;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.PostStop;
import org.apache.pekko.actor.typed.Props;
import org.apache.pekko.actor.typed.SpawnProtocol;
import org.apache.pekko.actor.typed.javadsl.AbstractBehavior;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.apache.pekko.actor.typed.javadsl.AskPattern;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.javadsl.Receive;
import org.apache.pekko.actor.typed.javadsl.Routers;

public final class Main {

  static final long FACTOR_N = 28350160440309881L;
  static final long FACTOR_LO = 86028157L;
  static final long FACTOR_HI = 329545133L;
  static final Duration LIMIT = Duration.ofMinutes(30);

  static ActorSystem<SpawnProtocol.Command> system;
  static final AtomicLong names = new AtomicLong();
  static int cores;

  // ---------------------------------------------------------------- result

  static final class Res {
    boolean ok;
    Double elapsedMs;
    Double msgsPerSec;
    Double bytesPerActor;
    String error;
    final Map<String, String> extra = new LinkedHashMap<>();

    static Res okTime(double ms) {
      Res r = new Res();
      r.ok = true;
      r.elapsedMs = ms;
      return r;
    }

    static Res okRate(double ms, double msgs) {
      Res r = okTime(ms);
      r.msgsPerSec = msgs / (ms / 1000.0);
      return r;
    }

    static Res fail(double ms, String why) {
      Res r = new Res();
      r.ok = false;
      r.elapsedMs = ms;
      r.error = "verification failed: " + why;
      return r;
    }
  }

  interface Workload {
    Res run() throws Exception;
  }

  // ---------------------------------------------------------------- helpers

  static long procStatusBytes(String key) {
    try {
      for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
        if (line.startsWith(key + ":")) {
          String[] f = line.substring(key.length() + 1).trim().split("\\s+");
          return Long.parseLong(f[0]) * 1024L;
        }
      }
    } catch (IOException | RuntimeException e) {
      System.err.println("cannot read /proc/self/status: " + e);
    }
    return -1;
  }

  static long currentRss() {
    return procStatusBytes("VmRSS");
  }

  static long peakRss() {
    return procStatusBytes("VmHWM");
  }

  static double msSince(long t0) {
    return (System.nanoTime() - t0) / 1e6;
  }

  static String num(Double v) {
    return v == null ? "null" : String.format(Locale.ROOT, "%.3f", v);
  }

  static String jsonStr(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') b.append('\\').append(c);
      else if (c < 32) b.append(' ');
      else b.append(c);
    }
    return b.append('"').toString();
  }

  /** Spawns a top-level actor through the guardian (Pekko's SpawnProtocol). */
  static <T> ActorRef<T> spawn(Behavior<T> behavior) throws Exception {
    String name = "a" + names.incrementAndGet();
    CompletionStage<ActorRef<T>> f =
        AskPattern.ask(
            system,
            replyTo -> new SpawnProtocol.Spawn<>(behavior, name, Props.empty(), replyTo),
            LIMIT,
            system.scheduler());
    return f.toCompletableFuture().get();
  }

  /** Spawns a top-level actor with the given name (found by path remotely). */
  static <T> ActorRef<T> spawnNamed(Behavior<T> behavior, String name) throws Exception {
    CompletionStage<ActorRef<T>> f =
        AskPattern.ask(
            system,
            replyTo -> new SpawnProtocol.Spawn<>(behavior, name, Props.empty(), replyTo),
            LIMIT,
            system.scheduler());
    return f.toCompletableFuture().get();
  }

  /** An actor that completes a future with the first message it gets. */
  static <T> Behavior<T> sink(CompletableFuture<T> future) {
    return Behaviors.receive(
        (ctx, msg) -> {
          future.complete(msg);
          return Behaviors.stopped();
        });
  }

  /** Trial division: 2, then odd d while d*d <= n; what is left (> 1) is prime. */
  static List<Long> factorize(long n) {
    List<Long> f = new ArrayList<>();
    long d = 2;
    while (n > 1) {
      if (d * d > n) {
        f.add(n);
        break;
      }
      if (n % d == 0) {
        f.add(d);
        n /= d;
        continue;
      }
      d = (d == 2) ? 3 : d + 2;
    }
    return f;
  }

  /** Terms k = from .. to-1 of 4 * (-1)^k / (2k + 1). */
  static double leibniz(long from, long to) {
    double s = 0.0;
    for (long k = from; k < to; k++) {
      double t = 4.0 / (double) (2 * k + 1);
      if ((k & 1) == 0) s += t;
      else s -= t;
    }
    return s;
  }

  // ---------------------------------------------------------------- 1 counting
  // The sender is the main thread (ActorRef.tell from outside the system).

  interface CounterMsg {}

  record Add(long n) implements CounterMsg {}

  record GetAndReset(ActorRef<Long> replyTo) implements CounterMsg {}

  record StopCounter() implements CounterMsg {}

  static final class Counter extends AbstractBehavior<CounterMsg> {
    private long total;

    Counter(ActorContext<CounterMsg> ctx) {
      super(ctx);
    }

    @Override
    public Receive<CounterMsg> createReceive() {
      return newReceiveBuilder()
          .onMessage(
              Add.class,
              m -> {
                total += m.n();
                return this;
              })
          .onMessage(
              GetAndReset.class,
              m -> {
                m.replyTo().tell(total);
                total = 0;
                return this;
              })
          .onMessage(StopCounter.class, m -> Behaviors.stopped())
          .build();
    }
  }

  static Res counting(long n) throws Exception {
    ActorRef<CounterMsg> counter = spawn(Behaviors.setup(Counter::new));
    Add add = new Add(100); // messages are immutable; one value is sent n times
    long t0 = System.nanoTime();
    for (long i = 0; i < n; i++) counter.tell(add);
    CompletionStage<Long> reply =
        AskPattern.ask(counter, GetAndReset::new, LIMIT, system.scheduler());
    long got = reply.toCompletableFuture().get();
    double ms = msSince(t0);
    counter.tell(new StopCounter());
    if (got != n * 100) return Res.fail(ms, "reply " + got + ", expected " + n * 100);
    return Res.okRate(ms, n);
  }

  // ---------------------------------------------------------------- 2 pingpong

  interface ClientMsg {}

  record StartPing() implements ClientMsg {}

  record Pong() implements ClientMsg {}

  record Ping(ActorRef<Pong> replyTo) {}

  static final Pong PONG = new Pong();

  static Behavior<Ping> echo() {
    return Behaviors.receiveMessage(
        p -> {
          p.replyTo().tell(PONG);
          return Behaviors.same();
        });
  }

  static final class Client extends AbstractBehavior<ClientMsg> {
    private final ActorRef<Ping> echo;
    private final Ping ping;
    private final long perPair;
    private final int batch;
    private final CompletableFuture<Long> done;
    private long sent, echoed;
    private int inBatch;

    Client(
        ActorContext<ClientMsg> ctx,
        ActorRef<Ping> echo,
        long perPair,
        int batch,
        CompletableFuture<Long> done) {
      super(ctx);
      this.echo = echo;
      this.ping = new Ping(ctx.getSelf().narrow());
      this.perPair = perPair;
      this.batch = batch;
      this.done = done;
    }

    private void sendBatch() {
      int b = (int) Math.min(batch, perPair - sent);
      inBatch = b;
      for (int i = 0; i < b; i++) echo.tell(ping);
      sent += b;
    }

    @Override
    public Receive<ClientMsg> createReceive() {
      return newReceiveBuilder()
          .onMessage(
              StartPing.class,
              m -> {
                sendBatch();
                return this;
              })
          .onMessage(
              Pong.class,
              m -> {
                echoed++;
                if (--inBatch == 0) {
                  if (sent < perPair) {
                    sendBatch();
                  } else {
                    done.complete(echoed);
                    return Behaviors.stopped();
                  }
                }
                return this;
              })
          .build();
    }
  }

  static Res pingpong(int pairs, long perPair, int batch) throws Exception {
    List<ActorRef<ClientMsg>> clients = new ArrayList<>();
    List<CompletableFuture<Long>> dones = new ArrayList<>();
    for (int i = 0; i < pairs; i++) {
      ActorRef<Ping> e = spawn(echo());
      CompletableFuture<Long> done = new CompletableFuture<>();
      dones.add(done);
      clients.add(spawn(Behaviors.setup(ctx -> new Client(ctx, e, perPair, batch, done))));
    }
    long t0 = System.nanoTime();
    for (ActorRef<ClientMsg> c : clients) c.tell(new StartPing());
    boolean allOk = true;
    StringBuilder counts = new StringBuilder();
    for (CompletableFuture<Long> d : dones) {
      long got = d.get();
      counts.append(got).append(' ');
      allOk &= got == perPair;
    }
    double ms = msSince(t0);
    if (!allOk) return Res.fail(ms, "echo counts " + counts + "expected " + perPair + " each");
    Res r = Res.okRate(ms, 2.0 * perPair * pairs);
    r.extra.put("pairs", Integer.toString(pairs));
    return r;
  }

  // ---------------------------------------------------------------- 3 skynet

  record Sum(long v) {}

  static Behavior<Sum> skynode(ActorRef<Sum> parent, long num, long size, long div) {
    return Behaviors.setup(
        ctx -> {
          if (size == 1) {
            parent.tell(new Sum(num));
            return Behaviors.stopped();
          }
          long sub = size / div;
          for (long i = 0; i < div; i++) {
            ctx.spawnAnonymous(skynode(ctx.getSelf(), num + i * sub, sub, div));
          }
          long[] acc = new long[2]; // sum, replies
          return Behaviors.receiveMessage(
              m -> {
                acc[0] += m.v();
                if (++acc[1] == div) {
                  parent.tell(new Sum(acc[0]));
                  return Behaviors.stopped();
                }
                return Behaviors.same();
              });
        });
  }

  static Res skynet(long leaves, long div) throws Exception {
    CompletableFuture<Sum> result = new CompletableFuture<>();
    ActorRef<Sum> sinkRef = spawn(sink(result));
    long t0 = System.nanoTime();
    spawn(skynode(sinkRef, 0, leaves, div));
    long got = result.get().v();
    double ms = msSince(t0);
    long want = leaves * (leaves - 1) / 2;
    if (got != want) return Res.fail(ms, "sum " + got + ", expected " + want);
    return Res.okTime(ms);
  }

  // ---------------------------------------------------------------- 4 fan-in
  // 20 plain Java threads tell the receiver from outside the actor system.

  record FanMsg() {}

  static Behavior<FanMsg> fanReceiver(long target, CompletableFuture<Long> done) {
    return Behaviors.setup(
        ctx -> {
          long[] count = new long[1];
          return Behaviors.receiveMessage(
              m -> {
                if (++count[0] == target) done.complete(count[0]);
                return Behaviors.same();
              });
        });
  }

  static Res fanin(int senders, long n) throws Exception {
    long total = senders * n;
    CompletableFuture<Long> done = new CompletableFuture<>();
    ActorRef<FanMsg> recv = spawn(fanReceiver(total, done));
    CountDownLatch ready = new CountDownLatch(senders);
    CountDownLatch go = new CountDownLatch(1);
    List<Thread> threads = new ArrayList<>();
    for (int s = 0; s < senders; s++) {
      Thread t =
          new Thread(
              () -> {
                FanMsg msg = new FanMsg();
                ready.countDown();
                try {
                  go.await();
                } catch (InterruptedException e) {
                  return;
                }
                for (long i = 0; i < n; i++) recv.tell(msg);
              },
              "fanin-sender-" + s);
      t.start();
      threads.add(t);
    }
    ready.await();
    long t0 = System.nanoTime();
    go.countDown();
    long got = done.get();
    double ms = msSince(t0);
    for (Thread t : threads) t.join();
    if (got != total) return Res.fail(ms, "receiver counted " + got + ", expected " + total);
    Res r = Res.okRate(ms, total);
    r.extra.put("senders", Integer.toString(senders));
    r.extra.put("senders_are", "\"java threads\"");
    return r;
  }

  // ---------------------------------------------------------------- 5 rings

  record Token(long v) {}

  record Calc(long n) {}

  interface CollMsg {}

  record Factors(boolean good) implements CollMsg {}

  record MasterDone() implements CollMsg {}

  record StopWorker() {}

  static Behavior<Token> chainLink(ActorRef<Token> next) {
    return Behaviors.receiveMessage(
        t -> {
          next.tell(t);
          return t.v() == 0 ? Behaviors.stopped() : Behaviors.same();
        });
  }

  static final class Master extends AbstractBehavior<Token> {
    private final ActorRef<Calc> worker;
    private final ActorRef<CollMsg> collector;
    private final int links, rounds;
    private final long token;
    private ActorRef<Token> first;
    private int done;

    Master(
        ActorContext<Token> ctx,
        ActorRef<Calc> worker,
        ActorRef<CollMsg> collector,
        int links,
        long token,
        int rounds) {
      super(ctx);
      this.worker = worker;
      this.collector = collector;
      this.links = links;
      this.token = token;
      this.rounds = rounds;
      startRound();
    }

    private void startRound() {
      worker.tell(new Calc(FACTOR_N));
      ActorRef<Token> next = getContext().getSelf();
      for (int i = 0; i < links; i++) next = getContext().spawnAnonymous(chainLink(next));
      first = next;
      first.tell(new Token(token));
    }

    @Override
    public Receive<Token> createReceive() {
      return newReceiveBuilder()
          .onMessage(
              Token.class,
              t -> {
                if (t.v() > 0) {
                  first.tell(new Token(t.v() - 1));
                  return this;
                }
                if (++done < rounds) {
                  startRound();
                  return this;
                }
                collector.tell(new MasterDone());
                return Behaviors.stopped();
              })
          .build();
    }
  }

  static Behavior<Object> factorWorker(ActorRef<CollMsg> collector) {
    return Behaviors.receive(Object.class)
        .onMessage(
            Calc.class,
            c -> {
              List<Long> f = factorize(c.n());
              boolean good = f.size() == 2 && f.get(0) == FACTOR_LO && f.get(1) == FACTOR_HI;
              collector.tell(new Factors(good));
              return Behaviors.same();
            })
        .onMessage(StopWorker.class, m -> Behaviors.stopped())
        .build();
  }

  static Behavior<CollMsg> collector(int facts, int masters, CompletableFuture<Integer> done) {
    return Behaviors.setup(
        ctx -> {
          int[] st = {facts, masters, 0}; // factorisations left, masters left, bad
          return Behaviors.receive(CollMsg.class)
              .onMessage(
                  Factors.class,
                  f -> {
                    if (!f.good()) st[2]++;
                    st[0]--;
                    return check(st, done);
                  })
              .onMessage(
                  MasterDone.class,
                  m -> {
                    st[1]--;
                    return check(st, done);
                  })
              .build();
        });
  }

  private static Behavior<CollMsg> check(int[] st, CompletableFuture<Integer> done) {
    if (st[0] == 0 && st[1] == 0) {
      done.complete(st[2]);
      return Behaviors.stopped();
    }
    return Behaviors.same();
  }

  static Res rings(int nRings, int links, long token, int rounds) throws Exception {
    CompletableFuture<Integer> done = new CompletableFuture<>();
    long t0 = System.nanoTime();
    ActorRef<CollMsg> coll = spawn(collector(nRings * rounds, nRings, done));
    List<ActorRef<Object>> workers = new ArrayList<>();
    for (int i = 0; i < nRings; i++) {
      ActorRef<Object> w = spawn(factorWorker(coll));
      workers.add(w);
      ActorRef<Calc> wc = w.narrow();
      spawn(Behaviors.<Token>setup(ctx -> new Master(ctx, wc, coll, links, token, rounds)));
    }
    int bad = done.get();
    double ms = msSince(t0);
    for (ActorRef<Object> w : workers) w.tell(new StopWorker());
    double msgs =
        (double) nRings * rounds * (token + 1) * (links + 1) + 2.0 * nRings * rounds + nRings;
    if (bad != 0) return Res.fail(ms, bad + " wrong factorisations");
    Res r = Res.okRate(ms, msgs);
    r.extra.put("messages", Long.toString((long) msgs));
    return r;
  }

  // ---------------------------------------------------------------- 6 idle

  interface SpawnerMsg {}

  record SpawnIdle(long n, CompletableFuture<Long> spawned) implements SpawnerMsg {}

  record StopAll() implements SpawnerMsg {}

  static Behavior<Object> idleActor(AtomicLong started, CountDownLatch stopped) {
    return Behaviors.setup(
        ctx -> {
          started.incrementAndGet();
          return Behaviors.receive(Object.class)
              .onSignal(
                  PostStop.class,
                  s -> {
                    stopped.countDown();
                    return Behaviors.same();
                  })
              .build();
        });
  }

  /** Parent of the idle actors; stopping it stops them all. */
  static Behavior<SpawnerMsg> spawner(AtomicLong started, CountDownLatch stopped) {
    return Behaviors.setup(
        ctx ->
            Behaviors.receive(SpawnerMsg.class)
                .onMessage(
                    SpawnIdle.class,
                    m -> {
                      for (long i = 0; i < m.n(); i++)
                        ctx.spawnAnonymous(idleActor(started, stopped));
                      m.spawned().complete(m.n());
                      return Behaviors.same();
                    })
                .onMessage(StopAll.class, m -> Behaviors.stopped())
                .build());
  }

  static long heapUsed() {
    Runtime rt = Runtime.getRuntime();
    return rt.totalMemory() - rt.freeMemory();
  }

  static void settle() throws InterruptedException {
    System.gc();
    Thread.sleep(200);
  }

  static Res idle(long n) throws Exception {
    AtomicLong started = new AtomicLong();
    CountDownLatch stopped = new CountDownLatch((int) n);
    ActorRef<SpawnerMsg> sp = spawn(spawner(started, stopped));
    settle();
    long before = currentRss();
    long heapBefore = heapUsed();
    long t0 = System.nanoTime();
    CompletableFuture<Long> spawned = new CompletableFuture<>();
    sp.tell(new SpawnIdle(n, spawned));
    spawned.get();
    while (started.get() < n) Thread.sleep(1); // every actor ran its setup and waits
    double ms = msSince(t0);
    settle();
    long after = currentRss();
    long heapAfter = heapUsed();
    sp.tell(new StopAll());
    boolean allStopped = stopped.await(LIMIT.toMillis(), TimeUnit.MILLISECONDS);
    settle();
    long afterStop = currentRss();
    if (started.get() != n || !allStopped)
      return Res.fail(
          ms, "started " + started.get() + " of " + n + ", stopped all: " + allStopped);
    Res r = Res.okTime(ms);
    r.bytesPerActor = (double) (after - before) / n;
    r.extra.put("rss_before_bytes", Long.toString(before));
    r.extra.put("rss_after_spawn_bytes", Long.toString(after));
    r.extra.put("rss_after_stop_bytes", Long.toString(afterStop));
    r.extra.put("heap_bytes_per_actor", num((double) (heapAfter - heapBefore) / n));
    r.extra.put("actors", Long.toString(n));
    return r;
  }

  // ---------------------------------------------------------------- 8 pi
  // A coordinator actor hands the items to a round-robin pool router
  // (Routers.pool) of one worker per core and sums the replies.

  interface CoordMsg {}

  record PiStart() implements CoordMsg {}

  record Part(double v) implements CoordMsg {}

  record Work(long start, long terms, ActorRef<Part> replyTo) {}

  static Behavior<Work> piWorker() {
    return Behaviors.receiveMessage(
        w -> {
          w.replyTo().tell(new Part(leibniz(w.start(), w.start() + w.terms())));
          return Behaviors.same();
        });
  }

  static Behavior<CoordMsg> piCoordinator(
      int workers, long items, long terms, CompletableFuture<Double> done) {
    return Behaviors.setup(
        ctx -> {
          ActorRef<Work> pool =
              ctx.spawn(Routers.pool(workers, piWorker()).withRoundRobinRouting(), "pool");
          double[] sum = {0.0};
          long[] got = {0};
          return Behaviors.receive(CoordMsg.class)
              .onMessage(
                  PiStart.class,
                  m -> {
                    ActorRef<Part> self = ctx.getSelf().narrow();
                    for (long i = 0; i < items; i++) pool.tell(new Work(i * terms, terms, self));
                    return Behaviors.same();
                  })
              .onMessage(
                  Part.class,
                  p -> {
                    sum[0] += p.v();
                    if (++got[0] == items) {
                      done.complete(sum[0]);
                      return Behaviors.stopped();
                    }
                    return Behaviors.same();
                  })
              .build();
        });
  }

  static Res pi(long items, long terms) throws Exception {
    CompletableFuture<Double> done = new CompletableFuture<>();
    ActorRef<CoordMsg> coord = spawn(piCoordinator(cores, items, terms, done));
    long t0 = System.nanoTime();
    coord.tell(new PiStart());
    double sum = done.get();
    double ms = msSince(t0);
    long t1 = System.nanoTime();
    double ref = leibniz(0, items * terms);
    double loopMs = msSince(t1);
    if (Math.abs(sum - ref) > 1e-9)
      return Res.fail(
          ms, String.format(Locale.ROOT, "sum %.15f, single loop %.15f", sum, ref));
    Res r = Res.okTime(ms);
    r.extra.put("plain_loop_ms", num(loopMs));
    r.extra.put("workers", Integer.toString(cores));
    return r;
  }

  // ---------------------------------------------------------------- main

  static Workload select(String w, boolean quick) {
    switch (w) {
      case "counting":
        return () -> counting(quick ? 100_000 : 3_000_000);
      case "pingpong":
        return () -> pingpong(cores * 2, quick ? 10_000 : 1_000_000, 100);
      case "skynet":
        return () -> skynet(quick ? 10_000 : 1_000_000, 10);
      case "fanin":
        return () -> fanin(20, quick ? 10_000 : 1_000_000);
      case "rings":
        return quick ? () -> rings(20, 49, 100, 2) : () -> rings(20, 49, 10_000, 5);
      case "idle":
        return () -> idle(quick ? 10_000 : 1_000_000);
      case "pi":
        return quick ? () -> pi(100, 1000) : () -> pi(1000, 10_000);
      case "remote-pingpong":
        return () -> Remote.remotePingpong(optPairs, optSize, quick ? 5_000 : 200_000, quick ? 1_000 : 20_000);
      case "remote-pi":
        return quick ? () -> Remote.remotePi(100, 1000) : () -> Remote.remotePi(1000, 10_000);
      default:
        return null;
    }
  }

  static void emit(String workload, Res r, List<Double> warmups, int warmupsWanted) {
    StringBuilder b = new StringBuilder("{");
    b.append("\"workload\":").append(jsonStr(workload));
    b.append(",\"impl\":\"pekko\"");
    b.append(",\"ok\":").append(r.ok);
    b.append(",\"elapsed_ms\":").append(num(r.elapsedMs));
    b.append(",\"msgs_per_sec\":").append(num(r.msgsPerSec));
    b.append(",\"peak_rss_bytes\":").append(peakRss());
    b.append(",\"bytes_per_actor\":").append(num(r.bytesPerActor));
    if (r.error != null) b.append(",\"error\":").append(jsonStr(r.error));
    b.append(",\"warmup_ms\":[");
    for (int i = 0; i < warmups.size(); i++) {
      if (i > 0) b.append(',');
      b.append(num(warmups.get(i)));
    }
    b.append(']');
    b.append(",\"warmup_iterations\":").append(warmupsWanted);
    for (Map.Entry<String, String> e : r.extra.entrySet())
      b.append(",").append(jsonStr(e.getKey())).append(':').append(e.getValue());
    b.append(",\"dispatcher_threads\":").append(cores);
    b.append(",\"java_version\":").append(jsonStr(System.getProperty("java.version")));
    b.append(",\"pekko_version\":")
        .append(jsonStr(system == null ? "?" : system.settings().config().getString("pekko.version")));
    b.append('}');
    System.out.println(b);
    System.out.flush();
  }

  // remote-pingpong's --pairs N and --size BYTES (../common.sh checked them)
  static int optPairs = 1, optSize = 16;
  // failover's --mode kill|leave (../common.sh checked it)
  static String optMode = "kill";

  /**
   * Node A of a cluster workload (see Clustered). cluster-virtual warms up
   * its messaging phase only (PEKKO_WARMUPS iterations on the same
   * identities, counted in the check's expected sum); failover has no
   * warm-up (a node can be killed once).
   */
  static void clusterMain(String workload, boolean quick, int warmupsWanted) {
    if (workload.equals("failover")) warmupsWanted = 0;
    List<Double> warmups = new ArrayList<>();
    Res r;
    try {
      r =
          workload.equals("failover")
              ? Clustered.failover(quick, optMode)
              : Clustered.clusterVirtual(quick, warmupsWanted, warmups);
    } catch (Throwable t) {
      t.printStackTrace();
      r = new Res();
      r.error = "exception: " + t;
    }
    emit(workload, r, warmups, warmupsWanted);
    // The result is out; do not wait for a coordinated shutdown. B and C end
    // when their stdin closes (and run kills them by pid).
    Runtime.getRuntime().halt(0);
  }

  public static void main(String[] args) {
    cores = Runtime.getRuntime().availableProcessors();
    if (args.length == 4 && args[0].equals("__cluster")) {
      Clustered.childMain(args[1], args[2], args[3]);
      return;
    }
    if (args.length == 4 && args[0].equals("__persist")) {
      try {
        Persist.main(args[1], Integer.parseInt(args[2]), Long.parseLong(args[3]));
      } catch (Throwable t) {
        t.printStackTrace();
        System.out.println("{\"ok\":false,\"error\":\"" + t.toString().replace('"', '\'') + "\"}");
        Runtime.getRuntime().halt(1);
      }
      return;
    }
    if (args.length == 3 && args[0].equals("__serve")) {
      serveMain(args[1], Integer.parseInt(args[2]));
      return;
    }
    String workload = "?";
    boolean quick = false;
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      if (a.equals("--quick") || a.equals("quick")) quick = true;
      else if (a.equals("--pairs") && i + 1 < args.length) optPairs = Integer.parseInt(args[++i]);
      else if (a.equals("--size") && i + 1 < args.length) optSize = Integer.parseInt(args[++i]);
      else if (a.equals("--mode") && i + 1 < args.length) optMode = args[++i];
      else workload = a;
    }
    int warmupsWanted = 3;
    String env = System.getenv("PEKKO_WARMUPS");
    if (env != null && !env.isBlank()) warmupsWanted = Integer.parseInt(env.trim());
    if (workload.equals("idle")) warmupsWanted = 0;
    if (workload.equals("cluster-virtual") || workload.equals("failover")) {
      clusterMain(workload, quick, warmupsWanted);
      return;
    }

    List<Double> warmups = new ArrayList<>();
    Res r;
    Workload w = select(workload, quick);
    if (w == null) {
      r = new Res();
      r.error = "unknown workload " + workload;
      emit(workload, r, warmups, 0);
      System.exit(0);
    }
    Config config = systemConfig(workload.startsWith("remote-"));
    try {
      system = ActorSystem.create(SpawnProtocol.create(), "troubadour", config);
      r = null;
      for (int i = 0; i < warmupsWanted; i++) {
        Res wr = w.run();
        if (!wr.ok) {
          r = wr;
          r.error = "warm-up iteration " + (i + 1) + ": " + wr.error;
          break;
        }
        warmups.add(wr.elapsedMs);
      }
      if (r == null) r = w.run();
    } catch (Throwable t) {
      t.printStackTrace();
      r = new Res();
      r.error = "exception: " + t;
    }
    emit(workload, r, warmups, warmupsWanted);
    // The result is out; do not wait for a coordinated shutdown.
    Runtime.getRuntime().halt(0);
  }

  static Config systemConfig(boolean remote) {
    return ConfigFactory.parseString(
            (remote ? Remote.config() : "")
                + "pekko.loglevel = WARNING\n"
                + "pekko.stdout-loglevel = OFF\n"
                + "pekko.log-dead-letters = off\n"
                + "pekko.log-dead-letters-during-shutdown = off\n"
                + "pekko.actor.default-dispatcher.fork-join-executor.parallelism-min = "
                + cores
                + "\n"
                + "pekko.actor.default-dispatcher.fork-join-executor.parallelism-max = "
                + cores
                + "\n"
                + "pekko.actor.default-dispatcher.fork-join-executor.parallelism-factor = 1.0\n")
        .withFallback(ConfigFactory.load());
  }

  /** The second process of a remote workload (see Remote). */
  static void serveMain(String workload, int n) {
    try {
      system = ActorSystem.create(SpawnProtocol.create(), "troubadour", systemConfig(true));
      Remote.serve(workload, n);
    } catch (Throwable t) {
      t.printStackTrace();
    }
    Runtime.getRuntime().halt(1);
  }
}
