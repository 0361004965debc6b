%% Erlang/OTP peer of the troubadour benchmark suite.
%%
%% Plain processes and bare `receive` (no gen_server), which is how the
%% Erlang literature the workloads come from measures message passing.
%% Invoked by ../run as
%%   erl -noshell +P 4000000 -pa ebin -run troubadour_peer main <workload> [--quick]
%% (the remote workloads add pairs=N size=BYTES and run distributed; see
%% remote_pingpong/4 and remote_pi/2).
%% Prints exactly one JSON line on stdout; diagnostics go to stderr.
-module(troubadour_peer).
-export([main/1]).
%% Run on the second node (process B) of the remote workloads.
-export([remote_echo/0, pi_worker/0]).

-define(FACTOR_N, 28350160440309881).
-define(FACTOR_EXPECTED, [86028157, 329545133]).

main(Args) ->
    {Workload, Quick} = parse_args(Args),
    Result =
        try run(Workload, Quick) of
            R -> R
        catch
            Class:Reason:Stack ->
                io:format(standard_error, "~p:~p~n~p~n", [Class, Reason, Stack]),
                #{ok => false,
                  error => lists:flatten(io_lib:format("~p:~p", [Class, Reason]))}
        end,
    emit(Workload, Result),
    erlang:halt(0).

parse_args(Args) ->
    IsQ = fun(A) -> A =:= "--quick" orelse A =:= "quick" end,
    Quick = lists:any(IsQ, Args),
    IsOpt = fun(A) -> lists:prefix("pairs=", A) orelse lists:prefix("size=", A) end,
    [put(list_to_atom(K), list_to_integer(V))
     || A <- Args, IsOpt(A), [K, V] <- [string:split(A, "=")]],
    case [A || A <- Args, not IsQ(A), not IsOpt(A)] of
        [W] -> {W, Quick};
        _ -> {"?", Quick}
    end.

opt(Key, Default) ->
    case get(Key) of
        undefined -> Default;
        V -> V
    end.

%% ---------------------------------------------------------------- output

emit(Workload, R) ->
    Ok = maps:get(ok, R, false),
    Base = [{"workload", str(Workload)},
            {"impl", str("erlang")},
            {"ok", atom_to_list(Ok)},
            {"elapsed_ms", num(maps:get(elapsed_ms, R, null))},
            {"msgs_per_sec", num(maps:get(msgs_per_sec, R, null))},
            {"peak_rss_bytes", num(maps:get(peak_rss_bytes, R, peak_rss()))},
            {"bytes_per_actor", num(maps:get(bytes_per_actor, R, null))}],
    Err = case maps:get(error, R, undefined) of
              undefined -> [];
              E -> [{"error", str(E)}]
          end,
    Extra = [{atom_to_list(K), num(V)} || {K, V} <- maps:get(extra, R, [])],
    Fields = Base ++ Err ++ Extra ++
        [{"schedulers", num(erlang:system_info(schedulers_online))},
         {"otp_release", str(erlang:system_info(otp_release))}],
    Body = lists:join(",", [["\"", K, "\":", V] || {K, V} <- Fields]),
    io:put_chars(standard_io, ["{", Body, "}\n"]).

str(S) -> ["\"", escape(S), "\""].
escape(S) ->
    lists:flatmap(fun($") -> "\\\"";
                     ($\\) -> "\\\\";
                     (C) when C < 32 -> " ";
                     (C) -> [C]
                  end, lists:flatten(S)).

num(null) -> "null";
num(true) -> "true";
num(false) -> "false";
num(N) when is_integer(N) -> integer_to_list(N);
num(F) when is_float(F) -> io_lib:format("~.3f", [F]);
num({str, S}) -> str(S).

%% ---------------------------------------------------------------- memory

proc_status_kb(Key) ->
    {ok, B} = file:read_file("/proc/self/status"),
    Lines = string:split(binary_to_list(B), "\n", all),
    KeyC = Key ++ ":",
    case [L || L <- Lines, lists:prefix(KeyC, L)] of
        [L | _] ->
            [_, V | _] = string:lexemes(L, " \t"),
            list_to_integer(V) * 1024;
        [] -> null
    end.

peak_rss() -> proc_status_kb("VmHWM").
current_rss() -> proc_status_kb("VmRSS").

%% ---------------------------------------------------------------- timing

now_us() -> erlang:monotonic_time(microsecond).
ms_since(T0) -> (now_us() - T0) / 1000.0.
rate(Msgs, Ms) when Ms > 0 -> Msgs / (Ms / 1000.0);
rate(_, _) -> null.

%% ---------------------------------------------------------------- dispatch

run("counting", Q) -> counting(pick(Q, 100000, 3000000));
run("pingpong", Q) ->
    pingpong(erlang:system_info(schedulers_online) * 2, pick(Q, 10000, 1000000), 100);
run("skynet", Q) -> skynet(pick(Q, 10000, 1000000), 10);
run("fanin", Q) -> fanin(20, pick(Q, 10000, 1000000));
run("rings", true) -> rings(20, 49, 100, 2);
run("rings", false) -> rings(20, 49, 10000, 5);
run("idle", Q) -> idle(pick(Q, 10000, 1000000));
run("pi", true) -> pi(100, 1000);
run("pi", false) -> pi(1000, 10000);
run("remote-pingpong", Q) ->
    remote_pingpong(opt(pairs, 1), opt(size, 16), pick(Q, 5000, 200000), pick(Q, 1000, 20000));
run("remote-pi", true) -> remote_pi(100, 1000);
run("remote-pi", false) -> remote_pi(1000, 10000);
run(W, _) -> #{ok => false, error => "unknown workload " ++ W}.

pick(true, Quick, _Full) -> Quick;
pick(false, _Quick, Full) -> Full.

%% ---------------------------------------------------------------- 1 counting
%% One process keeps a running total; the main process sends N {add, 100}
%% then a {get_and_reset, From} request. msgs = N (the Adds).

counter(Total) ->
    receive
        {add, N} -> counter(Total + N);
        {get_and_reset, From} ->
            From ! {total, Total},
            counter(0)
    end.

counting(N) ->
    Counter = spawn(fun() -> counter(0) end),
    T0 = now_us(),
    send_adds(Counter, N),
    Counter ! {get_and_reset, self()},
    Got = receive {total, V} -> V end,
    Ms = ms_since(T0),
    exit(Counter, kill),
    Expected = N * 100,
    result(Got =:= Expected, Ms, rate(N, Ms),
           io_lib:format("reply ~p, expected ~p", [Got, Expected])).

send_adds(_, 0) -> ok;
send_adds(C, N) -> C ! {add, 100}, send_adds(C, N - 1).

%% ---------------------------------------------------------------- 2 pingpong
%% Pairs of (client, echo) processes; the client sends a batch of 100 pings,
%% waits for the 100 pongs, and repeats until PerPair were echoed.

echo() ->
    receive
        {ping, From, X} -> From ! {pong, X}, echo();
        stop -> ok
    end.

client(Main, Echo, Remaining, Batch, Echoed) when Remaining =< 0 ->
    Echo ! stop,
    Main ! {pair_done, self(), Echoed},
    Batch;
client(Main, Echo, Remaining, Batch, Echoed) ->
    B = min(Batch, Remaining),
    send_pings(Echo, B),
    Got = recv_pongs(B, 0),
    client(Main, Echo, Remaining - B, Batch, Echoed + Got).

send_pings(_, 0) -> ok;
send_pings(E, K) -> E ! {ping, self(), K}, send_pings(E, K - 1).

recv_pongs(0, Got) -> Got;
recv_pongs(K, Got) -> receive {pong, _} -> recv_pongs(K - 1, Got + 1) end.

pingpong(Pairs, PerPair, Batch) ->
    Main = self(),
    Go = make_ref(),
    Clients = [begin
                   Echo = spawn(fun echo/0),
                   spawn(fun() ->
                                 receive Go -> ok end,
                                 client(Main, Echo, PerPair, Batch, 0)
                         end)
               end || _ <- lists:seq(1, Pairs)],
    T0 = now_us(),
    [C ! Go || C <- Clients],
    Counts = [receive {pair_done, C, E} -> E end || C <- Clients],
    Ms = ms_since(T0),
    Ok = lists:all(fun(E) -> E =:= PerPair end, Counts),
    R = result(Ok, Ms, rate(2 * PerPair * Pairs, Ms),
               io_lib:format("echo counts ~p, expected ~p each", [Counts, PerPair])),
    R#{extra => [{pairs, Pairs}]}.

%% ---------------------------------------------------------------- 3 skynet

skynet_node(Parent, Num, 1, _Div) ->
    Parent ! {sum, Num};
skynet_node(Parent, Num, Size, Div) ->
    Self = self(),
    Sub = Size div Div,
    spawn_children(Self, Num, Sub, Div, 0),
    Parent ! {sum, collect(Div, 0)}.

spawn_children(_, _, _, Div, Div) -> ok;
spawn_children(Self, Num, Sub, Div, I) ->
    spawn(fun() -> skynet_node(Self, Num + I * Sub, Sub, Div) end),
    spawn_children(Self, Num, Sub, Div, I + 1).

collect(0, Sum) -> Sum;
collect(K, Sum) -> receive {sum, V} -> collect(K - 1, Sum + V) end.

skynet(Leaves, Div) ->
    Main = self(),
    T0 = now_us(),
    spawn(fun() -> skynet_node(Main, 0, Leaves, Div) end),
    Sum = receive {sum, V} -> V end,
    Ms = ms_since(T0),
    Expected = Leaves * (Leaves - 1) div 2,
    result(Sum =:= Expected, Ms, null,
           io_lib:format("sum ~p, expected ~p", [Sum, Expected])).

%% ---------------------------------------------------------------- 4 fan-in
%% 20 sender processes each send N messages to one receiver process.

receiver(Main, Target, Target) ->
    Main ! {fanin_done, Target};
receiver(Main, Target, Count) ->
    receive msg -> receiver(Main, Target, Count + 1) end.

sender(_, 0) -> ok;
sender(R, K) -> R ! msg, sender(R, K - 1).

fanin(Senders, N) ->
    Main = self(),
    Total = Senders * N,
    Go = make_ref(),
    R = spawn(fun() -> receiver(Main, Total, 0) end),
    Ss = [spawn(fun() -> receive Go -> sender(R, N) end end)
          || _ <- lists:seq(1, Senders)],
    T0 = now_us(),
    [S ! Go || S <- Ss],
    Count = receive {fanin_done, X} -> X end,
    Ms = ms_since(T0),
    R1 = result(Count =:= Total, Ms, rate(Total, Ms),
                io_lib:format("receiver counted ~p, expected ~p", [Count, Total])),
    R1#{extra => [{senders, Senders}, {senders_are, {str, "erlang processes"}}]}.

%% ---------------------------------------------------------------- 5 rings
%% Each master builds a ring of Links chain links, sends a token around it,
%% decrements it each time it comes back and builds a fresh ring once a 0
%% came back, Rounds times; per ring it asks its worker to factorise
%% FACTOR_N; a collector waits for all factorisations and masters.

chain_link(Next) ->
    receive
        {token, 0} -> Next ! {token, 0};
        {token, V} -> Next ! {token, V}, chain_link(Next)
    end.

master(Collector, Worker, Links, Token, Rounds) ->
    master_round(Collector, Worker, Links, Token, Rounds).

master_round(Collector, _Worker, _Links, _Token, 0) ->
    Collector ! {master_done, self()};
master_round(Collector, Worker, Links, Token, Rounds) ->
    Worker ! {calc, ?FACTOR_N},
    First = build_ring(self(), Links),
    First ! {token, Token},
    master_loop(First),
    master_round(Collector, Worker, Links, Token, Rounds - 1).

build_ring(Next, 0) -> Next;
build_ring(Next, K) -> build_ring(spawn(fun() -> chain_link(Next) end), K - 1).

master_loop(First) ->
    receive
        {token, 0} -> ok;
        {token, V} -> First ! {token, V - 1}, master_loop(First)
    end.

worker(Collector) ->
    receive
        {calc, N} -> Collector ! {factors, factorize(N)}, worker(Collector);
        stop -> ok
    end.

%% Trial division: 2, then odd divisors while d*d =< n; what is left (> 1)
%% is prime. Same algorithm in every peer.
factorize(N) -> lists:reverse(fact(N, 2, [])).
fact(1, _, Acc) -> Acc;
fact(N, D, Acc) when D * D > N -> [N | Acc];
fact(N, D, Acc) when N rem D =:= 0 -> fact(N div D, D, [D | Acc]);
fact(N, 2, Acc) -> fact(N, 3, Acc);
fact(N, D, Acc) -> fact(N, D + 2, Acc).

collector(Main, 0, 0, Bad) -> Main ! {rings_done, Bad};
collector(Main, Facts, Masters, Bad) ->
    receive
        {factors, F} ->
            Bad1 = case F of ?FACTOR_EXPECTED -> Bad; _ -> Bad + 1 end,
            collector(Main, Facts - 1, Masters, Bad1);
        {master_done, _} -> collector(Main, Facts, Masters - 1, Bad)
    end.

rings(NRings, Links, Token, Rounds) ->
    Main = self(),
    T0 = now_us(),
    Collector = spawn(fun() -> collector(Main, NRings * Rounds, NRings, 0) end),
    Workers = [spawn(fun() -> worker(Collector) end) || _ <- lists:seq(1, NRings)],
    [spawn(fun() -> master(Collector, W, Links, Token, Rounds) end) || W <- Workers],
    Bad = receive {rings_done, B} -> B end,
    Ms = ms_since(T0),
    [W ! stop || W <- Workers],
    Msgs = NRings * Rounds * (Token + 1) * (Links + 1) + 2 * NRings * Rounds + NRings,
    R = result(Bad =:= 0, Ms, rate(Msgs, Ms),
               io_lib:format("~p wrong factorisations", [Bad])),
    R#{extra => [{messages, Msgs}]}.

%% ---------------------------------------------------------------- 6 idle

idle_proc() -> receive stop -> ok end.

wait_run_queues_empty() ->
    case erlang:statistics(total_run_queue_lengths_all) of
        0 -> ok;
        _ -> timer:sleep(10), wait_run_queues_empty()
    end.

idle(N) ->
    Base = erlang:system_info(process_count),
    erlang:garbage_collect(),
    Before = current_rss(),
    T0 = now_us(),
    Pids = [spawn(fun idle_proc/0) || _ <- lists:seq(1, N)],
    wait_run_queues_empty(),            % every process reached its receive
    SpawnMs = ms_since(T0),
    Alive = erlang:system_info(process_count) - Base,
    After = current_rss(),
    Refs = [erlang:monitor(process, P) || P <- Pids],
    [P ! stop || P <- Pids],
    [receive {'DOWN', Ref, process, _, _} -> ok end || Ref <- Refs],
    Left = erlang:system_info(process_count) - Base,
    erlang:garbage_collect(),
    AfterStop = current_rss(),
    Ok = Alive >= N andalso Left =< 0,
    R = result(Ok, SpawnMs, null,
               io_lib:format("alive after spawn ~p (want ~p), left after stop ~p",
                             [Alive, N, Left])),
    R#{bytes_per_actor => (After - Before) / N,
       extra => [{rss_before_bytes, Before}, {rss_after_spawn_bytes, After},
                 {rss_after_stop_bytes, AfterStop}, {actors, N}]}.

%% ---------------------------------------------------------------- 8 pi
%% The main process (coordinator) hands Items work items round-robin to a
%% pool of one worker process per scheduler and sums the replies.

leibniz(From, To) -> leibniz(From, To, 0.0).
leibniz(K, To, Acc) when K >= To -> Acc;
leibniz(K, To, Acc) ->
    Term = 4.0 / (2 * K + 1),
    Acc1 = case K band 1 of 0 -> Acc + Term; 1 -> Acc - Term end,
    leibniz(K + 1, To, Acc1).

pi_worker() ->
    receive
        {work, From, Idx, Start, Terms} ->
            From ! {pi_part, Idx, leibniz(Start, Start + Terms)},
            pi_worker();
        stop -> ok
    end.

pi(Items, Terms) ->
    W = erlang:system_info(schedulers_online),
    Workers = list_to_tuple([spawn(fun pi_worker/0) || _ <- lists:seq(1, W)]),
    Self = self(),
    T0 = now_us(),
    [element(I rem W + 1, Workers) ! {work, Self, I, I * Terms, Terms}
     || I <- lists:seq(0, Items - 1)],
    Sum = lists:foldl(fun(_, Acc) -> receive {pi_part, _, V} -> Acc + V end end,
                      0.0, lists:seq(1, Items)),
    Ms = ms_since(T0),
    [P ! stop || P <- tuple_to_list(Workers)],
    T1 = now_us(),
    Ref = leibniz(0, Items * Terms),
    LoopMs = ms_since(T1),
    Ok = abs(Sum - Ref) =< 1.0e-9,
    R = result(Ok, Ms, null,
               io_lib:format("sum ~.15f, single loop ~.15f", [Sum, Ref])),
    R#{extra => [{plain_loop_ms, LoopMs}, {workers, W}]}.

%% ---------------------------------------------------------------- remote
%% The remote workloads run on two Erlang nodes on 127.0.0.1 connected by
%% Erlang distribution (TCP, no TLS). This node (process A, started by
%% ../run with -name and a private epmd) starts the second node (process B)
%% with OTP's `peer` module, which launches a second `erl` OS process; B halts
%% when its connection to A goes away. B's OS pid is also written to
%% $PEER_PIDFILE so that ../run kills it whatever happens.

transport() -> {str, "Erlang distribution over TCP (loopback)"}.

start_remote_node() ->
    case node() of
        nonode@nohost -> error(not_distributed);
        _ -> ok
    end,
    [_, Host] = string:split(atom_to_list(node()), "@"),
    Name = list_to_atom("troubadour_b_" ++ os:getpid()),
    Ebin = filename:dirname(code:which(?MODULE)),
    Args = ["-pa", Ebin, "-setcookie", atom_to_list(erlang:get_cookie()),
            "-kernel", "inet_dist_use_interface", "{127,0,0,1}",
            "+P", "4000000"],
    {ok, Peer, Node} = peer:start_link(#{name => Name, host => Host,
                                         longnames => true, args => Args,
                                         wait_boot => 30000}),
    OsPid = erpc:call(Node, os, getpid, []),
    case os:getenv("PEER_PIDFILE") of
        false -> ok;
        "" -> ok;
        F -> ok = file:write_file(F, [OsPid, "\n"], [append])
    end,
    {Peer, Node}.

stop_remote_node(Peer) ->
    catch peer:stop(Peer),
    ok.

remote_echo() ->
    receive
        {ping, From, Payload} -> From ! {pong, Payload}, remote_echo();
        stop -> ok
    end.

rclient(Main, Echo, Payload, Remaining, Batch, Echoed) when Remaining =< 0 ->
    Main ! {pair_done, self(), Echoed},
    {Echo, Payload, Batch};
rclient(Main, Echo, Payload, Remaining, Batch, Echoed) ->
    B = min(Batch, Remaining),
    send_rpings(Echo, Payload, B),
    Got = recv_rpongs(B, 0),
    rclient(Main, Echo, Payload, Remaining - B, Batch, Echoed + Got).

send_rpings(_, _, 0) -> ok;
send_rpings(E, P, K) -> E ! {ping, self(), P}, send_rpings(E, P, K - 1).

recv_rpongs(0, Got) -> Got;
recv_rpongs(K, Got) -> receive {pong, _} -> recv_rpongs(K - 1, Got + 1) end.

%% Phase 1: Pairs clients here, Pairs echoes on node B, batches of 100,
%% PerPair echoes per pair; the ping carries Size bytes (one binary, made
%% once) and the client's pid, the pong carries the payload back.
%% Phase 2: RttN sequential round trips from this process to one echo; the
%% first 10 % are discarded; p50 and p99 (nearest rank) in microseconds.
remote_pingpong(Pairs, Size, PerPair, RttN) ->
    {Peer, Node} = start_remote_node(),
    try
        Payload = binary:copy(<<16#a5>>, Size),
        Main = self(),
        Go = make_ref(),
        Echoes = [spawn(Node, ?MODULE, remote_echo, []) || _ <- lists:seq(1, Pairs)],
        Clients = [spawn(fun() ->
                                 receive Go -> ok end,
                                 rclient(Main, E, Payload, PerPair, 100, 0)
                         end) || E <- Echoes],
        T0 = now_us(),
        [C ! Go || C <- Clients],
        Counts = [receive {pair_done, C, N} -> N
                  after 600000 -> error({timeout, "a pair did not finish in 600 s"})
                  end || C <- Clients],
        Ms = ms_since(T0),
        Ok1 = lists:all(fun(N) -> N =:= PerPair end, Counts),
        %% phase 2
        Echo = hd(Echoes),
        Rtts = rtt_loop(Echo, Payload, RttN, []),
        [E ! stop || E <- Echoes],
        Kept = lists:sort(lists:nthtail(RttN div 10, lists:reverse(Rtts))),
        P50 = percentile(Kept, 0.50) / 1000.0,
        P99 = percentile(Kept, 0.99) / 1000.0,
        Ok = Ok1 andalso length(Rtts) =:= RttN,
        R = result(Ok, Ms, rate(2 * PerPair * Pairs, Ms),
                   io_lib:format("echo counts ~p, expected ~p each", [Counts, PerPair])),
        Extra = [{pairs, Pairs}, {size_bytes, Size}, {echoes_per_pair, PerPair},
                 {rtt_p50_us, P50}, {rtt_p99_us, P99}, {rtt_samples, length(Kept)},
                 {tls, false}, {transport, transport()},
                 {remote_node_schedulers,
                  erpc:call(Node, erlang, system_info, [schedulers_online])}],
        R#{extra => Extra}
    after
        stop_remote_node(Peer)
    end.

rtt_loop(_, _, 0, Acc) -> Acc;
rtt_loop(Echo, Payload, K, Acc) ->
    T0 = erlang:monotonic_time(nanosecond),
    Echo ! {ping, self(), Payload},
    receive {pong, _} -> ok
    after 60000 -> error({timeout, "no pong within 60 s"})
    end,
    T1 = erlang:monotonic_time(nanosecond),
    rtt_loop(Echo, Payload, K - 1, [T1 - T0 | Acc]).

%% nearest rank: the ceil(P * N)-th smallest value
percentile(Sorted, P) ->
    N = length(Sorted),
    K = max(1, min(N, ceil(P * N))),
    lists:nth(K, Sorted).

%% Workload 8 with the workers on node B (one per scheduler of B) and the
%% coordinator (this process) here.
remote_pi(Items, Terms) ->
    {Peer, Node} = start_remote_node(),
    try
        W = erpc:call(Node, erlang, system_info, [schedulers_online]),
        Workers = list_to_tuple([spawn(Node, ?MODULE, pi_worker, [])
                                 || _ <- lists:seq(1, W)]),
        Self = self(),
        T0 = now_us(),
        [element(I rem W + 1, Workers) ! {work, Self, I, I * Terms, Terms}
         || I <- lists:seq(0, Items - 1)],
        Sum = lists:foldl(fun(_, Acc) ->
                                  receive {pi_part, _, V} -> Acc + V
                                  after 600000 -> error({timeout, "no reply in 600 s"})
                                  end
                          end, 0.0, lists:seq(1, Items)),
        Ms = ms_since(T0),
        [P ! stop || P <- tuple_to_list(Workers)],
        T1 = now_us(),
        Ref = leibniz(0, Items * Terms),
        LoopMs = ms_since(T1),
        Ok = abs(Sum - Ref) =< 1.0e-9,
        R = result(Ok, Ms, rate(2 * Items, Ms),
                   io_lib:format("sum ~.15f, single loop ~.15f", [Sum, Ref])),
        R#{extra => [{plain_loop_ms, LoopMs}, {workers, W}, {items, Items},
                     {terms, Terms}, {tls, false}, {transport, transport()}]}
    after
        stop_remote_node(Peer)
    end.

%% ---------------------------------------------------------------- helpers

result(true, Ms, Rate, _Why) ->
    #{ok => true, elapsed_ms => Ms, msgs_per_sec => Rate};
result(false, Ms, _Rate, Why) ->
    #{ok => false, elapsed_ms => Ms, msgs_per_sec => null,
      error => "verification failed: " ++ lists:flatten(Why)}.
