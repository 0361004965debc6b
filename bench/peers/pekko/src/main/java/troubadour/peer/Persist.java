package troubadour.peer;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.Props;
import org.apache.pekko.actor.typed.javadsl.AskPattern;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.persistence.typed.PersistenceId;
import org.apache.pekko.persistence.typed.javadsl.CommandHandler;
import org.apache.pekko.persistence.typed.javadsl.EventHandler;
import org.apache.pekko.persistence.typed.javadsl.EventSourcedBehavior;

/**
 * Workload 14 (persist) for Pekko Persistence with its JDBC plugin, run by
 * troubadour-bench against the same PostgreSQL server in the same run:
 * {@code __persist <jdbc-url> <actors> <events-per-actor>}. Each actor
 * persists events back to back (the next command after the reply, which
 * Pekko sends once the event is written); then the system is terminated,
 * a new one recovers every actor, and each actor's count and sum are
 * checked. Prints one JSON line.
 *
 * <p>The JVM first does the whole workload once with other persistence
 * ids (the same number of actors and events, written and then recovered),
 * unmeasured: on this 2-core machine a cold JVM spends more than half of
 * the first 20 s compiling (C1 and C2 threads), which the measured pass
 * must not pay, as the peer's other workloads run warm-up iterations
 * first (PEKKO_WARMUPS). Troubadour has no JIT to warm.
 */
public final class Persist {
  /** Events and state travel through Jackson (CBOR). */
  public interface Json {}

  public interface Cmd extends Json {}

  public record Add(long n, ActorRef<Long> replyTo) implements Cmd {}

  public record Get(ActorRef<Tally> replyTo) implements Cmd {}

  public record Added(long n) implements Json {}

  public record Tally(long count, long sum) implements Json {}

  static final class Writer extends EventSourcedBehavior<Cmd, Added, Tally> {
    Writer(String id) {
      super(PersistenceId.ofUniqueId(id));
    }

    @Override
    public Tally emptyState() {
      return new Tally(0, 0);
    }

    @Override
    public CommandHandler<Cmd, Added, Tally> commandHandler() {
      return newCommandHandlerBuilder()
          .forAnyState()
          .onCommand(
              Add.class,
              (state, add) ->
                  Effect().persist(new Added(add.n())).thenReply(add.replyTo(), s -> s.count()))
          .onCommand(Get.class, (state, get) -> Effect().reply(get.replyTo(), state))
          .build();
    }

    @Override
    public EventHandler<Tally, Added> eventHandler() {
      return newEventHandlerBuilder()
          .forAnyState()
          .onEvent(Added.class, (s, e) -> new Tally(s.count() + 1, s.sum() + e.n()))
          .build();
    }
  }

  static Config config(String url) {
    return ConfigFactory.parseString(
            String.join(
                "\n",
                "pekko.loglevel = WARNING",
                "pekko.actor.serialization-bindings { \"troubadour.peer.Persist$Json\" = jackson-cbor }",
                "pekko.persistence.journal.plugin = \"jdbc-journal\"",
                "pekko.persistence.snapshot-store.plugin = \"jdbc-snapshot-store\"",
                "jdbc-journal.use-shared-db = \"slick\"",
                "jdbc-snapshot-store.use-shared-db = \"slick\"",
                // More than the actors persisting at once (the plugin's rule).
                "jdbc-journal.bufferSize = 4000",
                "pekko-persistence-jdbc.shared-databases.slick {",
                "  profile = \"slick.jdbc.PostgresProfile$\"",
                "  db {",
                "    url = \"" + url + "\"",
                "    user = \"postgres\"",
                "    password = \"\"",
                "    driver = \"org.postgresql.Driver\"",
                "  }",
                "}"))
        .withFallback(ConfigFactory.load());
  }

  static void createSchema(String url) throws Exception {
    String sql;
    try (InputStream in =
        Persist.class.getClassLoader().getResourceAsStream("schema/postgres/postgres-create-schema.sql")) {
      sql = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
    // One statement at a time: the script has a CREATE INDEX CONCURRENTLY,
    // which PostgreSQL refuses inside a multi-statement string.
    try (Connection c = DriverManager.getConnection(url, "postgres", "");
        Statement st = c.createStatement()) {
      for (String one : sql.split(";")) {
        if (!one.isBlank()) st.execute(one);
      }
    }
  }

  static List<ActorRef<Cmd>> spawn(ActorSystem<Void> system, String prefix, int actors) {
    List<ActorRef<Cmd>> refs = new ArrayList<>(actors);
    for (int i = 0; i < actors; i++) {
      refs.add(system.systemActorOf(new Writer(prefix + i), prefix + i, Props.empty()));
    }
    return refs;
  }

  /** Persists through every writer at once; the seconds it took. */
  static double persistAll(
      ActorSystem<Void> system, List<ActorRef<Cmd>> writers, long events, long[] latencies)
      throws Exception {
    int[] at = {0};
    long start = System.nanoTime();
    List<CompletableFuture<Void>> runs = new ArrayList<>();
    for (ActorRef<Cmd> w : writers) {
      runs.add(run(system, w, 1, events, latencies, at).toCompletableFuture());
    }
    CompletableFuture.allOf(runs.toArray(new CompletableFuture[0])).get();
    return (System.nanoTime() - start) / 1e9;
  }

  /** Recovers every writer; an error if one recovered the wrong state. */
  static String recoverAll(ActorSystem<Void> system, String prefix, int actors, long events)
      throws Exception {
    List<ActorRef<Cmd>> recovered = spawn(system, prefix, actors);
    List<CompletableFuture<Tally>> reads = new ArrayList<>();
    for (ActorRef<Cmd> w : recovered) {
      reads.add(
          AskPattern.<Cmd, Tally>ask(w, Get::new, Duration.ofSeconds(300), system.scheduler())
              .toCompletableFuture());
    }
    long want = events * (events + 1) / 2;
    String error = null;
    for (CompletableFuture<Tally> r : reads) {
      Tally t = r.get();
      if (t.count() != events || t.sum() != want) {
        error = "an actor recovered " + t.count() + " events summing " + t.sum();
      }
    }
    return error;
  }

  /** Persists events 1..n through {@code ref}, one after another's reply. */
  static CompletionStage<Void> run(
      ActorSystem<Void> system, ActorRef<Cmd> ref, long i, long n, long[] latencies, int[] at) {
    if (i > n) return CompletableFuture.completedFuture(null);
    long start = System.nanoTime();
    return AskPattern.<Cmd, Long>ask(
            ref, reply -> new Add(i, reply), Duration.ofSeconds(120), system.scheduler())
        .thenCompose(
            count -> {
              synchronized (latencies) {
                latencies[at[0]++] = (System.nanoTime() - start) / 1000;
              }
              return run(system, ref, i + 1, n, latencies, at);
            });
  }

  public static void main(String url, int actors, long events) throws Exception {
    createSchema(url);
    Config config = config(url);
    long[] latencies = new long[(int) (actors * events)];
    ActorSystem<Void> system = ActorSystem.create(Behaviors.empty(), "persist", config);
    // The warm-up pass (see the class comment): written, then recovered
    // by the second system before the measured actors are.
    persistAll(system, spawn(system, "warmup-", actors), events, latencies);
    double elapsed = persistAll(system, spawn(system, "writer-", actors), events, latencies);
    system.terminate();
    system.getWhenTerminated().toCompletableFuture().get();

    ActorSystem<Void> again = ActorSystem.create(Behaviors.empty(), "persist", config);
    String error = recoverAll(again, "warmup-", actors, events);
    long recoveryStart = System.nanoTime();
    if (error == null) error = recoverAll(again, "writer-", actors, events);
    double recovery = (System.nanoTime() - recoveryStart) / 1e9;
    again.terminate();
    again.getWhenTerminated().toCompletableFuture().get();

    long total = actors * events;
    Arrays.sort(latencies);
    long p99 = latencies[Math.min(latencies.length - 1, latencies.length * 99 / 100)];
    if (error != null) {
      System.out.println("{\"ok\":false,\"error\":\"" + error + "\"}");
    } else {
      System.out.printf(
          "{\"ok\":true,\"events\":%d,\"events_per_sec\":%.1f,\"persist_p99_us\":%d,\"recovery_events_per_sec\":%.1f}%n",
          total, total / elapsed, p99, total / recovery);
    }
    System.out.flush();
    Runtime.getRuntime().halt(0);
  }
}
