%% delay_bridge_migrate: moves the messages the delayed-message plugin holds
%% on this node into delay-bridge, on time, none lost, none twice.
%%
%% Where the messages are. The plugin (rabbitmq-delayed-message-exchange,
%% 4.0.x up to 4.2.x, src/rabbit_delayed_message.erl) keeps each node's
%% delayed messages in a Mnesia table of that node, named
%% rabbit_delayed_message<node name> (disc_copies, type bag):
%%
%%     #delay_entry{delay_key = #delay_key{timestamp, exchange}, delivery, ref}
%%
%% timestamp: the due time (epoch ms); exchange: the whole #exchange record
%% of the x-delayed-message exchange it was published to; delivery: the
%% message (an mc state since 3.13); ref: make_ref(), only to keep equal
%% keys apart in the bag. Beside it the index rabbit_delayed_message<node>_index
%% (ordered_set of #delay_index{delay_key, const = true}) orders the keys by
%% due time. The plugin's one process, the gen_server registered as
%% rabbit_delayed_message, is the only writer: delay_message/3 writes the
%% index then the entry (dirty), and a timer on the earliest index key fires
%% {deliver, Key}: it dirty-reads every entry of Key, routes them, and
%% dirty-deletes Key from both tables. Mnesia is local to the node, so this
%% module runs there: `rabbitmqctl eval` compiles it from its source text
%% and loads it (delay-bridge-migrate-plugin does that), no build step, no
%% include file: the records are read by position (element/2), which is
%% what the plugin's tables and RabbitMQ's #exchange and #resource records
%% have been since 3.8.
%%
%% Never fired and moved both. An entry the plugin fires between a reader's
%% read and its delete would be delivered by the plugin AND held by the
%% bridge: the plugin's dirty reads take no lock, so a Mnesia transaction
%% alone does not keep it out. Instead each step that takes entries out of
%% the plugin's table runs INSIDE the plugin's own process, between two of
%% its messages (sys:replace_state/3 with a fun that leaves its state as it
%% was): nothing fires, and nothing is written, while it runs. The step is
%% one Mnesia transaction that deletes the N earliest entries (and their
%% index keys) and writes each to a journal table of ours,
%% delay_bridge_migration (disc_copies, set, on this node), keyed by the
%% entry's identity. The plugin's timer may still point at a key that is
%% gone: it fires, reads nothing, deletes the index key and sets its timer
%% on the next one (its own code for an empty read). Publishers calling the
%% plugin wait for the step (milliseconds for a batch of 1000). With the
%% plugin's process not running (disabled, or a fixture table), the same
%% transaction runs in the caller.
%%
%% Moving out of the journal. Each journal entry is delivered to the queue
%% delay-bridge.delayed of the exchange's vhost through rabbit_queue_type,
%% as a channel would, with a correlation number, so the queue confirms it
%% (a classic queue: once the message is on disk, the message being marked
%% durable); only then is it deleted from the journal (a transaction per
%% batch). The message keeps its exchange and routing keys (its mc
%% annotations: a consumer of the queue sees the x-delayed-message exchange
%% in basic.deliver's exchange, which is where a delayed_exchanges route of
%% the bridge sends it back), its properties, headers and body, plus:
%%
%%     x-delay-until            the plugin's timestamp (epoch ms): the due
%%                              time the bridge holds it to; before the
%%                              plugin's x-delay in the bridge's precedence
%%     x-delay-bridge-migrated  the entry's identity (32 hex digits: sha-256
%%                              of the entry's ref, timestamp and exchange)
%%     x-delay-key              "migrated:" ++ identity, unless the message
%%                              has an x-delay-key of its own
%%
%% x-delay, when positive, becomes -x-delay, as the plugin delivers it; and
%% the mc annotation durable = true (the plugin held it on disk; a
%% message published without delivery_mode leaves the bridge with
%% delivery_mode 2).
%%
%% Crash at any point. A step either moved its entries into the journal or
%% did not (one transaction). A journal entry is deleted only after the
%% queue confirmed it. The CLI that drives this (kill -9, Ctrl-C) stops it
%% only between units of work (in_worker/1); killed between a confirm and
%% the journal's delete (this process by hand, the node), the rerun delivers
%% the entry again. The bridge then holds it once: both copies carry the
%% same x-delay-key, and a newer message with a pending key replaces the
%% pending one (README "Headers"). The key was chosen over a dedupe of its
%% own on x-delay-bridge-migrated because the bridge's keys already are
%% durable (CANCEL records in its WAL), survive its own crash, and show in
%% /pending. What it cannot catch is a second copy of a message whose due
%% time passed and which the bridge already published: that needs the node
%% (or this process) to die in the milliseconds between the queue's confirm
%% and the journal's delete of an overdue message -- the window the plugin
%% has for every message it fires (it routes, then deletes).
%%
%% Due times that pass during the move. Entries are taken earliest first,
%% so a message due during the move is moved within a batch of falling
%% due; until it is taken, the plugin fires it itself, on time. A moved
%% message whose x-delay-until is in the past when the bridge takes it is
%% published at once (the bridge's rule for a due time in the past).
%%
%% Entry points (each returns ok or {error, Text}, and prints as it goes to
%% the caller's group leader, i.e. the rabbitmqctl that called it):
%%   run(#{dry_run, batch, follow, rate, queue})  the migration, or its dry run
%%   status()                               counts, as a map
-module(delay_bridge_migrate).

-export([run/1, status/0, table/0, index_table/0, journal/0]).

%% No macros and no include files: the module is parsed from its text by
%% erl_scan and erl_parse inside `rabbitmqctl eval` (no preprocessor there).
%% delay_bridge_migration: the journal; rabbit_delayed_message: the plugin's
%% process; a queue's confirm is awaited up to 120 s.

table() -> list_to_atom("rabbit_delayed_message" ++ atom_to_list(node())).
index_table() -> list_to_atom(atom_to_list(table()) ++ "_index").
journal() -> delay_bridge_migration.

%% --------------------------------------------------------------------------

run(Opts0) ->
    Opts = maps:merge(#{dry_run => false, batch => 2000, follow => false, rate => 0,
                        queue => <<"delay-bridge.delayed">>}, Opts0),
    case table_exists(table()) of
        false ->
            say("no table ~s on ~s: the delayed-message plugin holds nothing here "
                "(it is not enabled, or was disabled, which drops its table)~n", [table(), node()]),
            journal_only(Opts);
        true ->
            case maps:get(dry_run, Opts) of
                true -> dry_run();
                false -> in_worker(Opts)
            end
    end.

journal_only(Opts) ->
    case table_exists(delay_bridge_migration) andalso mnesia:table_info(delay_bridge_migration, size) > 0 of
        false -> ok;
        true when map_get(dry_run, Opts) -> dry_run();
        true -> in_worker(Opts)
    end.

status() ->
    #{node => node(), table => table(),
      held => size_of(table()), journal => size_of(delay_bridge_migration),
      plugin_running => whereis(rabbit_delayed_message) =/= undefined}.

size_of(T) ->
    case table_exists(T) of
        true -> mnesia:table_info(T, size);
        false -> 0
    end.

table_exists(T) ->
    lists:member(T, mnesia:system_info(tables)).

%% Printed on the caller's terminal; once the caller is gone, on nobody's
%% (an io request to a dead group leader raises: never let it stop a batch).
say(Fmt, Args) ->
    _ = (catch io:format(Fmt, Args)),
    ok.

%% The migration runs in a process of its own, registered as
%% delay_bridge_migrate (one at a time per node: a run started while an
%% earlier one is still finishing waits for it), not in the process
%% rabbitmqctl eval runs in. When the caller's node goes away (kill -9 of the
%% CLI or of this script, Ctrl-C, a lost connection), the worker finishes the
%% unit it is in -- a step into the journal, or a batch delivered, confirmed
%% and deleted from the journal -- and stops there. Stopping between a
%% delivery and its journal delete would deliver it again on the next run:
%% harmless while the bridge holds it (same key), a second delivery if the
%% bridge already published it (its due time passed: the test's short
%% delays showed it). That window remains only for the node itself dying,
%% the same window the plugin has for every message it fires (it routes,
%% then deletes).
in_worker(Opts) ->
    wait_previous(120000),
    Parent = self(),
    Caller = node(group_leader()),
    {Pid, MRef} = spawn_monitor(
                    fun() ->
                            true = register(delay_bridge_migrate, self()),
                            watch_caller(Caller, self()),
                            Parent ! {self(), result, catch migrate(Opts)}
                    end),
    receive
        {Pid, result, R} ->
            erlang:demonitor(MRef, [flush]),
            R;
        {'DOWN', MRef, process, Pid, Why} ->
            {error, Why}
    end.

wait_previous(Ms) ->
    case whereis(delay_bridge_migrate) of
        undefined -> ok;
        Prev ->
            say("waiting for the run before this one to finish its unit of work~n", []),
            MRef = erlang:monitor(process, Prev),
            receive {'DOWN', MRef, _, _, _} -> ok
            after Ms -> error(earlier_run_still_running)
            end
    end.

watch_caller(Caller, Worker) ->
    case Caller =:= node() of
        true -> ok;
        false ->
            spawn(fun() ->
                          erlang:monitor_node(Caller, true),
                          MRef = erlang:monitor(process, Worker),
                          receive
                              {nodedown, Caller} -> Worker ! caller_gone;
                              {'DOWN', MRef, _, _, _} -> ok
                          end
                  end),
            ok
    end.

%% True once the caller is gone (checked between units of work).
caller_gone() ->
    case get(caller_gone) of
        true -> true;
        _ ->
            receive
                caller_gone ->
                    put(caller_gone, true),
                    group_leader(whereis(user), self()),
                    logger:notice("delay_bridge_migrate: the caller is gone; stopped after a whole unit "
                                  "of work (~b in the plugin's table, ~b in the journal): run it again",
                                  [size_of(table()), size_of(delay_bridge_migration)]),
                    true
            after 0 -> false
            end
    end.

%% --------------------------------------------------------------------------
%% Dry run: what would move, per vhost and exchange, and the span of due times

dry_run() ->
    Now = erlang:system_time(millisecond),
    Keys = case table_exists(table()) of
               true -> mnesia:dirty_select(table(), [{{'_', '$1', '_', '_'}, [], ['$1']}]);
               false -> []
           end,
    JKeys = case table_exists(delay_bridge_migration) of
                true -> mnesia:dirty_select(delay_bridge_migration, [{{'_', '_', '$1', '$2', '_', '_'}, [],
                                                        [{{'$1', '$2'}}]}]);
                false -> []
            end,
    Per = lists:foldl(
            fun({TS, XName}, Acc) ->
                    K = {element(2, XName), element(4, XName)},
                    {N, Min, Max, Due} = maps:get(K, Acc, {0, TS, TS, 0}),
                    Acc#{K => {N + 1, min(Min, TS), max(Max, TS), Due + (case TS =< Now of
                                                                           true -> 1;
                                                                           false -> 0
                                                                       end)}}
            end, #{},
            [{element(2, Key), element(2, element(3, Key))} || Key <- Keys] ++ JKeys),
    say("dry run on ~s: ~b held by the plugin (~s), ~b in the journal (~s), nothing changed~n",
        [node(), length(Keys), table(), length(JKeys), delay_bridge_migration]),
    [say("  vhost ~s exchange ~s: ~b messages, due ~s .. ~s~s~n",
         [VH, X, N, iso(Min), iso(Max),
          case Due of 0 -> ""; _ -> io_lib:format(" (~b already due)", [Due]) end])
     || {{VH, X}, {N, Min, Max, Due}} <- lists:sort(maps:to_list(Per))],
    ok.

iso(Ms) ->
    calendar:system_time_to_rfc3339(Ms, [{unit, millisecond}, {offset, "Z"}]).

%% --------------------------------------------------------------------------
%% The migration

migrate(Opts) ->
    ok = ensure_journal(),
    T0 = erlang:monotonic_time(millisecond),
    Left0 = size_of(table()),
    say("migrating ~b messages held by the plugin on ~s (~b in the journal from an earlier run) "
        "into ~s of each vhost, ~b at a time~s~n",
        [Left0, node(), size_of(delay_bridge_migration), maps:get(queue, Opts), maps:get(batch, Opts),
         case maps:get(follow, Opts) of true -> ", following new ones until stopped"; false -> "" end]),
    loop(Opts, #{moved => 0, t0 => T0, last => T0, queues => #{}}).

loop(Opts, S0) ->
    case caller_gone() orelse drain_journal(Opts, S0) of
        true ->
            {error, caller_gone};
        {error, _} = E ->
            E;
        {ok, S1} ->
            S2 = progress(S1, false),
            case caller_gone() orelse take(maps:get(batch, Opts)) of
                true ->
                    {error, caller_gone};
                {ok, 0} when map_get(follow, Opts) ->
                    timer:sleep(500),
                    loop(Opts, S2);
                {ok, 0} ->
                    _ = progress(S2, true),
                    ok;
                {ok, _N} ->
                    pace(maps:get(rate, Opts), S2),
                    loop(Opts, S2);
                {error, R} ->
                    say("error: could not take entries out of ~s: ~p~n", [table(), R]),
                    {error, R}
            end
    end.

%% --rate R: no more than R messages a second on average (0: no limit).
pace(0, _S) ->
    ok;
pace(Rate, #{moved := M, t0 := T0}) ->
    Ahead = M * 1000 div Rate - (erlang:monotonic_time(millisecond) - T0),
    case Ahead > 0 of
        true -> timer:sleep(Ahead);
        false -> ok
    end.

%% A line a second while something changes (--follow says nothing while idle).
progress(S = #{moved := M, t0 := T0, last := Last}, Final) ->
    Now = erlang:monotonic_time(millisecond),
    case Final orelse Now - Last >= 1000 of
        false -> S;
        true ->
            Secs = max(Now - T0, 1) / 1000,
            Seen = {M, size_of(table()), size_of(delay_bridge_migration)},
            {_, Left, J} = Seen,
            case Final orelse Seen =/= maps:get(seen, S, none) of
                true ->
                    say("~s ~b moved, ~b left in the plugin's table, ~b in the journal, ~.1f s, ~b msg/s~n",
                        [case Final of true -> "done:"; false -> "progress:" end,
                         M, Left, J, Secs, round(M / Secs)]);
                false -> ok
            end,
            S#{last => Now, seen => Seen}
    end.

ensure_journal() ->
    case table_exists(delay_bridge_migration) of
        true -> ok;
        false ->
            case mnesia:create_table(delay_bridge_migration, [{attributes, [id, due, exchange, message, ref]},
                                                {type, set}, {disc_copies, [node()]}]) of
                {atomic, ok} -> ok;
                {aborted, {already_exists, _}} -> ok;
                {aborted, R} -> error({cannot_create_journal, R})
            end
    end,
    ok = mnesia:wait_for_tables([delay_bridge_migration], 30000).

%% Up to N of the earliest entries out of the plugin's tables into the journal,
%% inside the plugin's process when it runs (the essay: "Never fired and moved both").
take(N) ->
    Step = fun() -> take_step(N) end,
    R = case whereis(rabbit_delayed_message) of
            undefined ->
                Step();
            Pid ->
                Me = self(),
                Tag = make_ref(),
                try
                    _ = sys:replace_state(Pid, fun(State) ->
                                                       Me ! {Tag, catch Step()},
                                                       State
                                               end, 300000),
                    receive {Tag, Res} -> Res after 0 -> {aborted, no_answer} end
                catch
                    exit:{noproc, _} -> Step();
                    exit:Why -> {aborted, Why}
                end
        end,
    case R of
        {atomic, Taken} -> {ok, Taken};
        {aborted, Why2} -> {error, Why2};
        Other -> {error, Other}
    end.

%% The keys are found dirty first, walking the index: mnesia:next/2 inside a
%% transaction that has deleted from the table walks the transaction's store
%% at every call (quadratic: 5,000 entries took over a minute). The
%% transaction then reads each key's entries, journals them and deletes the
%% key from both tables, under table locks instead of a lock per key. By
%% key, not by object: the key holds the whole #exchange record, maps and
%% all, which an ets match cannot look up by key, so mnesia:delete_object/3
%% on this bag scans the whole table for each entry (quadratic again: 120
%% msg/s at 20,000 held); what a key holds is read and deleted in the same
%% transaction, inside the plugin's process, so nothing written under it is
%% lost. Entries whose key is not in the index (none should be) are taken
%% in table order once the index is exhausted.
take_step(N) ->
    case table_exists(table()) of
        true -> take_step(N, table(), index_table());
        false -> {atomic, 0}   %% the plugin disabled (its tables dropped): the journal only
    end.

take_step(N, T, I) ->
    HasIndex = table_exists(I),
    Keys0 = case HasIndex of
                true -> index_keys(I, mnesia:dirty_first(I), N, []);
                false -> []
            end,
    Keys = case length(Keys0) < N of
               true -> Keys0 ++ orphans(T, mnesia:dirty_first(T), N - length(Keys0),
                                        maps:from_keys(Keys0, true), []);
               false -> Keys0
           end,
    mnesia:transaction(
      fun() ->
              mnesia:write_lock_table(T),
              mnesia:write_lock_table(delay_bridge_migration),
              case HasIndex of true -> mnesia:write_lock_table(I); false -> ok end,
              lists:foldl(fun(K, Acc) ->
                                  Es = mnesia:read(T, K, write),
                                  lists:foreach(fun journal_entry/1, Es),
                                  mnesia:delete(T, K, write),
                                  case HasIndex of true -> mnesia:delete(I, K, write); false -> ok end,
                                  Acc + length(Es)
                          end, 0, Keys)
      end).

%% Up to N keys (one key may hold several entries: a few more is fine).
index_keys(_I, '$end_of_table', _N, Acc) -> lists:reverse(Acc);
index_keys(_I, _K, N, Acc) when N =< 0 -> lists:reverse(Acc);
index_keys(I, K, N, Acc) -> index_keys(I, mnesia:dirty_next(I, K), N - 1, [K | Acc]).

orphans(_T, '$end_of_table', _N, _Seen, Acc) -> lists:reverse(Acc);
orphans(_T, _K, N, _Seen, Acc) when N =< 0 -> lists:reverse(Acc);
orphans(T, K, N, Seen, Acc) ->
    Next = mnesia:dirty_next(T, K),
    case maps:is_key(K, Seen) of
        true -> orphans(T, Next, N, Seen, Acc);
        false -> orphans(T, Next, N - 1, Seen, [K | Acc])
    end.

%% #delay_entry{delay_key = #delay_key{timestamp, exchange}, delivery, ref}
journal_entry({_, {_, TS, X}, Msg, Ref}) ->
    XName = element(2, X),
    Id = identity(Ref, TS, XName),
    mnesia:write({delay_bridge_migration, Id, TS, XName, Msg, Ref}).

identity(Ref, TS, XName) ->
    <<H:16/binary, _/binary>> = crypto:hash(sha256, term_to_binary({Ref, TS, XName})),
    list_to_binary([io_lib:format("~2.16.0b", [B]) || <<B>> <= H]).

%% --------------------------------------------------------------------------
%% Journal -> delay-bridge.delayed, confirmed, then out of the journal

drain_journal(Opts, S) ->
    Batch = maps:get(batch, Opts),
    case caller_gone() orelse mnesia:dirty_first(delay_bridge_migration) of
        true ->
            {error, caller_gone};
        '$end_of_table' ->
            {ok, S};
        _ ->
            Recs = first_n(Batch),
            case publish(Recs, Opts, S) of
                {ok, Done, S1} ->
                    {atomic, ok} = mnesia:transaction(
                                     fun() -> [mnesia:delete({delay_bridge_migration, Id}) || Id <- Done], ok end),
                    S2 = S1#{moved := maps:get(moved, S1) + length(Done)},
                    case length(Done) < length(Recs) of
                        true ->
                            say("error: ~b of ~b messages not confirmed by their queue; "
                                "they stay in the journal: run again~n",
                                [length(Recs) - length(Done), length(Recs)]),
                            {error, not_confirmed};
                        false ->
                            drain_journal(Opts, progress(S2, false))
                    end;
                {error, _} = E ->
                    E
            end
    end.

first_n(N) ->
    first_n(mnesia:dirty_first(delay_bridge_migration), N, []).

first_n('$end_of_table', _, Acc) -> Acc;
first_n(_, 0, Acc) -> Acc;
first_n(Key, N, Acc) ->
    Next = mnesia:dirty_next(delay_bridge_migration, Key),
    case mnesia:dirty_read(delay_bridge_migration, Key) of
        [Rec] -> first_n(Next, N - 1, [Rec | Acc]);
        [] -> first_n(Next, N, Acc)
    end.

%% Deliver each record to its vhost's queue with a correlation number; wait
%% for the queues' confirms. {ok, [Id confirmed], S}.
publish(Recs, Opts, S0) ->
    {Sent, QT, S1} =
        lists:foldl(
          fun({delay_bridge_migration, Id, TS, XName, Msg0, _Ref}, {Acc, QT0, SA}) ->
                  case queue_for(element(2, XName), Opts, SA) of
                      {ok, Q, SB} ->
                          Seq = map_size(Acc) + 1,
                          Msg = prepare(Id, TS, Msg0),
                          case rabbit_queue_type:deliver([Q], Msg, #{correlation => Seq}, QT0) of
                              {ok, QT1, _Actions} -> {Acc#{Seq => Id}, QT1, SB};
                              {error, R} ->
                                  say("error: delivering to ~s: ~p~n", [queue_text(Q), R]),
                                  {Acc, QT0, SB}
                          end;
                      {error, R, SB} ->
                          say("error: no queue for vhost ~s: ~p~n", [element(2, XName), R]),
                          {Acc, QT0, SB}
                  end
          end, {#{}, rabbit_queue_type:init(), S0}, Recs),
    Confirmed = await_confirms(Sent, QT, #{}, erlang:monotonic_time(millisecond) + 120000),
    {ok, [maps:get(Seq, Sent) || Seq <- maps:keys(Confirmed)], S1}.

queue_text(Q) ->
    {resource, VH, queue, Name} = amqqueue:get_name(Q),
    io_lib:format("queue '~s' in vhost '~s'", [Name, VH]).

await_confirms(Sent, _QT, Confirmed, _Deadline) when map_size(Sent) =:= map_size(Confirmed) ->
    Confirmed;
await_confirms(Sent, QT, Confirmed, Deadline) ->
    Left = Deadline - erlang:monotonic_time(millisecond),
    receive
        {'$gen_cast', {queue_event, QRef, Evt}} ->
            case rabbit_queue_type:handle_event(QRef, Evt, QT) of
                {ok, QT1, Actions} ->
                    C = lists:foldl(fun({settled, _, Seqs}, A) ->
                                            maps:merge(A, maps:from_list([{Sq, true} || Sq <- Seqs]));
                                       (_, A) -> A
                                    end, Confirmed, Actions),
                    await_confirms(Sent, QT1, C, Deadline);
                _ ->
                    Confirmed
            end;
        {'DOWN', _, process, _, _} ->
            Confirmed
    after max(Left, 0) ->
            Confirmed
    end.

%% The queue delay-bridge.delayed of a vhost, declared as the bridge and the
%% shim declare it (durable, x-queue-type classic) when it is missing.
queue_for(VHost, Opts, S = #{queues := Qs}) ->
    QName = {resource, VHost, queue, maps:get(queue, Opts)},
    case rabbit_amqqueue:lookup(QName) of
        {ok, Q} ->
            {ok, Q, S};
        {error, not_found} ->
            Args = [{<<"x-queue-type">>, longstr, <<"classic">>}],
            case rabbit_amqqueue:declare(QName, true, false, Args, none, <<"delay-bridge-migrate">>) of
                {new, Q} ->
                    say("declared the queue '~s' in vhost '~s' (durable, classic)~n",
                        [maps:get(queue, Opts), VHost]),
                    {ok, Q, S#{queues := Qs#{VHost => true}}};
                {existing, Q} ->
                    {ok, Q, S};
                Other ->
                    {error, Other, S}
            end
    end.

prepare(Id, TS, Msg0) ->
    Msg1 = mc:set_annotation(<<"x-delay-until">>, TS, swap_delay(Msg0)),
    Msg2 = mc:set_annotation(<<"x-delay-bridge-migrated">>, Id, Msg1),
    Msg3 = case mc:x_header(<<"x-delay-key">>, Msg2) of
               undefined -> mc:set_annotation(<<"x-delay-key">>, <<"migrated:", Id/binary>>, Msg2);
               _ -> Msg2
           end,
    mc:set_annotation(durable, true, Msg3).

%% x-delay = -Delay, as the plugin writes it on the messages it delivers
%% (rabbit_delayed_message_utils:swap_delay_header/1): what the consumer would
%% have seen, and never a positive x-delay on what the bridge publishes back to
%% an x-delayed-message exchange -- the bridge rewrites x-delay only when it
%% held the message (a due time already passed leaves it as it came), and the
%% plugin, still enabled during the move, would delay a positive one again.
swap_delay(Msg) ->
    case mc:x_header(<<"x-delay">>, Msg) of
        {_, D} when is_integer(D), D > 0 -> mc:set_annotation(<<"x-delay">>, -D, Msg);
        {_, D} when is_float(D), D >= 1 -> mc:set_annotation(<<"x-delay">>, -trunc(D), Msg);
        {_, D} when is_binary(D) ->
            case catch binary_to_integer(string:trim(D)) of
                I when is_integer(I), I > 0 -> mc:set_annotation(<<"x-delay">>, -I, Msg);
                _ -> Msg
            end;
        _ -> Msg
    end.
