// CAF 0.17 peer of the troubadour benchmark suite.
//
// Usage: caf-peer <workload> [--quick]
// Prints exactly one JSON line on stdout; diagnostics go to stderr.
//
// Configuration: CAF's defaults (work-stealing scheduler, event-based actors
// with CAF's unbounded mailbox) except scheduler.max-threads, which is set
// to the number of cores (CAF 0.17 defaults to max(cores, 4)).

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

extern char** environ;

using namespace caf;

namespace {

// ------------------------------------------------------------ atoms

using add_a = atom_constant<atom("tb_add")>;
using get_reset_a = atom_constant<atom("tb_getrst")>;
using ping_a = atom_constant<atom("tb_ping")>;
using pong_a = atom_constant<atom("tb_pong")>;
using start_a = atom_constant<atom("tb_start")>;
using done_a = atom_constant<atom("tb_done")>;
using sum_a = atom_constant<atom("tb_sum")>;
using msg_a = atom_constant<atom("tb_msg")>;
using token_a = atom_constant<atom("tb_token")>;
using calc_a = atom_constant<atom("tb_calc")>;
using factors_a = atom_constant<atom("tb_factors")>;
using stop_a = atom_constant<atom("tb_stop")>;
using work_a = atom_constant<atom("tb_work")>;
using get_a = atom_constant<atom("tb_get")>;

constexpr uint64_t factor_n = 28350160440309881ULL;
constexpr uint64_t factor_lo = 86028157ULL;
constexpr uint64_t factor_hi = 329545133ULL;

// ------------------------------------------------------------ helpers

using clk = std::chrono::steady_clock;

double ms_since(clk::time_point t0) {
  return std::chrono::duration<double, std::milli>(clk::now() - t0).count();
}

long long proc_status_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  size_t klen = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, klen, key) == 0 && line.size() > klen
        && line[klen] == ':') {
      return std::stoll(line.substr(klen + 1)) * 1024;
    }
  }
  return -1;
}

long long current_rss() { return proc_status_bytes("VmRSS"); }
long long peak_rss() { return proc_status_bytes("VmHWM"); }

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 32) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3f", v);
  return buf;
}

struct bench_result {
  bool ok = false;
  double elapsed_ms = -1;     // < 0: null
  double msgs_per_sec = -1;   // < 0: null
  double bytes_per_actor = std::nan("");
  std::string error;
  std::vector<std::pair<std::string, std::string>> extra; // raw JSON values
};

bench_result ok_time(double ms) {
  bench_result r;
  r.ok = true;
  r.elapsed_ms = ms;
  return r;
}

bench_result ok_rate(double ms, double msgs) {
  bench_result r = ok_time(ms);
  r.msgs_per_sec = msgs / (ms / 1000.0);
  return r;
}

bench_result fail(double ms, const std::string& why) {
  bench_result r;
  r.ok = false;
  r.elapsed_ms = ms;
  r.error = "verification failed: " + why;
  return r;
}

void emit(const std::string& workload, const bench_result& r, size_t threads) {
  std::ostringstream o;
  o << "{\"workload\":\"" << json_escape(workload) << "\",\"impl\":\"caf\""
    << ",\"ok\":" << (r.ok ? "true" : "false") << ",\"elapsed_ms\":"
    << (r.elapsed_ms < 0 ? std::string("null") : num(r.elapsed_ms))
    << ",\"msgs_per_sec\":"
    << (r.msgs_per_sec < 0 ? std::string("null") : num(r.msgs_per_sec))
    << ",\"peak_rss_bytes\":" << peak_rss() << ",\"bytes_per_actor\":"
    << (std::isnan(r.bytes_per_actor) ? std::string("null")
                                      : num(r.bytes_per_actor));
  if (!r.error.empty())
    o << ",\"error\":\"" << json_escape(r.error) << "\"";
  for (auto& kv : r.extra)
    o << ",\"" << kv.first << "\":" << kv.second;
  o << ",\"scheduler_threads\":" << threads << ",\"caf_version\":\"0.17\"}";
  std::printf("%s\n", o.str().c_str());
  std::fflush(stdout);
}

// factorize: trial division by 2, then by odd d while d*d <= n; what is left
// (> 1) is prime. The same algorithm in every peer.
std::vector<uint64_t> factorize(uint64_t n) {
  std::vector<uint64_t> f;
  uint64_t d = 2;
  while (n > 1) {
    if (d * d > n) {
      f.push_back(n);
      break;
    }
    if (n % d == 0) {
      f.push_back(d);
      n /= d;
      continue;
    }
    d = (d == 2) ? 3 : d + 2;
  }
  return f;
}

// Terms k = from .. to-1 of 4 * (-1)^k / (2k + 1).
double leibniz(int64_t from, int64_t to) {
  double s = 0.0;
  for (int64_t k = from; k < to; ++k) {
    double t = 4.0 / static_cast<double>(2 * k + 1);
    if ((k & 1) == 0)
      s += t;
    else
      s -= t;
  }
  return s;
}

// ------------------------------------------------------------ 1 counting
// The sender is the main thread (a scoped_actor): CAF's documented way to
// talk to actors from outside.

struct counter_state {
  int64_t total = 0;
};

behavior counter(stateful_actor<counter_state>* self) {
  return {
    [=](add_a, int64_t n) { self->state.total += n; },
    [=](get_reset_a) -> int64_t {
      auto t = self->state.total;
      self->state.total = 0;
      return t;
    },
  };
}

bench_result counting(actor_system& sys, int64_t n) {
  auto c = sys.spawn(counter);
  scoped_actor self{sys};
  int64_t got = -1;
  std::string err;
  auto t0 = clk::now();
  for (int64_t i = 0; i < n; ++i)
    self->send(c, add_a::value, int64_t{100});
  self->request(c, infinite, get_reset_a::value)
    .receive([&](int64_t v) { got = v; },
             [&](error& e) { err = sys.render(e); });
  double ms = ms_since(t0);
  anon_send_exit(c, exit_reason::user_shutdown);
  if (!err.empty())
    return fail(ms, "GetAndReset failed: " + err);
  if (got != n * 100)
    return fail(ms, "reply " + std::to_string(got) + ", expected "
                      + std::to_string(n * 100));
  return ok_rate(ms, static_cast<double>(n));
}

// ------------------------------------------------------------ 2 pingpong

behavior echo(event_based_actor* self) {
  return {
    [=](ping_a) { self->send(actor_cast<actor>(self->current_sender()),
                             pong_a::value); },
  };
}

struct client_state {
  int64_t sent = 0;
  int64_t echoed = 0;
  int in_batch = 0;
};

behavior client(stateful_actor<client_state>* self, actor echo_actor,
                actor main_actor, int64_t per_pair, int batch) {
  auto send_batch = [=] {
    auto& st = self->state;
    int64_t b = std::min<int64_t>(batch, per_pair - st.sent);
    st.in_batch = static_cast<int>(b);
    for (int64_t i = 0; i < b; ++i)
      self->send(echo_actor, ping_a::value);
    st.sent += b;
  };
  return {
    [=](start_a) { send_batch(); },
    [=](pong_a) {
      auto& st = self->state;
      ++st.echoed;
      if (--st.in_batch == 0) {
        if (st.sent < per_pair) {
          send_batch();
        } else {
          self->send(main_actor, done_a::value, st.echoed);
          self->send_exit(echo_actor, exit_reason::user_shutdown);
          self->quit();
        }
      }
    },
  };
}

bench_result pingpong(actor_system& sys, int pairs, int64_t per_pair, int batch) {
  scoped_actor self{sys};
  std::vector<actor> clients;
  for (int i = 0; i < pairs; ++i) {
    auto e = sys.spawn(echo);
    clients.push_back(sys.spawn(client, e, actor_cast<actor>(self), per_pair,
                                batch));
  }
  auto t0 = clk::now();
  for (auto& c : clients)
    self->send(c, start_a::value);
  bool all_ok = true;
  std::string counts;
  for (int i = 0; i < pairs; ++i) {
    self->receive([&](done_a, int64_t echoed) {
      all_ok = all_ok && echoed == per_pair;
      counts += std::to_string(echoed) + " ";
    });
  }
  double ms = ms_since(t0);
  if (!all_ok)
    return fail(ms, "echo counts " + counts + "expected "
                      + std::to_string(per_pair) + " each");
  auto r = ok_rate(ms, 2.0 * per_pair * pairs);
  r.extra.emplace_back("pairs", std::to_string(pairs));
  return r;
}

// ------------------------------------------------------------ 3 skynet

struct skynet_state {
  int64_t sum = 0;
  int64_t got = 0;
};

behavior skynet(stateful_actor<skynet_state>* self, actor parent, int64_t num,
                int64_t size, int64_t div) {
  if (size == 1) {
    self->send(parent, sum_a::value, num);
    return {}; // an empty behavior: the leaf is done
  }
  int64_t sub = size / div;
  for (int64_t i = 0; i < div; ++i)
    self->spawn(skynet, actor_cast<actor>(self), num + i * sub, sub, div);
  return {
    [=](sum_a, int64_t v) {
      self->state.sum += v;
      if (++self->state.got == div) {
        self->send(parent, sum_a::value, self->state.sum);
        self->quit();
      }
    },
  };
}

bench_result run_skynet(actor_system& sys, int64_t leaves, int64_t div) {
  scoped_actor self{sys};
  int64_t got = -1;
  auto t0 = clk::now();
  sys.spawn(skynet, actor_cast<actor>(self), int64_t{0}, leaves, div);
  self->receive([&](sum_a, int64_t v) { got = v; });
  double ms = ms_since(t0);
  int64_t want = leaves * (leaves - 1) / 2;
  if (got != want)
    return fail(ms, "sum " + std::to_string(got) + ", expected "
                      + std::to_string(want));
  return ok_time(ms);
}

// ------------------------------------------------------------ 4 fan-in
// 20 std::threads send from outside the actor system with anon_send.

struct receiver_state {
  int64_t count = 0;
};

behavior fan_receiver(stateful_actor<receiver_state>* self, actor main_actor,
                      int64_t target) {
  return {
    [=](msg_a) {
      if (++self->state.count == target)
        self->send(main_actor, done_a::value, self->state.count);
    },
  };
}

bench_result fanin(actor_system& sys, int senders, int64_t n) {
  scoped_actor self{sys};
  int64_t total = senders * n;
  auto recv = sys.spawn(fan_receiver, actor_cast<actor>(self), total);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int s = 0; s < senders; ++s) {
    threads.emplace_back([&, recv] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire))
        std::this_thread::yield();
      for (int64_t i = 0; i < n; ++i)
        anon_send(recv, msg_a::value);
    });
  }
  while (ready.load() < senders)
    std::this_thread::yield();
  auto t0 = clk::now();
  go.store(true, std::memory_order_release);
  int64_t got = -1;
  self->receive([&](done_a, int64_t c) { got = c; });
  double ms = ms_since(t0);
  for (auto& t : threads)
    t.join();
  anon_send_exit(recv, exit_reason::user_shutdown);
  if (got != total)
    return fail(ms, "receiver counted " + std::to_string(got) + ", expected "
                      + std::to_string(total));
  auto r = ok_rate(ms, static_cast<double>(total));
  r.extra.emplace_back("senders", std::to_string(senders));
  r.extra.emplace_back("senders_are", "\"std::thread + anon_send\"");
  return r;
}

// ------------------------------------------------------------ 5 rings

behavior chain_link(event_based_actor* self, actor next) {
  return {
    [=](token_a, int64_t v) {
      self->send(next, token_a::value, v);
      if (v == 0)
        self->quit();
    },
  };
}

struct master_state {
  actor first;
  int rounds_done = 0;
};

behavior master(stateful_actor<master_state>* self, actor worker,
                actor collector, int links, int64_t token, int rounds) {
  auto start_round = [=] {
    self->send(worker, calc_a::value, factor_n);
    actor next = actor_cast<actor>(self);
    for (int i = 0; i < links; ++i)
      next = self->spawn(chain_link, next);
    self->state.first = next;
    self->send(next, token_a::value, token);
  };
  start_round();
  return {
    [=](token_a, int64_t v) {
      if (v > 0) {
        self->send(self->state.first, token_a::value, v - 1);
        return;
      }
      if (++self->state.rounds_done < rounds) {
        start_round();
      } else {
        self->send(collector, done_a::value);
        self->quit();
      }
    },
  };
}

behavior factor_worker(event_based_actor* self, actor collector) {
  return {
    [=](calc_a, uint64_t n) {
      auto f = factorize(n);
      bool good = f.size() == 2 && f[0] == factor_lo && f[1] == factor_hi;
      self->send(collector, factors_a::value, good);
    },
    [=](stop_a) { self->quit(); },
  };
}

struct collector_state {
  int facts = 0;
  int masters = 0;
  int bad = 0;
};

behavior collector(stateful_actor<collector_state>* self, actor main_actor,
                   int facts, int masters) {
  self->state.facts = facts;
  self->state.masters = masters;
  auto check = [=] {
    auto& st = self->state;
    if (st.facts == 0 && st.masters == 0) {
      self->send(main_actor, done_a::value, int64_t{st.bad});
      self->quit();
    }
  };
  return {
    [=](factors_a, bool good) {
      if (!good)
        ++self->state.bad;
      --self->state.facts;
      check();
    },
    [=](done_a) {
      --self->state.masters;
      check();
    },
  };
}

bench_result rings(actor_system& sys, int n_rings, int links, int64_t token,
             int rounds) {
  scoped_actor self{sys};
  auto t0 = clk::now();
  auto coll = sys.spawn(collector, actor_cast<actor>(self), n_rings * rounds,
                        n_rings);
  std::vector<actor> workers;
  for (int i = 0; i < n_rings; ++i) {
    workers.push_back(sys.spawn(factor_worker, coll));
    sys.spawn(master, workers.back(), coll, links, token, rounds);
  }
  int64_t bad = -1;
  self->receive([&](done_a, int64_t b) { bad = b; });
  double ms = ms_since(t0);
  for (auto& w : workers)
    anon_send(w, stop_a::value);
  double msgs = double(n_rings) * rounds * (token + 1) * (links + 1)
                + 2.0 * n_rings * rounds + n_rings;
  if (bad != 0)
    return fail(ms, std::to_string(bad) + " wrong factorisations");
  auto r = ok_rate(ms, msgs);
  r.extra.emplace_back("messages", std::to_string(int64_t(msgs)));
  return r;
}

// ------------------------------------------------------------ 6 idle

behavior idle_actor(event_based_actor* self, std::atomic<int64_t>* started) {
  started->fetch_add(1, std::memory_order_relaxed);
  return {
    [=](stop_a) { self->quit(); },
  };
}

bench_result idle(actor_system& sys, int64_t n) {
  std::atomic<int64_t> started{0};
  std::vector<actor> actors;
  actors.reserve(n);
  size_t base = sys.registry().running();
  long long before = current_rss();
  auto t0 = clk::now();
  for (int64_t i = 0; i < n; ++i)
    actors.push_back(sys.spawn(idle_actor, &started));
  while (started.load() < n) // every actor ran its init and waits
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  double ms = ms_since(t0);
  long long after = current_rss();
  size_t alive = sys.registry().running() - base;
  for (auto& a : actors)
    anon_send(a, stop_a::value);
  actors.clear();
  actors.shrink_to_fit();
  sys.await_all_actors_done();
  size_t left = sys.registry().running() - base;
  long long after_stop = current_rss();
  if (alive < static_cast<size_t>(n) || left != 0)
    return fail(ms, "alive after spawn " + std::to_string(alive)
                      + ", left after stop " + std::to_string(left));
  auto r = ok_time(ms);
  r.bytes_per_actor = double(after - before) / double(n);
  r.extra.emplace_back("rss_before_bytes", std::to_string(before));
  r.extra.emplace_back("rss_after_spawn_bytes", std::to_string(after));
  r.extra.emplace_back("rss_after_stop_bytes", std::to_string(after_stop));
  r.extra.emplace_back("actors", std::to_string(n));
  return r;
}

// ------------------------------------------------------------ 8 pi
// A coordinator actor requests the items from an actor_pool (round robin)
// of one worker per scheduler thread and sums the responses.

behavior pi_worker(event_based_actor*) {
  return {
    [](work_a, int64_t start, int64_t terms) -> double {
      return leibniz(start, start + terms);
    },
  };
}

struct coord_state {
  double sum = 0;
  int64_t got = 0;
};

behavior pi_coordinator(stateful_actor<coord_state>* self, actor pool,
                        actor main_actor, int64_t items, int64_t terms) {
  return {
    [=](start_a) {
      for (int64_t i = 0; i < items; ++i) {
        self->request(pool, infinite, work_a::value, i * terms, terms)
          .then([=](double v) {
            self->state.sum += v;
            if (++self->state.got == items) {
              self->send(main_actor, sum_a::value, self->state.sum);
              self->quit();
            }
          });
      }
    },
  };
}

bench_result pi(actor_system& sys, size_t workers, int64_t items, int64_t terms) {
  scoped_actor self{sys};
  auto pool = actor_pool::make(
    sys.dummy_execution_unit(), workers, [&] { return sys.spawn(pi_worker); },
    actor_pool::round_robin());
  auto coord = sys.spawn(pi_coordinator, pool, actor_cast<actor>(self), items,
                         terms);
  double sum = 0;
  auto t0 = clk::now();
  self->send(coord, start_a::value);
  self->receive([&](sum_a, double s) { sum = s; });
  double ms = ms_since(t0);
  anon_send_exit(pool, exit_reason::user_shutdown);
  auto t1 = clk::now();
  double ref = leibniz(0, items * terms);
  double loop_ms = ms_since(t1);
  if (std::fabs(sum - ref) > 1e-9) {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "sum %.15f, single loop %.15f", sum, ref);
    return fail(ms, buf);
  }
  auto r = ok_time(ms);
  r.extra.emplace_back("plain_loop_ms", num(loop_ms));
  r.extra.emplace_back("workers", std::to_string(workers));
  return r;
}


// ------------------------------------------------------------ remote workloads
// CAF 0.17's io module (BASP over TCP on 127.0.0.1, no TLS; CAF's own binary
// serialization; the payload is a std::vector<char>, a built-in type). The
// second process is this program started again (`__serve <workload> <n>`,
// posix_spawn); it publishes one directory actor with
// middleman().publish(dir, 0, "127.0.0.1") on a port the OS picks, prints
// "PORT <port>" on its stdout and ends when its stdin closes. The measuring
// process connects with middleman().remote_actor("127.0.0.1", port) and
// asks the directory for the echoes (or the pi worker pool); handles that
// arrive in messages are proxies for the remote actors.

using payload_t = std::vector<char>;

const char* remote_transport = "CAF io middleman: BASP over TCP (loopback), CAF binary serialization";

behavior remote_echo(event_based_actor* self) {
  return {
    [=](ping_a, const payload_t& p) {
      self->send(actor_cast<actor>(self->current_sender()), pong_a::value, p);
    },
  };
}

behavior directory(event_based_actor*, std::vector<actor> actors) {
  return {
    [=](get_a, int32_t i) -> actor { return actors.at(static_cast<size_t>(i)); },
  };
}

int serve_remote(actor_system& sys, const std::string& workload, int n,
                 size_t threads) {
  std::vector<actor> actors;
  if (workload == "remote-pingpong") {
    for (int i = 0; i < n; ++i)
      actors.push_back(sys.spawn(remote_echo));
  } else if (workload == "remote-pi") {
    actors.push_back(actor_pool::make(
      sys.dummy_execution_unit(), threads, [&] { return sys.spawn(pi_worker); },
      actor_pool::round_robin()));
  } else {
    std::fprintf(stderr, "unknown remote workload %s\n", workload.c_str());
    return 1;
  }
  auto dir = sys.spawn(directory, actors);
  auto port = sys.middleman().publish(dir, 0, "127.0.0.1");
  if (!port) {
    std::fprintf(stderr, "publish failed: %s\n", sys.render(port.error()).c_str());
    return 1;
  }
  std::printf("PORT %u\n", static_cast<unsigned>(*port));
  std::fflush(stdout);
  char buf[256];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
  return 0;
}

struct child_proc {
  pid_t pid = -1;
  int to_child = -1;
  void stop() {
    if (to_child >= 0)
      close(to_child);
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    pid = -1;
    to_child = -1;
  }
};

// Starts the second process; returns its port (0 on failure, with *err set).
uint16_t start_child(child_proc& c, const std::string& workload, int n,
                     std::string* err) {
  int in_pipe[2], out_pipe[2];
  if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0) {
    *err = "pipe failed";
    return 0;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_addclose(&fa, in_pipe[1]);
  posix_spawn_file_actions_addclose(&fa, out_pipe[0]);
  std::string nstr = std::to_string(n);
  const char* argv[] = {"/proc/self/exe", "__serve", workload.c_str(),
                        nstr.c_str(), nullptr};
  int rc = posix_spawn(&c.pid, "/proc/self/exe", &fa, nullptr,
                       const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in_pipe[0]);
  close(out_pipe[1]);
  c.to_child = in_pipe[1];
  if (rc != 0) {
    *err = "posix_spawn failed";
    c.pid = -1;
    return 0;
  }
  if (const char* f = std::getenv("PEER_PIDFILE"); f && *f) {
    std::ofstream pf(f, std::ios::app);
    pf << c.pid << "\n";
  }
  std::string line;
  auto deadline = clk::now() + std::chrono::seconds(60);
  while (clk::now() < deadline) {
    pollfd pfd{out_pipe[0], POLLIN, 0};
    if (poll(&pfd, 1, 1000) <= 0)
      continue;
    char ch;
    ssize_t got = read(out_pipe[0], &ch, 1);
    if (got <= 0)
      break;
    if (ch != '\n') {
      line += ch;
      continue;
    }
    if (line.rfind("PORT ", 0) == 0) {
      close(out_pipe[0]);
      return static_cast<uint16_t>(std::stoi(line.substr(5)));
    }
    std::fprintf(stderr, "%s\n", line.c_str());
    line.clear();
  }
  close(out_pipe[0]);
  *err = "the second process did not report its port";
  return 0;
}

struct rclient_state {
  int64_t sent = 0;
  int64_t echoed = 0;
  int in_batch = 0;
};

behavior remote_client(stateful_actor<rclient_state>* self, actor echo_actor,
                       actor main_actor, payload_t payload, int64_t per_pair,
                       int batch) {
  auto send_batch = [=] {
    auto& st = self->state;
    int64_t b = std::min<int64_t>(batch, per_pair - st.sent);
    st.in_batch = static_cast<int>(b);
    for (int64_t i = 0; i < b; ++i)
      self->send(echo_actor, ping_a::value, payload);
    st.sent += b;
  };
  return {
    [=](start_a) { send_batch(); },
    [=](pong_a, const payload_t&) {
      auto& st = self->state;
      ++st.echoed;
      if (--st.in_batch == 0) {
        if (st.sent < per_pair) {
          send_batch();
        } else {
          self->send(main_actor, done_a::value, st.echoed);
          self->quit();
        }
      }
    },
  };
}

double rank_us(const std::vector<int64_t>& sorted_ns, double p) {
  auto n = static_cast<int64_t>(sorted_ns.size());
  int64_t k = static_cast<int64_t>(std::ceil(p * static_cast<double>(n)));
  k = std::max<int64_t>(1, std::min<int64_t>(n, k));
  return static_cast<double>(sorted_ns[static_cast<size_t>(k - 1)]) / 1000.0;
}

bench_result remote_pingpong(actor_system& sys, int pairs, int size,
                             int64_t per_pair, int rtt_n) {
  child_proc child;
  std::string err;
  uint16_t port = start_child(child, "remote-pingpong", pairs, &err);
  if (port == 0) {
    child.stop();
    bench_result r;
    r.error = err;
    return r;
  }
  auto dir = sys.middleman().remote_actor("127.0.0.1", port);
  if (!dir) {
    child.stop();
    bench_result r;
    r.error = "remote_actor failed: " + sys.render(dir.error());
    return r;
  }
  scoped_actor self{sys};
  std::vector<actor> echoes;
  for (int i = 0; i < pairs; ++i) {
    self->request(*dir, std::chrono::seconds(60), get_a::value, int32_t{i})
      .receive([&](actor a) { echoes.push_back(a); },
               [&](error& e) { err = "directory: " + sys.render(e); });
  }
  if (static_cast<int>(echoes.size()) != pairs) {
    child.stop();
    bench_result r;
    r.error = err;
    return r;
  }
  payload_t payload(static_cast<size_t>(size), static_cast<char>(0xa5));
  std::vector<actor> clients;
  for (auto& e : echoes)
    clients.push_back(sys.spawn(remote_client, e, actor_cast<actor>(self),
                                payload, per_pair, 100));
  auto t0 = clk::now();
  for (auto& c : clients)
    self->send(c, start_a::value);
  bool all_ok = true;
  std::string counts;
  for (int i = 0; i < pairs; ++i) {
    self->receive(
      [&](done_a, int64_t echoed) {
        all_ok = all_ok && echoed == per_pair;
        counts += std::to_string(echoed) + " ";
      },
      after(std::chrono::minutes(10)) >> [&] {
        all_ok = false;
        counts += "timeout ";
      });
  }
  double ms = ms_since(t0);
  // phase 2: latency, from the scoped actor (CAF's blocking API)
  std::vector<int64_t> rtts;
  bool rtt_ok = true;
  for (int i = 0; i < rtt_n && rtt_ok; ++i) {
    auto a = clk::now();
    self->send(echoes[0], ping_a::value, payload);
    self->receive([&](pong_a, const payload_t&) {},
                  after(std::chrono::seconds(60)) >> [&] { rtt_ok = false; });
    rtts.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                     clk::now() - a)
                     .count());
  }
  child.stop();
  bench_result r;
  if (!all_ok)
    r = fail(ms, "echo counts " + counts + "expected "
                   + std::to_string(per_pair) + " each");
  else if (!rtt_ok)
    r = fail(ms, "latency phase: no pong within 60 s");
  else
    r = ok_rate(ms, 2.0 * per_pair * pairs);
  r.extra.emplace_back("pairs", std::to_string(pairs));
  r.extra.emplace_back("size_bytes", std::to_string(size));
  r.extra.emplace_back("echoes_per_pair", std::to_string(per_pair));
  if (rtt_ok) {
    std::vector<int64_t> kept(rtts.begin() + rtt_n / 10, rtts.end());
    std::sort(kept.begin(), kept.end());
    r.extra.emplace_back("rtt_p50_us", num(rank_us(kept, 0.50)));
    r.extra.emplace_back("rtt_p99_us", num(rank_us(kept, 0.99)));
    r.extra.emplace_back("rtt_samples", std::to_string(kept.size()));
  } else {
    r.extra.emplace_back("rtt_p50_us", "null");
    r.extra.emplace_back("rtt_p99_us", "null");
  }
  r.extra.emplace_back("tls", "false");
  r.extra.emplace_back("transport", std::string("\"") + remote_transport + "\"");
  return r;
}

bench_result remote_pi(actor_system& sys, size_t workers, int64_t items,
                       int64_t terms) {
  child_proc child;
  std::string err;
  uint16_t port = start_child(child, "remote-pi", 0, &err);
  if (port == 0) {
    child.stop();
    bench_result r;
    r.error = err;
    return r;
  }
  auto dir = sys.middleman().remote_actor("127.0.0.1", port);
  if (!dir) {
    child.stop();
    bench_result r;
    r.error = "remote_actor failed: " + sys.render(dir.error());
    return r;
  }
  scoped_actor self{sys};
  actor pool;
  self->request(*dir, std::chrono::seconds(60), get_a::value, int32_t{0})
    .receive([&](actor a) { pool = a; },
             [&](error& e) { err = "directory: " + sys.render(e); });
  if (!pool) {
    child.stop();
    bench_result r;
    r.error = err;
    return r;
  }
  auto coord = sys.spawn(pi_coordinator, pool, actor_cast<actor>(self), items,
                         terms);
  double sum = 0;
  bool got = false;
  auto t0 = clk::now();
  self->send(coord, start_a::value);
  self->receive([&](sum_a, double s) { sum = s; got = true; },
                after(std::chrono::minutes(10)) >> [] {});
  double ms = ms_since(t0);
  child.stop();
  auto t1 = clk::now();
  double ref = leibniz(0, items * terms);
  double loop_ms = ms_since(t1);
  bench_result r;
  if (!got) {
    r = fail(ms, "no complete sum within 10 minutes");
  } else if (std::fabs(sum - ref) > 1e-9) {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "sum %.15f, single loop %.15f", sum, ref);
    r = fail(ms, buf);
  } else {
    r = ok_rate(ms, 2.0 * items);
  }
  r.extra.emplace_back("plain_loop_ms", num(loop_ms));
  r.extra.emplace_back("workers", std::to_string(workers));
  r.extra.emplace_back("items", std::to_string(items));
  r.extra.emplace_back("terms", std::to_string(terms));
  r.extra.emplace_back("tls", "false");
  r.extra.emplace_back("transport", std::string("\"") + remote_transport + "\"");
  return r;
}

} // namespace

int main(int argc, char** argv) {
  std::string workload = "?";
  bool quick = false;
  bool serve = argc == 4 && std::string(argv[1]) == "__serve";
  int pairs = 1, size = 16; // remote-pingpong's --pairs / --size
  for (int i = 1; i < argc && !serve; ++i) {
    std::string a = argv[i];
    if (a == "--quick" || a == "quick")
      quick = true;
    else if (a == "--pairs" && i + 1 < argc)
      pairs = std::atoi(argv[++i]);
    else if (a == "--size" && i + 1 < argc)
      size = std::atoi(argv[++i]);
    else
      workload = a;
  }
  size_t threads = std::thread::hardware_concurrency();
  if (threads == 0)
    threads = 1;
  bench_result r;
  {
    actor_system_config cfg;
    cfg.set("scheduler.max-threads", threads);
    cfg.set("logger.verbosity", atom("quiet"));
    bool remote = serve || workload.rfind("remote-", 0) == 0;
    if (remote)
      cfg.load<io::middleman>();
    actor_system sys{cfg};
    if (serve) {
      int rc = serve_remote(sys, argv[2], std::atoi(argv[3]), threads);
      std::fflush(stdout);
      std::_Exit(rc);
    }
    try {
      if (workload == "counting")
        r = counting(sys, quick ? 100000 : 3000000);
      else if (workload == "pingpong")
        r = pingpong(sys, static_cast<int>(threads) * 2,
                     quick ? 10000 : 1000000, 100);
      else if (workload == "skynet")
        r = run_skynet(sys, quick ? 10000 : 1000000, 10);
      else if (workload == "fanin")
        r = fanin(sys, 20, quick ? 10000 : 1000000);
      else if (workload == "rings")
        r = quick ? rings(sys, 20, 49, 100, 2) : rings(sys, 20, 49, 10000, 5);
      else if (workload == "idle")
        r = idle(sys, quick ? 10000 : 1000000);
      else if (workload == "pi")
        r = quick ? pi(sys, threads, 100, 1000) : pi(sys, threads, 1000, 10000);
      else if (workload == "remote-pingpong")
        r = remote_pingpong(sys, pairs, size, quick ? 5000 : 200000,
                            quick ? 1000 : 20000);
      else if (workload == "remote-pi")
        r = quick ? remote_pi(sys, threads, 100, 1000)
                  : remote_pi(sys, threads, 1000, 10000);
      else
        r.error = "unknown workload " + workload;
    } catch (std::exception& e) {
      r = bench_result{};
      r.error = std::string("exception: ") + e.what();
    }
    emit(workload, r, threads);
    // The bench_result is out; skip the actor system's shutdown, which would wait
    // for every actor still alive.
    std::fflush(stdout);
    std::_Exit(0);
  }
}
