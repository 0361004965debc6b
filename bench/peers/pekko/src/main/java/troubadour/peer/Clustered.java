// Cluster workloads of the Pekko peer (12 cluster-virtual, 13 failover),
// on Pekko Cluster Sharding (typed, Java DSL).
//
// Three JVMs: node A (the process `run` starts; it measures and prints the
// line) on 127.0.0.1, nodes B and C (this program started again with
// `__cluster <workload> <B|C> <host>`) on 127.0.0.2 and 127.0.0.3. Each is a
// cluster node (pekko.actor.provider = cluster) with Artery TCP on a port the
// OS picks (canonical.port = 0); once all three are up, A hands every node
// the seed-node list [A, B, C] and each joins it with JoinSeedNodes (Pekko's
// programmatic form of the seed-nodes setting, needed here because the ports
// are only known after start-up). Failure detection, downing, sharding and
// allocation are Pekko's documented defaults, plus the Split Brain Resolver
// that the docs recommend as downing provider (its defaults: keep-majority,
// stable-after 20 s). One setting is changed: automatic passivation is off
// (strategy = none), because the counters keep their state in memory only
// and the default idle strategy would stop (and so reset) every entity idle
// for 120 s.
//
// The entity is Counter, identities "counter-<i>"; messages (Jackson CBOR,
// bound to the ClusterMsg marker interface) go through EntityRef.tell /
// EntityRef.ask, which wrap them in ShardingEnvelopes for the local shard
// region. Control traffic A <-> B/C goes over the children's stdin/stdout:
// A writes commands on a child's stdin; a child answers with lines starting
// with "@@ " on its stdout (anything else it prints goes to A's stderr).
package troubadour.peer;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.IntFunction;
import org.apache.pekko.actor.Address;
import org.apache.pekko.actor.AddressFromURIString;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.SpawnProtocol;
import org.apache.pekko.actor.typed.javadsl.AskPattern;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.cluster.Member;
import org.apache.pekko.cluster.MemberStatus;
import org.apache.pekko.cluster.sharding.ShardRegion;
import org.apache.pekko.cluster.sharding.typed.GetClusterShardingStats;
import org.apache.pekko.cluster.sharding.typed.javadsl.ClusterSharding;
import org.apache.pekko.cluster.sharding.typed.javadsl.Entity;
import org.apache.pekko.cluster.sharding.typed.javadsl.EntityRef;
import org.apache.pekko.cluster.sharding.typed.javadsl.EntityTypeKey;
import org.apache.pekko.cluster.typed.Cluster;
import org.apache.pekko.cluster.typed.JoinSeedNodes;
import org.apache.pekko.cluster.typed.Leave;

final class Clustered {
  static final String TRANSPORT = "Pekko Artery over TCP (loopback), Jackson CBOR";
  static final String[] NODES = {"A", "B", "C"};
  static final String[] HOSTS = {"127.0.0.1", "127.0.0.2", "127.0.0.3"};
  static final int IN_FLIGHT = 100;
  static final Duration VIRTUAL_ASK = Duration.ofSeconds(5);
  static final Duration FAILOVER_ASK = Duration.ofSeconds(1);
  static final long FAILOVER_LIMIT_NS = TimeUnit.SECONDS.toNanos(180);
  static final long CHILD_WAIT_MS = TimeUnit.MINUTES.toMillis(10);

  /** This JVM's node name (A, B or C), reported by every reply. */
  static String node = "?";

  // ---------------------------------------------------------------- the entity

  /** Marker interface bound to Pekko's jackson-cbor serializer. */
  interface ClusterMsg {}

  interface CounterCmd extends ClusterMsg {}

  /** Told (replyTo == null): count += n. Asked: count += n, reply Added. */
  record Add(long n, ActorRef<Added> replyTo) implements CounterCmd {}

  record Get(ActorRef<Value> replyTo) implements CounterCmd {}

  record Added(long count, String node, long activation) implements ClusterMsg {}

  record Value(long count, String node, long activation) implements ClusterMsg {}

  static final EntityTypeKey<CounterCmd> TYPE_KEY =
      EntityTypeKey.create(CounterCmd.class, "Counter");

  static final Add ADD_ONE = new Add(1, null); // the told Add{1}, one immutable value

  static final class Counter {
    static Behavior<CounterCmd> create(String entityId) {
      return Behaviors.setup(
          ctx -> {
            final long activation = ThreadLocalRandom.current().nextLong();
            final long[] count = {0};
            return Behaviors.receive(CounterCmd.class)
                .onMessage(
                    Add.class,
                    m -> {
                      count[0] += m.n();
                      if (m.replyTo() != null)
                        m.replyTo().tell(new Added(count[0], node, activation));
                      return Behaviors.same();
                    })
                .onMessage(
                    Get.class,
                    m -> {
                      m.replyTo().tell(new Value(count[0], node, activation));
                      return Behaviors.same();
                    })
                .build();
          });
    }
  }

  static String id(int i) {
    return "counter-" + i;
  }

  static EntityRef<CounterCmd> ref(int i) {
    return ClusterSharding.get(Main.system).entityRefFor(TYPE_KEY, id(i));
  }

  // ---------------------------------------------------------------- node start-up

  static String clusterConfig(String host) {
    return "pekko.actor.provider = cluster\n"
        + "pekko.remote.artery.enabled = on\n"
        + "pekko.remote.artery.transport = tcp\n"
        + "pekko.remote.artery.canonical.hostname = \""
        + host
        + "\"\n"
        + "pekko.remote.artery.canonical.port = 0\n"
        + "pekko.remote.artery.bind.hostname = \""
        + host
        + "\"\n"
        // the downing provider the Pekko docs recommend (default: none)
        + "pekko.cluster.downing-provider-class ="
        + " \"org.apache.pekko.cluster.sbr.SplitBrainResolverProvider\"\n"
        // counters keep their state in memory only: no automatic passivation
        + "pekko.cluster.sharding.passivation.strategy = none\n"
        + "pekko.actor.serialization-bindings {\n"
        + "  \"troubadour.peer.Clustered$ClusterMsg\" = jackson-cbor\n"
        + "}\n";
  }

  static void startNode(String name, String host) {
    node = name;
    Config config = ConfigFactory.parseString(clusterConfig(host)).withFallback(Main.systemConfig(false));
    Main.system = ActorSystem.create(SpawnProtocol.create(), "troubadour", config);
    ClusterSharding.get(Main.system)
        .init(Entity.of(TYPE_KEY, ctx -> Counter.create(ctx.getEntityId())));
  }

  static Address selfAddress() {
    return Cluster.get(Main.system).selfMember().address();
  }

  static void joinSeeds(List<String> seeds) {
    List<Address> list = new ArrayList<>();
    for (String s : seeds) list.add(AddressFromURIString.parse(s));
    Cluster.get(Main.system).manager().tell(new JoinSeedNodes(list));
  }

  /** The settings that decide placement (for the line's "settings"). */
  static String settings() {
    Config c = Main.system.settings().config();
    int shards = c.getInt("pekko.cluster.sharding.number-of-shards");
    return String.format(
        Locale.ROOT,
        "provider=cluster, Artery TCP, seed nodes A,B,C (JoinSeedNodes); downing: Split Brain"
            + " Resolver %s, stable-after %s (enabled as the docs recommend; Pekko's default"
            + " downing provider is none); phi accrual failure detector (heartbeat %s, threshold"
            + " %s, acceptable pause %s); sharding: %d shards%s, least-shard allocation"
            + " (rebalance-threshold %d, max-simultaneous-rebalance %d), state-store-mode %s,"
            + " remember-entities %s; changed: passivation strategy none (default: idle entities"
            + " stopped after %s)",
        c.getString("pekko.cluster.split-brain-resolver.active-strategy"),
        c.getString("pekko.cluster.split-brain-resolver.stable-after"),
        c.getString("pekko.cluster.failure-detector.heartbeat-interval"),
        c.getString("pekko.cluster.failure-detector.threshold"),
        c.getString("pekko.cluster.failure-detector.acceptable-heartbeat-pause"),
        shards,
        shards == 1000 ? " (default)" : " (CHANGED from the default 1000)",
        c.getInt("pekko.cluster.sharding.least-shard-allocation-strategy.rebalance-threshold"),
        c.getInt(
            "pekko.cluster.sharding.least-shard-allocation-strategy.max-simultaneous-rebalance"),
        c.getString("pekko.cluster.sharding.state-store-mode"),
        c.getString("pekko.cluster.sharding.remember-entities"),
        c.getString("pekko.cluster.sharding.passivation.default-idle-strategy.idle-entity.timeout"));
  }

  /** The settings that decide the failover time (for "failure_detection"). */
  static String failureDetection() {
    Config c = Main.system.settings().config();
    String margin = c.getString("pekko.cluster.down-removal-margin");
    return String.format(
        Locale.ROOT,
        "phi accrual (Pekko defaults): heartbeat-interval %s, threshold %s, acceptable-heartbeat-pause"
            + " %s, min-std-deviation %s; downing: Split Brain Resolver (enabled; Pekko's default is"
            + " no downing) %s, stable-after %s, down-all-when-unstable %s; down-removal-margin %s"
            + " (so SBR's stable-after); no lease; sharding handoff-timeout %s, retry-interval %s",
        c.getString("pekko.cluster.failure-detector.heartbeat-interval"),
        c.getString("pekko.cluster.failure-detector.threshold"),
        c.getString("pekko.cluster.failure-detector.acceptable-heartbeat-pause"),
        c.getString("pekko.cluster.failure-detector.min-std-deviation"),
        c.getString("pekko.cluster.split-brain-resolver.active-strategy"),
        c.getString("pekko.cluster.split-brain-resolver.stable-after"),
        c.getString("pekko.cluster.split-brain-resolver.down-all-when-unstable"),
        margin,
        c.getString("pekko.cluster.sharding.handoff-timeout"),
        c.getString("pekko.cluster.sharding.retry-interval"));
  }

  // ---------------------------------------------------------------- async helpers

  /** An exception in one short phrase (CompletionException unwrapped, Pekko's hint cut). */
  static String brief(Throwable e) {
    while (e instanceof java.util.concurrent.CompletionException && e.getCause() != null)
      e = e.getCause();
    String m = String.valueOf(e.getMessage());
    int cut = m.indexOf(". A typical reason");
    if (cut > 0) m = m.substring(0, cut);
    return e.getClass().getSimpleName() + ": " + m;
  }

  /** Failures of a batch of asks: how many, and the first one. */
  static final class Failures {
    final AtomicLong count = new AtomicLong();
    volatile String first;

    void add(Throwable e) {
      if (count.incrementAndGet() == 1) first = brief(e);
    }

    String describe(String what) {
      return count.get() + " " + what + " asks failed or timed out (first: " + first + ")";
    }
  }

  /**
   * Runs op for every item with at most inFlight of them outstanding; the
   * future completes when all have completed (failures go to failures).
   */
  static CompletableFuture<Void> window(
      int inFlight, int[] items, IntFunction<CompletionStage<?>> op, Failures failures) {
    CompletableFuture<Void> all = new CompletableFuture<>();
    AtomicInteger next = new AtomicInteger();
    int workers = Math.max(1, Math.min(inFlight, items.length));
    AtomicInteger live = new AtomicInteger(workers);
    for (int w = 0; w < workers; w++) windowStep(items, op, failures, next, live, all);
    return all;
  }

  private static void windowStep(
      int[] items,
      IntFunction<CompletionStage<?>> op,
      Failures failures,
      AtomicInteger next,
      AtomicInteger live,
      CompletableFuture<Void> all) {
    int k = next.getAndIncrement();
    if (k >= items.length) {
      if (live.decrementAndGet() == 0) all.complete(null);
      return;
    }
    CompletionStage<?> s;
    try {
      s = op.apply(items[k]);
    } catch (Throwable e) {
      s = CompletableFuture.failedFuture(e);
    }
    s.whenComplete(
        (v, e) -> {
          if (e != null) failures.add(e);
          windowStep(items, op, failures, next, live, all);
        });
  }

  static int[] residues(int k, int n) {
    int[] out = new int[(n - k + 2) / 3];
    int j = 0;
    for (int i = k; i < n; i += 3) out[j++] = i;
    return Arrays.copyOf(out, j);
  }

  static int[] range(int n) {
    int[] out = new int[n];
    for (int i = 0; i < n; i++) out[i] = i;
    return out;
  }

  static int nodeIndex(String name) {
    return Arrays.asList(NODES).indexOf(name);
  }

  // ---------------------------------------------------------------- 12 phases (every node)

  /** Activation: ask Add{1} of every identity i with i mod 3 == k. */
  static Failures activate(int k, int n) throws Exception {
    Failures f = new Failures();
    AtomicInteger ok = new AtomicInteger();
    int[] ids = residues(k, n);
    long t0 = System.nanoTime();
    CompletableFuture<Void> all =
        window(
            IN_FLIGHT,
            ids,
            i -> ref(i).<Added>ask(r -> new Add(1, r), VIRTUAL_ASK).thenRun(ok::incrementAndGet),
            f);
    // progress on stderr every 2 s (the shards are allocated as their first messages arrive)
    while (true) {
      try {
        all.get(2, TimeUnit.SECONDS);
        break;
      } catch (java.util.concurrent.TimeoutException e) {
        if (System.nanoTime() - t0 > TimeUnit.MILLISECONDS.toNanos(CHILD_WAIT_MS)) throw e;
        System.err.println(
            "node " + node + " activation: " + ok.get() + "/" + ids.length + " acknowledged, "
                + f.count.get() + " failed after " + Main.num(Main.msSince(t0)) + " ms");
      }
    }
    return f;
  }

  static final class Messaging {
    final Failures failures = new Failures();
    long[] latNs;
    int samples;
  }

  /** Messaging: clients concurrently, rounds of 9 told Add{1} + 1 asked Add{1}. */
  static Messaging messaging(int k, int iter, int n, int clients, int rounds) throws Exception {
    Messaging m = new Messaging();
    m.latNs = new long[clients * rounds];
    AtomicInteger slot = new AtomicInteger();
    CountDownLatch done = new CountDownLatch(clients);
    ClusterSharding sharding = ClusterSharding.get(Main.system);
    for (int c = 0; c < clients; c++) {
      long seed = 0x5eed_0000_0000L + ((long) iter << 24) + ((long) k << 16) + c;
      new MsgClient(sharding, new SplittableRandom(seed), n, rounds, m, slot, done).round();
    }
    if (!done.await(CHILD_WAIT_MS, TimeUnit.MILLISECONDS))
      throw new IllegalStateException("messaging clients did not finish");
    m.samples = slot.get();
    return m;
  }

  static final class MsgClient {
    final ClusterSharding sharding;
    final SplittableRandom rnd;
    final int n;
    int left;
    final Messaging m;
    final AtomicInteger slot;
    final CountDownLatch done;

    MsgClient(
        ClusterSharding sharding,
        SplittableRandom rnd,
        int n,
        int rounds,
        Messaging m,
        AtomicInteger slot,
        CountDownLatch done) {
      this.sharding = sharding;
      this.rnd = rnd;
      this.n = n;
      this.left = rounds;
      this.m = m;
      this.slot = slot;
      this.done = done;
    }

    void round() {
      if (left-- == 0) {
        done.countDown();
        return;
      }
      EntityRef<CounterCmd> ref = sharding.entityRefFor(TYPE_KEY, id(rnd.nextInt(n)));
      for (int j = 0; j < 9; j++) ref.tell(ADD_ONE);
      long t = System.nanoTime();
      ref.<Added>ask(r -> new Add(1, r), VIRTUAL_ASK)
          .whenComplete(
              (v, e) -> {
                long d = System.nanoTime() - t;
                if (e != null) m.failures.add(e);
                else m.latNs[slot.getAndIncrement()] = d;
                round();
              });
    }
  }

  // ---------------------------------------------------------------- child processes (B, C)

  record Line(long at, String text) {}

  static final Line EOF = new Line(0, null);

  static final class Child {
    final String name;
    final Process proc;
    final BufferedWriter in;
    final BlockingQueue<Line> lines = new LinkedBlockingQueue<>();

    Child(String name, Process proc) {
      this.name = name;
      this.proc = proc;
      this.in =
          new BufferedWriter(new OutputStreamWriter(proc.getOutputStream(), StandardCharsets.UTF_8));
      Thread reader =
          new Thread(
              () -> {
                try (BufferedReader r =
                    new BufferedReader(
                        new InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8))) {
                  String l;
                  while ((l = r.readLine()) != null) {
                    long at = System.nanoTime();
                    if (l.startsWith("@@ ")) lines.add(new Line(at, l.substring(3)));
                    else System.err.println("[" + name + "] " + l);
                  }
                } catch (IOException e) {
                  // the child ended
                }
                lines.add(EOF);
              },
              "child-reader-" + name);
      reader.setDaemon(true);
      reader.start();
    }

    static Child start(String workload, int k) throws IOException {
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
              "__cluster",
              workload,
              NODES[k],
              HOSTS[k]));
      ProcessBuilder pb = new ProcessBuilder(cmd);
      pb.redirectError(ProcessBuilder.Redirect.INHERIT);
      Process p = pb.start();
      String pidfile = System.getenv("PEER_PIDFILE");
      if (pidfile != null && !pidfile.isEmpty()) {
        Files.writeString(
            Path.of(pidfile), p.pid() + "\n", StandardOpenOption.CREATE, StandardOpenOption.APPEND);
      }
      return new Child(NODES[k], p);
    }

    void send(String cmd) throws IOException {
      in.write(cmd);
      in.newLine();
      in.flush();
    }

    /** The next line of the child that starts with prefix (others are skipped). */
    Line expect(String prefix, long timeoutMs) throws Exception {
      long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
      while (true) {
        long left = deadline - System.nanoTime();
        Line l = left > 0 ? lines.poll(left, TimeUnit.NANOSECONDS) : null;
        if (l == null)
          throw new IllegalStateException(
              "node " + name + " did not answer '" + prefix + "' within " + timeoutMs + " ms");
        if (l == EOF) {
          lines.add(EOF);
          throw new IllegalStateException(
              "node " + name + " ended while waiting for '" + prefix + "'");
        }
        if (l.text().startsWith(prefix)) return l;
        System.err.println("[" + name + "] unexpected: " + l.text());
      }
    }
  }

  static void say(String line) {
    synchronized (System.out) {
      System.out.println("@@ " + line);
      System.out.flush();
    }
  }

  /** main of nodes B and C. */
  static void childMain(String workload, String name, String host) {
    try {
      startNode(name, host);
      Main.system
          .getWhenTerminated()
          .thenRun(
              () -> {
                System.err.println("node " + name + ": actor system terminated");
                Runtime.getRuntime().halt(0);
              });
      int k = nodeIndex(name);
      say("ADDR " + selfAddress());
      BufferedReader in =
          new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      String line;
      while ((line = in.readLine()) != null) {
        String[] f = line.trim().split("\\s+");
        switch (f[0]) {
          case "JOIN":
            joinSeeds(Arrays.asList(f).subList(1, f.length));
            break;
          case "ACT":
            {
              Failures fl = activate(k, Integer.parseInt(f[1]));
              say("DONE act " + fl.count.get() + " " + (fl.first == null ? "-" : fl.first));
              break;
            }
          case "MSG":
            {
              Messaging m =
                  messaging(
                      k,
                      Integer.parseInt(f[1]),
                      Integer.parseInt(f[2]),
                      Integer.parseInt(f[3]),
                      Integer.parseInt(f[4]));
              long fails = m.failures.count.get();
              say("DONE msg " + fails + " " + (m.failures.first == null ? "-" : m.failures.first));
              StringBuilder b = new StringBuilder("LAT");
              for (int i = 0; i < m.samples; i++) b.append(i == 0 ? ' ' : ',').append(m.latNs[i]);
              say(b.toString());
              break;
            }
          case "LEAVE":
            // graceful leave, the documented way: the shard region hands its
            // shards off while the member is Leaving/Exiting
            Cluster.get(Main.system).manager().tell(Leave.create(selfAddress()));
            break;
          default:
            System.err.println("node " + name + ": unknown command " + line);
        }
      }
    } catch (Throwable t) {
      t.printStackTrace();
      Runtime.getRuntime().halt(1);
    }
    Runtime.getRuntime().halt(0); // stdin closed: node A is done
  }

  // ---------------------------------------------------------------- node A

  static Child[] children = new Child[3];

  /** Starts A, B and C and forms the cluster; returns join_ms. */
  static double formCluster(String workload) throws Exception {
    startNode("A", HOSTS[0]);
    for (int k = 1; k <= 2; k++) children[k] = Child.start(workload, k);
    List<String> seeds = new ArrayList<>();
    seeds.add(selfAddress().toString());
    for (int k = 1; k <= 2; k++) {
      String t = children[k].expect("ADDR ", CHILD_WAIT_MS).text();
      seeds.add(t.substring(5).trim());
    }
    System.err.println("seed nodes: " + seeds);
    long t0 = System.nanoTime();
    for (int k = 1; k <= 2; k++) children[k].send("JOIN " + String.join(" ", seeds));
    joinSeeds(seeds);
    long deadline = t0 + TimeUnit.MINUTES.toNanos(2);
    // 1. three members Up
    while (true) {
      int up = 0;
      for (Member m : Cluster.get(Main.system).state().getMembers())
        if (m.status().equals(MemberStatus.up())) up++;
      if (up == 3) break;
      if (System.nanoTime() > deadline)
        throw new IllegalStateException("the cluster did not reach 3 Up members within 2 min");
      Thread.sleep(20);
    }
    // 2. sharding ready: the coordinator answers and knows the shard regions of all three nodes
    while (true) {
      int regions = -1;
      try {
        CompletionStage<ShardRegion.ClusterShardingStats> s =
            AskPattern.ask(
                ClusterSharding.get(Main.system).shardState(),
                replyTo -> new GetClusterShardingStats(TYPE_KEY, Duration.ofSeconds(3), replyTo),
                Duration.ofSeconds(10),
                Main.system.scheduler());
        regions = s.toCompletableFuture().get().getRegions().size();
      } catch (Exception e) {
        System.err.println("sharding stats: " + e);
      }
      if (regions == 3) break;
      if (System.nanoTime() > deadline)
        throw new IllegalStateException(
            "sharding did not report the regions of 3 nodes within 2 min (last: " + regions + ")");
      Thread.sleep(50);
    }
    return Main.msSince(t0);
  }

  // ---------------------------------------------------------------- 12 cluster-virtual

  static Main.Res clusterVirtual(boolean quick, int warmupsWanted, List<Double> warmups)
      throws Exception {
    int n = quick ? 10_000 : 100_000;
    int clients = quick ? 10 : 100;
    int rounds = quick ? 20 : 200;
    double joinMs = formCluster("cluster-virtual");
    System.err.println("cluster formed in " + Main.num(joinMs) + " ms");

    // 2. activation
    long ta = System.nanoTime();
    for (int k = 1; k <= 2; k++) children[k].send("ACT " + n);
    Failures actA = activate(0, n);
    long end = System.nanoTime();
    List<String> errors = new ArrayList<>();
    if (actA.count.get() > 0) errors.add("activation on A: " + actA.describe("Add"));
    for (int k = 1; k <= 2; k++) {
      Line l = children[k].expect("DONE act ", CHILD_WAIT_MS);
      end = Math.max(end, l.at());
      String[] f = l.text().split(" ", 4);
      if (!f[2].equals("0"))
        errors.add("activation on " + NODES[k] + ": " + f[2] + " Add asks failed or timed out (first: " + f[3] + ")");
    }
    double actMs = (end - ta) / 1e6;
    System.err.println("activation: " + Main.num(actMs) + " ms");

    // 3. messaging: warm-ups (same size, same identities), then the measured one
    long perIter = 3L * clients * rounds * 10;
    double msgMs = 0;
    long[] lat = null;
    int iterations = warmupsWanted + 1;
    int done = 0;
    for (int it = 0; it < iterations; it++) {
      long t0 = System.nanoTime();
      for (int k = 1; k <= 2; k++)
        children[k].send("MSG " + it + " " + n + " " + clients + " " + rounds);
      Messaging mA = messaging(0, it, n, clients, rounds);
      long e = System.nanoTime();
      List<long[]> all = new ArrayList<>();
      all.add(Arrays.copyOf(mA.latNs, mA.samples));
      String pre = it < warmupsWanted ? "warm-up iteration " + (it + 1) + ": " : "";
      if (mA.failures.count.get() > 0)
        errors.add(pre + "messaging on A: " + mA.failures.describe("Add"));
      for (int k = 1; k <= 2; k++) {
        Line d = children[k].expect("DONE msg ", CHILD_WAIT_MS);
        e = Math.max(e, d.at());
        String[] f = d.text().split(" ", 4);
        if (!f[2].equals("0"))
          errors.add(
              pre + "messaging on " + NODES[k] + ": " + f[2] + " Add asks failed or timed out (first: " + f[3] + ")");
        String ls = children[k].expect("LAT", CHILD_WAIT_MS).text();
        String body = ls.length() > 4 ? ls.substring(4) : "";
        all.add(
            body.isEmpty()
                ? new long[0]
                : Arrays.stream(body.split(",")).mapToLong(Long::parseLong).toArray());
      }
      double ms = (e - t0) / 1e6;
      done++;
      if (it < warmupsWanted) {
        warmups.add(ms);
        System.err.println("messaging warm-up " + (it + 1) + ": " + Main.num(ms) + " ms");
      } else {
        msgMs = ms;
        int total = 0;
        for (long[] a : all) total += a.length;
        lat = new long[total];
        int o = 0;
        for (long[] a : all) {
          System.arraycopy(a, 0, lat, o, a.length);
          o += a.length;
        }
        Arrays.sort(lat);
      }
    }

    // 4. check: Get of every identity, 100 in flight
    long expected = n + (long) done * perIter;
    AtomicLong sum = new AtomicLong();
    Failures getF = new Failures();
    window(
            IN_FLIGHT,
            range(n),
            i -> ref(i).<Value>ask(Get::new, VIRTUAL_ASK).thenAccept(v -> sum.addAndGet(v.count())),
            getF)
        .get(CHILD_WAIT_MS, TimeUnit.MILLISECONDS);
    if (getF.count.get() > 0) errors.add("check: " + getF.describe("Get"));
    else if (sum.get() != expected)
      errors.add(
          String.format(
              Locale.ROOT,
              "sum %,d, expected %,d (%,d activations + %d iterations x %,d)",
              sum.get(),
              expected,
              n,
              done,
              perIter));

    Main.Res r;
    if (errors.isEmpty()) {
      r = Main.Res.okRate(msgMs, perIter);
    } else {
      r = new Main.Res();
      r.ok = false;
      r.elapsedMs = lat == null ? null : Double.valueOf(msgMs);
      r.msgsPerSec = null;
      r.error = "verification failed: " + String.join("; ", errors);
    }
    r.extra.put("activation_ms", Main.num(actMs));
    r.extra.put("activations_per_sec", Main.num(n / (actMs / 1000.0)));
    if (lat != null && lat.length > 0) {
      r.extra.put("ask_p50_us", Main.num(Remote.rank(lat, 0.50) / 1000.0));
      r.extra.put("ask_p99_us", Main.num(Remote.rank(lat, 0.99) / 1000.0));
    } else {
      r.extra.put("ask_p50_us", "null");
      r.extra.put("ask_p99_us", "null");
    }
    r.extra.put("ask_samples", Integer.toString(lat == null ? 0 : lat.length));
    r.extra.put("identities", Integer.toString(n));
    r.extra.put("clients_per_node", Integer.toString(clients));
    r.extra.put("rounds_per_client", Integer.toString(rounds));
    r.extra.put("messages", Long.toString(perIter));
    r.extra.put("check_sum", Long.toString(sum.get()));
    r.extra.put("check_expected", Long.toString(expected));
    r.extra.put("nodes", "3");
    r.extra.put("join_ms", Main.num(joinMs));
    r.extra.put("transport", Main.jsonStr(TRANSPORT));
    r.extra.put("settings", Main.jsonStr(settings()));
    return r;
  }

  // ---------------------------------------------------------------- 13 failover

  /** What A learnt about one identity from its acknowledged Adds. */
  static final class Prober {
    final int i;
    final EntityRef<CounterCmd> ref;
    boolean affected;
    final Map<Long, long[]> acks = new HashMap<>(); // activation -> {acknowledged Adds}
    final Map<Long, String> actNode = new HashMap<>(); // activation -> node
    long firstOther; // nanoTime of the first reply from A or B at or after t0 (0: none yet)

    Prober(int i) {
      this.i = i;
      this.ref = ref(i);
    }

    void record(Added a, long at) {
      acks.computeIfAbsent(a.activation(), x -> new long[1])[0]++;
      actNode.putIfAbsent(a.activation(), a.node());
      long t0 = failT0;
      if (affected && firstOther == 0 && t0 != 0 && at >= t0 && !a.node().equals("C")) {
        firstOther = at;
        recovered.incrementAndGet();
      }
    }

    void probe() {
      if (stopProbing) {
        probersDone.countDown();
        return;
      }
      ref.<Added>ask(r -> new Add(1, r), FAILOVER_ASK)
          .whenComplete(
              (v, e) -> {
                long at = System.nanoTime();
                if (e != null) {
                  failedAsks.incrementAndGet();
                  Main.system
                      .scheduler()
                      .scheduleOnce(
                          Duration.ofMillis(10), this::probe, Main.system.executionContext());
                } else {
                  record(v, at);
                  probe();
                }
              });
    }
  }

  static volatile long failT0; // 0 until t0
  static volatile boolean stopProbing;
  static final AtomicInteger recovered = new AtomicInteger();
  static final AtomicLong failedAsks = new AtomicLong();
  static CountDownLatch probersDone;

  /**
   * ask (1 s timeout) until one is answered; a failed try is retried after
   * 10 ms, until `deadline` (System.nanoTime) has passed.
   */
  static <T> CompletableFuture<T> askRetry(
      EntityRef<CounterCmd> ref,
      org.apache.pekko.japi.function.Function<ActorRef<T>, CounterCmd> msg,
      long deadline,
      AtomicLong failed) {
    CompletableFuture<T> out = new CompletableFuture<>();
    askRetryStep(ref, msg, deadline, failed, out);
    return out;
  }

  private static <T> void askRetryStep(
      EntityRef<CounterCmd> ref,
      org.apache.pekko.japi.function.Function<ActorRef<T>, CounterCmd> msg,
      long deadline,
      AtomicLong failed,
      CompletableFuture<T> out) {
    ref.<T>ask(msg, FAILOVER_ASK)
        .whenComplete(
            (v, e) -> {
              if (e == null) out.complete(v);
              else {
                failed.incrementAndGet();
                if (System.nanoTime() > deadline) out.completeExceptionally(e);
                else
                  Main.system
                      .scheduler()
                      .scheduleOnce(
                          Duration.ofMillis(10),
                          () -> askRetryStep(ref, msg, deadline, failed, out),
                          Main.system.executionContext());
              }
            });
  }

  static Main.Res failover(boolean quick, String mode) throws Exception {
    int n = quick ? 300 : 3_000;
    double joinMs = formCluster("failover");
    System.err.println("cluster formed in " + Main.num(joinMs) + " ms");
    Prober[] probers = new Prober[n];
    for (int i = 0; i < n; i++) probers[i] = new Prober(i);
    List<String> errors = new ArrayList<>();

    // 1. where is every identity? (Add{1} asked, 100 in flight; a failed ask
    // is retried, for up to 120 s: the first message to each shard waits for
    // its allocation by the coordinator)
    AtomicLong setupFailed = new AtomicLong();
    long setupDeadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
    Failures f1 = new Failures();
    window(
            IN_FLIGHT,
            range(n),
            i ->
                Clustered.<Added>askRetry(probers[i].ref, r -> new Add(1, r), setupDeadline, setupFailed)
                    .thenAccept(
                        a -> {
                          probers[i].affected = a.node().equals("C");
                          probers[i].record(a, System.nanoTime());
                        }),
            f1)
        .get(CHILD_WAIT_MS, TimeUnit.MILLISECONDS);
    int affected = 0;
    int[] perNode = new int[3];
    for (Prober p : probers) {
      if (p.affected) affected++;
      for (String nd : p.actNode.values()) perNode[nodeIndex(nd)]++;
    }
    System.err.println(
        "placement: A " + perNode[0] + ", B " + perNode[1] + ", C " + perNode[2] + " identities");
    Main.Res r = new Main.Res();
    r.extra.put("mode", Main.jsonStr(mode));
    if (f1.count.get() > 0) errors.add("placement: " + f1.describe("Add (retried for 120 s)"));
    if (affected == 0) errors.add("no identity on C");

    Integer dark = null;
    Long lost = null;
    double[] fo = null;
    AtomicLong checkFailed = new AtomicLong();
    if (errors.isEmpty()) {
      // 2. probing: one sequential prober per identity
      probersDone = new CountDownLatch(n);
      for (Prober p : probers) p.probe();
      Thread.sleep(2000);
      // 3. t0
      Child c = children[2];
      if (mode.equals("leave")) {
        failT0 = System.nanoTime();
        c.send("LEAVE");
      } else {
        failT0 = System.nanoTime();
        c.proc.destroyForcibly(); // SIGKILL
      }
      long t0 = failT0;
      System.err.println("t0: " + mode + " C; " + affected + " affected identities");
      // 4. until every affected identity answered from A or B (+2 s), at most 180 s
      long lastReport = t0;
      while (recovered.get() < affected && System.nanoTime() - t0 < FAILOVER_LIMIT_NS) {
        Thread.sleep(5);
        if (System.nanoTime() - lastReport > TimeUnit.SECONDS.toNanos(5)) {
          lastReport = System.nanoTime();
          System.err.println(
              "  " + Main.num((lastReport - t0) / 1e6) + " ms after t0: " + recovered.get() + "/"
                  + affected + " affected answered from A or B; failed asks " + failedAsks.get());
        }
      }
      Thread.sleep(2000);
      stopProbing = true;
      if (!probersDone.await(30, TimeUnit.SECONDS))
        errors.add("probers did not stop within 30 s");
      List<Double> times = new ArrayList<>();
      int d = 0;
      for (Prober p : probers) {
        if (!p.affected) continue;
        if (p.firstOther == 0) d++;
        else times.add((p.firstOther - t0) / 1e6);
      }
      dark = d;
      if (d > 0) errors.add(d + " affected identities still dark 180 s after t0");
      else {
        fo = times.stream().mapToDouble(Double::doubleValue).sorted().toArray();
      }

      // 5. check: Get of every identity (100 in flight; a failed Get is retried for up to 60 s)
      long checkDeadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      Value[] finals = new Value[n];
      Failures f5 = new Failures();
      window(
              IN_FLIGHT,
              range(n),
              i ->
                  Clustered.<Value>askRetry(probers[i].ref, Get::new, checkDeadline, checkFailed)
                      .thenAccept(v -> finals[i] = v),
              f5)
          .get(CHILD_WAIT_MS, TimeUnit.MILLISECONDS);
      if (f5.count.get() > 0) errors.add("check: " + f5.describe("Get (retried for 60 s)"));
      else {
        long l = 0;
        long onFinal = 0, onC = 0;
        int wrongCount = 0;
        for (int i = 0; i < n; i++) {
          Prober p = probers[i];
          long fin = finals[i].activation();
          for (Map.Entry<Long, long[]> e : p.acks.entrySet()) {
            String nd = p.actNode.get(e.getKey());
            if (e.getKey() == fin) onFinal += e.getValue()[0];
            else if (nd.equals("C")) onC += e.getValue()[0];
            else l += e.getValue()[0];
          }
          long[] a = p.acks.get(fin);
          if (a != null && finals[i].count() < a[0]) wrongCount++;
        }
        lost = l;
        r.extra.put("acknowledged_on_final_activation", Long.toString(onFinal));
        r.extra.put("acknowledged_on_c_excluded", Long.toString(onC));
        if (l != 0) errors.add("lost_acknowledged " + l);
        if (wrongCount > 0)
          errors.add(wrongCount + " final counts below the Adds acknowledged by that activation");
      }
    }

    r.ok = errors.isEmpty();
    if (!r.ok) r.error = "verification failed: " + String.join("; ", errors);
    if (fo != null && fo.length > 0) {
      r.elapsedMs = fo[fo.length - 1];
      r.extra.put("failover_p50_ms", Main.num(rankD(fo, 0.50)));
      r.extra.put("failover_p99_ms", Main.num(rankD(fo, 0.99)));
      r.extra.put("failover_max_ms", Main.num(fo[fo.length - 1]));
    } else {
      r.elapsedMs = null;
      r.extra.put("failover_p50_ms", "null");
      r.extra.put("failover_p99_ms", "null");
      r.extra.put("failover_max_ms", "null");
    }
    r.msgsPerSec = null;
    r.extra.put("affected", Integer.toString(affected));
    r.extra.put("dark", dark == null ? "null" : Integer.toString(dark));
    r.extra.put("lost_acknowledged", lost == null ? "null" : Long.toString(lost));
    r.extra.put("failed_asks", Long.toString(failedAsks.get()));
    r.extra.put("setup_failed_asks", Long.toString(setupFailed.get()));
    r.extra.put("check_failed_asks", Long.toString(checkFailed.get()));
    r.extra.put(
        "placement",
        "{\"A\":" + perNode[0] + ",\"B\":" + perNode[1] + ",\"C\":" + perNode[2] + "}");
    r.extra.put("identities", Integer.toString(n));
    r.extra.put("nodes", "3");
    r.extra.put("join_ms", Main.num(joinMs));
    r.extra.put("transport", Main.jsonStr(TRANSPORT));
    r.extra.put("failure_detection", Main.jsonStr(failureDetection()));
    r.extra.put("settings", Main.jsonStr(settings()));
    return r;
  }

  /** nearest rank: the ceil(p * n)-th smallest value */
  static double rankD(double[] sorted, double p) {
    int k = (int) Math.ceil(p * sorted.length);
    k = Math.max(1, Math.min(sorted.length, k));
    return sorted[k - 1];
  }
}
