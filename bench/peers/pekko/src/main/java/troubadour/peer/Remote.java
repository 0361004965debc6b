// Remote workloads of the Pekko peer (9 remote-pingpong, 11 remote-pi).
//
// Transport: Artery over TCP (pekko.remote.artery.transport = tcp) on
// 127.0.0.1, no TLS; the actor provider is "remote" (no cluster). Messages:
// the Jackson serializer Pekko recommends (jackson-cbor, bound to the
// RemoteMsg marker interface); typed ActorRefs in messages are handled by
// pekko-serialization-jackson's typed ActorRef module.
//
// The second process is this program started again with
// `__serve <workload> <n>` (same java, same class path), on a port the OS
// picks (canonical.port = 0). It spawns the echoes ("/user/echo-<i>") or a
// round-robin pool router of one pi worker per core ("/user/pi-workers"),
// prints "ADDR <its address>" on its stdout and halts when its stdin
// closes (so also when the measuring JVM ends). The measuring process
// finds those actors with ActorSelection.resolveOne and adapts them to
// typed refs.
package troubadour.peer;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.javadsl.AbstractBehavior;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.apache.pekko.actor.typed.javadsl.Adapter;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.javadsl.Receive;
import org.apache.pekko.actor.typed.javadsl.Routers;

final class Remote {
  static final String TRANSPORT = "Pekko Artery over TCP (loopback), Jackson CBOR";
  static final Duration WAIT = Duration.ofMinutes(10);

  /** Marker interface bound to Pekko's jackson-cbor serializer. */
  interface RemoteMsg {}

  /** The configuration both processes add for the remote workloads. */
  static String config() {
    return "pekko.actor.provider = remote\n"
        + "pekko.remote.artery.enabled = on\n"
        + "pekko.remote.artery.transport = tcp\n"
        + "pekko.remote.artery.canonical.hostname = \"127.0.0.1\"\n"
        + "pekko.remote.artery.canonical.port = 0\n"
        + "pekko.remote.artery.bind.hostname = \"127.0.0.1\"\n"
        + "pekko.actor.serialization-bindings {\n"
        + "  \"troubadour.peer.Remote$RemoteMsg\" = jackson-cbor\n"
        + "}\n";
  }

  // ---------------------------------------------------------------- second process

  static Process child;
  static String childAddress;

  /** Starts the second process (once per JVM) and waits for its address. */
  static String startChild(String workload, int n) throws Exception {
    if (child != null) return childAddress;
    String java = ProcessHandle.current().info().command().orElse("java");
    List<String> cmd = new ArrayList<>();
    cmd.add(java);
    String opts = System.getenv("PEKKO_JAVA_OPTS");
    if (opts != null && !opts.isBlank()) cmd.addAll(Arrays.asList(opts.trim().split("\\s+")));
    cmd.addAll(
        List.of(
            "-cp",
            System.getProperty("java.class.path"),
            "troubadour.peer.Main",
            "__serve",
            workload,
            Integer.toString(n)));
    ProcessBuilder pb = new ProcessBuilder(cmd);
    pb.redirectError(ProcessBuilder.Redirect.INHERIT);
    child = pb.start();
    String pidfile = System.getenv("PEER_PIDFILE");
    if (pidfile != null && !pidfile.isEmpty()) {
      Files.writeString(
          Path.of(pidfile),
          child.pid() + "\n",
          StandardOpenOption.CREATE,
          StandardOpenOption.APPEND);
    }
    CompletableFuture<String> addr = new CompletableFuture<>();
    Thread reader =
        new Thread(
            () -> {
              try (BufferedReader r =
                  new BufferedReader(
                      new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                  if (line.startsWith("ADDR ") && !addr.isDone()) addr.complete(line.substring(5));
                  else System.err.println(line);
                }
              } catch (IOException e) {
                // the child ended
              }
              addr.completeExceptionally(
                  new IllegalStateException("the second process ended without reporting its address"));
            });
    reader.setDaemon(true);
    reader.start();
    try {
      childAddress = addr.get(120, TimeUnit.SECONDS);
    } catch (Exception e) {
      child.destroyForcibly();
      throw e;
    }
    return childAddress;
  }

  /** main of the second process. */
  static void serve(String workload, int n) throws Exception {
    switch (workload) {
      case "remote-pingpong":
        for (int i = 0; i < n; i++) Main.spawnNamed(echo(), "echo-" + i);
        break;
      case "remote-pi":
        Main.spawnNamed(
            Routers.pool(Main.cores, piWorker()).withRoundRobinRouting(), "pi-workers");
        break;
      default:
        throw new IllegalArgumentException("unknown remote workload " + workload);
    }
    System.out.println("ADDR " + Main.system.address());
    System.out.flush();
    InputStream in = System.in;
    byte[] buf = new byte[256];
    while (in.read(buf) >= 0) {}
    Runtime.getRuntime().halt(0);
  }

  static <T> ActorRef<T> resolve(String path) throws Exception {
    org.apache.pekko.actor.ActorRef classic =
        Adapter.toClassic(Main.system)
            .actorSelection(path)
            .resolveOne(Duration.ofSeconds(60))
            .toCompletableFuture()
            .get();
    return Adapter.toTyped(classic);
  }

  // ---------------------------------------------------------------- 9 remote pingpong

  interface RClientMsg {}

  record RStart() implements RClientMsg {}

  record RPong(byte[] payload) implements RClientMsg, RemoteMsg {}

  record RPing(ActorRef<RPong> replyTo, byte[] payload) implements RemoteMsg {}

  static Behavior<RPing> echo() {
    return Behaviors.receiveMessage(
        p -> {
          p.replyTo().tell(new RPong(p.payload()));
          return Behaviors.same();
        });
  }

  /** As Main.Client, with the payload in the ping. */
  static final class RClient extends AbstractBehavior<RClientMsg> {
    private final ActorRef<RPing> echo;
    private final RPing ping;
    private final long perPair;
    private final int batch;
    private final CompletableFuture<Long> done;
    private long sent, echoed;
    private int inBatch;

    RClient(
        ActorContext<RClientMsg> ctx,
        ActorRef<RPing> echo,
        byte[] payload,
        long perPair,
        int batch,
        CompletableFuture<Long> done) {
      super(ctx);
      this.echo = echo;
      this.ping = new RPing(ctx.getSelf().narrow(), payload);
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
    public Receive<RClientMsg> createReceive() {
      return newReceiveBuilder()
          .onMessage(
              RStart.class,
              m -> {
                sendBatch();
                return this;
              })
          .onMessage(
              RPong.class,
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

  /** n sequential round trips, each timed (System.nanoTime, monotonic). */
  static Behavior<RClientMsg> rttClient(
      ActorRef<RPing> echo, byte[] payload, int n, CompletableFuture<long[]> done) {
    return Behaviors.setup(
        ctx -> {
          RPing ping = new RPing(ctx.getSelf().narrow(), payload);
          long[] rtts = new long[n];
          int[] got = {0};
          long[] t0 = {0};
          return Behaviors.receive(RClientMsg.class)
              .onMessage(
                  RStart.class,
                  m -> {
                    t0[0] = System.nanoTime();
                    echo.tell(ping);
                    return Behaviors.same();
                  })
              .onMessage(
                  RPong.class,
                  m -> {
                    rtts[got[0]++] = System.nanoTime() - t0[0];
                    if (got[0] == n) {
                      done.complete(rtts);
                      return Behaviors.stopped();
                    }
                    t0[0] = System.nanoTime();
                    echo.tell(ping);
                    return Behaviors.same();
                  })
              .build();
        });
  }

  static List<ActorRef<RPing>> echoes;

  static Main.Res remotePingpong(int pairs, int size, long perPair, int rttN) throws Exception {
    String addr = startChild("remote-pingpong", pairs);
    if (echoes == null) {
      echoes = new ArrayList<>();
      for (int i = 0; i < pairs; i++) echoes.add(resolve(addr + "/user/echo-" + i));
    }
    byte[] payload = new byte[size];
    Arrays.fill(payload, (byte) 0xa5);
    List<ActorRef<RClientMsg>> clients = new ArrayList<>();
    List<CompletableFuture<Long>> dones = new ArrayList<>();
    for (int i = 0; i < pairs; i++) {
      CompletableFuture<Long> done = new CompletableFuture<>();
      ActorRef<RPing> echo = echoes.get(i);
      clients.add(
          Main.spawn(Behaviors.setup(ctx -> new RClient(ctx, echo, payload, perPair, 100, done))));
      dones.add(done);
    }
    long t0 = System.nanoTime();
    for (ActorRef<RClientMsg> c : clients) c.tell(new RStart());
    List<Long> counts = new ArrayList<>();
    long deadline = System.nanoTime() + WAIT.toNanos();
    boolean okAll = true;
    for (CompletableFuture<Long> d : dones) {
      try {
        long n = d.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        counts.add(n);
        okAll &= n == perPair;
      } catch (java.util.concurrent.TimeoutException e) {
        okAll = false;
        counts.add(-1L);
      }
    }
    double ms = Main.msSince(t0);
    // phase 2: latency
    CompletableFuture<long[]> rdone = new CompletableFuture<>();
    ActorRef<RClientMsg> rc = Main.spawn(rttClient(echoes.get(0), payload, rttN, rdone));
    rc.tell(new RStart());
    long[] rtts = null;
    try {
      rtts = rdone.get(WAIT.toMillis(), TimeUnit.MILLISECONDS);
    } catch (java.util.concurrent.TimeoutException e) {
      // reported below
    }
    Main.Res r;
    if (!okAll) r = Main.Res.fail(ms, "echo counts " + counts + ", expected " + perPair + " each");
    else if (rtts == null) r = Main.Res.fail(ms, "latency phase did not finish");
    else r = Main.Res.okRate(ms, 2.0 * perPair * pairs);
    r.extra.put("pairs", Integer.toString(pairs));
    r.extra.put("size_bytes", Integer.toString(size));
    r.extra.put("echoes_per_pair", Long.toString(perPair));
    if (rtts != null) {
      long[] kept = Arrays.copyOfRange(rtts, rttN / 10, rttN);
      Arrays.sort(kept);
      r.extra.put("rtt_p50_us", Main.num(rank(kept, 0.50) / 1000.0));
      r.extra.put("rtt_p99_us", Main.num(rank(kept, 0.99) / 1000.0));
      r.extra.put("rtt_samples", Integer.toString(kept.length));
    } else {
      r.extra.put("rtt_p50_us", "null");
      r.extra.put("rtt_p99_us", "null");
    }
    r.extra.put("tls", "false");
    r.extra.put("transport", Main.jsonStr(TRANSPORT));
    return r;
  }

  /** nearest rank: the ceil(p * n)-th smallest value */
  static double rank(long[] sorted, double p) {
    int k = (int) Math.ceil(p * sorted.length);
    k = Math.max(1, Math.min(sorted.length, k));
    return sorted[k - 1];
  }

  // ---------------------------------------------------------------- 11 remote pi

  interface RCoordMsg {}

  record RPiStart() implements RCoordMsg {}

  record RPart(double v) implements RCoordMsg, RemoteMsg {}

  record RWork(long start, long terms, ActorRef<RPart> replyTo) implements RemoteMsg {}

  static Behavior<RWork> piWorker() {
    return Behaviors.receiveMessage(
        w -> {
          w.replyTo().tell(new RPart(Main.leibniz(w.start(), w.start() + w.terms())));
          return Behaviors.same();
        });
  }

  static Behavior<RCoordMsg> piCoordinator(
      ActorRef<RWork> pool, long items, long terms, CompletableFuture<Double> done) {
    return Behaviors.setup(
        ctx -> {
          double[] sum = {0.0};
          long[] got = {0};
          return Behaviors.receive(RCoordMsg.class)
              .onMessage(
                  RPiStart.class,
                  m -> {
                    ActorRef<RPart> self = ctx.getSelf().narrow();
                    for (long i = 0; i < items; i++) pool.tell(new RWork(i * terms, terms, self));
                    return Behaviors.same();
                  })
              .onMessage(
                  RPart.class,
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

  static ActorRef<RWork> pool;

  static Main.Res remotePi(long items, long terms) throws Exception {
    String addr = startChild("remote-pi", 0);
    if (pool == null) pool = resolve(addr + "/user/pi-workers");
    CompletableFuture<Double> done = new CompletableFuture<>();
    ActorRef<RCoordMsg> coord = Main.spawn(piCoordinator(pool, items, terms, done));
    long t0 = System.nanoTime();
    coord.tell(new RPiStart());
    double sum;
    try {
      sum = done.get(WAIT.toMillis(), TimeUnit.MILLISECONDS);
    } catch (java.util.concurrent.TimeoutException e) {
      return Main.Res.fail(Main.msSince(t0), "no complete sum within " + WAIT);
    }
    double ms = Main.msSince(t0);
    long t1 = System.nanoTime();
    double ref = Main.leibniz(0, items * terms);
    double loopMs = Main.msSince(t1);
    Main.Res r =
        Math.abs(sum - ref) > 1e-9
            ? Main.Res.fail(
                ms, String.format(Locale.ROOT, "sum %.15f, single loop %.15f", sum, ref))
            : Main.Res.okRate(ms, 2.0 * items);
    r.extra.put("plain_loop_ms", Main.num(loopMs));
    r.extra.put("workers", Integer.toString(Main.cores));
    r.extra.put("items", Long.toString(items));
    r.extra.put("terms", Long.toString(terms));
    r.extra.put("tls", "false");
    r.extra.put("transport", Main.jsonStr(TRANSPORT));
    return r;
  }
}
