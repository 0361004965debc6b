%% Workloads 9 (remote pingpong) and 11 (remote pi) for Erlang/OTP:
%% distribution over TCP (Erlang's default, no TLS) between this node and a
%% second node started with the `peer' module on 127.0.0.1.
%%
%% erl -name a@127.0.0.1 -setcookie C -noshell -pa ebin \
%%     -run troubadour_remote_peer main <workload> <pairs> <size> <quick 0|1>
%% prints one JSON line (see bench/peers/README.md).
-module(troubadour_remote_peer).
-export([main/1, echo/0, worker/0]).

-define(BATCH, 100).

main([Workload, PairsS, SizeS, QuickS]) ->
    Pairs = list_to_integer(PairsS),
    Size = list_to_integer(SizeS),
    Quick = QuickS =:= "1",
    Result = try
        {ok, Peer, Node} = start_node(),
        R = run(Workload, Node, Pairs, Size, Quick),
        peer:stop(Peer),
        R
    catch Class:Reason:Stack ->
        {error, io_lib:format("~p:~p ~p", [Class, Reason, Stack])}
    end,
    report(Workload, Pairs, Size, Result),
    halt(0).

start_node() ->
    Name = list_to_atom("peer" ++ integer_to_list(erlang:unique_integer([positive]))),
    {ok, Peer, Node} = peer:start_link(#{name => Name, host => "127.0.0.1",
                                         longnames => true,
                                         args => ["-setcookie", atom_to_list(erlang:get_cookie()),
                                                  "-pa", filename:absname("ebin")]}),
    {ok, Peer, Node}.

run("remote-pingpong", Node, Pairs, Size, Quick) ->
    Payload = binary:copy(<<90>>, Size),
    Echoes = case Quick of true -> 5000; false -> 200000 end,
    Self = self(),
    EchoPids = [spawn(Node, ?MODULE, echo, []) || _ <- lists:seq(1, Pairs)],
    %% Clients here, released together.
    Clients = [spawn(fun() -> receive go -> ok end,
                              client(E, Payload, Echoes, 0),
                              Self ! {done, self()} end) || E <- EchoPids],
    T0 = erlang:monotonic_time(nanosecond),
    [C ! go || C <- Clients],
    [receive {done, C} -> ok end || C <- Clients],
    Elapsed = erlang:monotonic_time(nanosecond) - T0,
    %% Latency: one request-reply at a time.
    Rounds = case Quick of true -> 1000; false -> 20000 end,
    [E1 | _] = EchoPids,
    Rtts = [rtt(E1, Payload) || _ <- lists:seq(1, Rounds)],
    Kept = lists:sort(lists:nthtail(Rounds div 10, Rtts)),
    [exit(E, kill) || E <- EchoPids],
    {ok, #{elapsed_ns => Elapsed, messages => 2 * Echoes * Pairs,
           p50 => pct(Kept, 0.50), p99 => pct(Kept, 0.99)}};
run("remote-pi", Node, _Pairs, _Size, Quick) ->
    {Items, Terms} = case Quick of true -> {100, 1000}; false -> {1000, 10000} end,
    Workers = [spawn(Node, ?MODULE, worker, [])
               || _ <- lists:seq(1, rpc:call(Node, erlang, system_info, [schedulers]))],
    W = list_to_tuple(Workers),
    T0 = erlang:monotonic_time(nanosecond),
    [element(I rem tuple_size(W) + 1, W) ! {work, self(), I, Terms} || I <- lists:seq(0, Items - 1)],
    Sum = collect(Items, 0.0),
    Elapsed = erlang:monotonic_time(nanosecond) - T0,
    Ref = leibniz(0, Items * Terms),
    [exit(P, kill) || P <- Workers],
    case abs(Sum - Ref) =< 1.0e-9 of
        true -> {ok, #{elapsed_ns => Elapsed, messages => 2 * Items, workers => length(Workers)}};
        false -> {error, io_lib:format("sum ~p differs from the plain loop's ~p", [Sum, Ref])}
    end.

client(_Echo, _Payload, Target, Target) -> ok;
client(Echo, Payload, Target, Sent) ->
    N = min(?BATCH, Target - Sent),
    [Echo ! {ping, self(), Sent + I, Payload} || I <- lists:seq(0, N - 1)],
    wait(Sent, Sent + N, byte_size(Payload)),
    client(Echo, Payload, Target, Sent + N).

wait(Next, Next, _) -> ok;
wait(Next, End, Size) ->
    receive {pong, Next, P} when byte_size(P) =:= Size -> wait(Next + 1, End, Size) end.

echo() ->
    receive
        {ping, From, Seq, P} -> From ! {pong, Seq, P}, echo();
        {rtt, From, Ref, P} -> From ! {Ref, P}, echo()
    end.

rtt(Echo, Payload) ->
    Ref = make_ref(),
    T = erlang:monotonic_time(nanosecond),
    Echo ! {rtt, self(), Ref, Payload},
    receive {Ref, _} -> erlang:monotonic_time(nanosecond) - T end.

pct(Sorted, P) ->
    N = length(Sorted),
    I = max(1, min(N, ceil(N * P))),
    lists:nth(I, Sorted) / 1000.

worker() ->
    receive
        {work, From, I, Terms} -> From ! {partial, leibniz(I * Terms, Terms)}, worker()
    end.

collect(0, Sum) -> Sum;
collect(N, Sum) -> receive {partial, V} -> collect(N - 1, Sum + V) end.

leibniz(Start, Terms) -> leibniz(Start, Start + Terms, 0.0).
leibniz(K, End, Acc) when K >= End -> Acc;
leibniz(K, End, Acc) ->
    T = 4.0 / (2 * K + 1),
    leibniz(K + 1, End, case K rem 2 of 0 -> Acc + T; 1 -> Acc - T end).

report(Workload, Pairs, Size, Result) ->
    {ok, [[Hwm]]} = {ok, [[rss_peak()]]},
    Common = io_lib:format("\"workload\":\"~s\",\"impl\":\"erlang\",\"tls\":false,"
                           "\"transport\":\"Erlang distribution over TCP (OTP ~s)\","
                           "\"otp_release\":\"~s\",\"peak_rss_bytes\":~s",
                           [Workload, erlang:system_info(otp_release),
                            erlang:system_info(otp_release), Hwm]),
    Body = case Result of
        {ok, #{elapsed_ns := E, messages := M} = R} ->
            Ms = E / 1.0e6,
            Extra = case R of
                #{p50 := P50, p99 := P99} ->
                    io_lib:format(",\"rtt_p50_us\":~.3f,\"rtt_p99_us\":~.3f,\"pairs\":~b,\"size_bytes\":~b",
                                  [P50, P99, Pairs, Size]);
                #{workers := W} -> io_lib:format(",\"workers\":~b", [W])
            end,
            io_lib:format("\"ok\":true,\"elapsed_ms\":~.3f,\"msgs_per_sec\":~.3f,\"messages\":~b~s",
                          [Ms, M / (E / 1.0e9), M, Extra]);
        {error, Why} ->
            io_lib:format("\"ok\":false,\"elapsed_ms\":null,\"msgs_per_sec\":null,\"error\":\"~s\"",
                          [escape(lists:flatten(Why))])
    end,
    io:format("{~s,~s}~n", [Common, Body]).

rss_peak() ->
    case file:read_file("/proc/self/status") of
        {ok, Bin} ->
            case re:run(Bin, "VmHWM:\\s+(\\d+) kB", [{capture, [1], list}]) of
                {match, [Kb]} -> integer_to_list(list_to_integer(Kb) * 1024);
                _ -> "null"
            end;
        _ -> "null"
    end.

escape(S) -> [C || C <- S, C =/= $", C =/= $\\, C >= 32].
