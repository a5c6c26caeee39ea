%% EUnit cases of rabbit_exchange_type_delay_bridge:delay_asked/2, the one
%% function that says whether a message published to an x-delayed-message
%% exchange goes to delay-bridge.delayed (true) or is routed by its
%% x-delayed-type at once (false). Headers are given as the broker hands
%% them to the shim: AMQP 1.0 kinds on 4.x (mc:x_header/2: long, int, byte,
%% utf8, binary, timestamp in ms, ...), AMQP 0-9-1 kinds on 3.x (long,
%% signedint, longstr, decimal, timestamp converted to ms, ...); `unreadable`
%% is what the 4.x route passes for a header mc cannot convert (a decimal).
%%
%% EUnit's naming (*_test/0), but no EUnit: the Debian roots of RabbitMQ
%% 4.0 and 4.3 do not ship it. run/0 runs every *_test function, prints one
%% line each and halts with 0 when all pass, 1 otherwise:
%%
%%   erl -noshell -pa test -pa <ebin> -s rabbit_exchange_type_delay_bridge_tests run

-module(rabbit_exchange_type_delay_bridge_tests).
-export([run/0]).
-compile([export_all, nowarn_export_all]).

-define(assert(E), check(?LINE, ??E, E, true)).
-define(assertNot(E), check(?LINE, ??E, E, false)).

check(_Line, _Text, Want, Want) -> ok;
check(Line, Text, Got, Want) -> erlang:error({failed, Line, Text, {got, Got}, {want, Want}}).

run() ->
    Tests = [F || {F, 0} <- ?MODULE:module_info(exports),
                  lists:suffix("_test", atom_to_list(F))],
    Failed = lists:filter(
               fun(F) ->
                       try ?MODULE:F() of
                           _ -> io:format("ok   ~s~n", [F]), false
                       catch C:R ->
                               io:format("FAIL ~s: ~p:~p~n", [F, C, R]), true
                       end
               end, lists:sort(Tests)),
    io:format("~b of ~b passed (OTP ~s)~n", [length(Tests) - length(Failed), length(Tests),
                                            erlang:system_info(otp_release)]),
    halt(case Failed of [] -> 0; _ -> 1 end).

-define(NOW, 1800000000000).  %% 2027-01-15, epoch ms

asked(Headers) ->
    Get = fun(K) -> proplists:get_value(K, Headers) end,
    rabbit_exchange_type_delay_bridge:delay_asked(Get, ?NOW).

xd(V) -> asked([{<<"x-delay">>, V}]).

no_header_test() ->
    ?assertNot(asked([])),
    ?assertNot(asked([{<<"other">>, {long, 5000}}])).

x_delay_integer_kinds_test() ->
    [?assert(xd({K, 1500})) || K <- [long, int, short, byte, ubyte, ushort, uint, ulong,
                                     signedint, unsignedbyte, unsignedshort, unsignedint]],
    ?assert(xd({long, 1})),
    ?assert(xd({long, 4294967295})).

x_delay_not_positive_test() ->
    ?assertNot(xd({int, 0})),
    ?assertNot(xd({int, -1000})),
    ?assertNot(xd({long, -(1 bsl 40)})),
    ?assertNot(xd({double, -250.5})),
    ?assertNot(xd({utf8, <<"-250">>})),
    ?assertNot(xd({double, 0.9})).

x_delay_plugin_bound_test() ->
    %% the plugin routed x-delay above 2^32-1 at once (Erlang's timer bound)
    ?assertNot(xd({long, 4294967296})).

x_delay_float_decimal_test() ->
    ?assert(xd({float, 1500.75})),
    ?assert(xd({double, 1500.9})),
    ?assert(xd({decimal, {1, 15009}})),        %% 0-9-1 decimal (3.x): 1500.9
    ?assertNot(xd({decimal, {4, 9999}})),      %% 0.9999 -> 0
    ?assertNot(xd(unreadable)).                %% 4.x: mc cannot read a decimal

x_delay_text_test() ->
    [?assert(xd({K, <<"1500">>})) || K <- [utf8, longstr]],
    ?assert(xd({utf8, <<" 1500 ">>})),
    ?assert(xd({utf8, <<"+1500">>})),
    ?assert(xd({utf8, <<"1500.5">>})),
    ?assert(xd({utf8, <<"1500.">>})),
    ?assertNot(xd({utf8, <<".5">>})),
    ?assertNot(xd({utf8, <<"abc">>})),
    ?assertNot(xd({utf8, <<"">>})),
    ?assertNot(xd({utf8, <<"+">>})),
    ?assertNot(xd({utf8, <<"0x10">>})),
    ?assertNot(xd({utf8, <<"\t5">>})),
    ?assertNot(xd({utf8, <<"1,5">>})),
    ?assertNot(xd({utf8, <<"99999999999999999999999">>})).

x_delay_other_kinds_test() ->
    %% a byte array is not text (the bridge reads none as a delay)
    ?assertNot(xd({binary, <<"1500">>})),
    ?assertNot(xd({boolean, true})),
    ?assertNot(xd({bool, true})),
    ?assertNot(xd(null)),
    ?assertNot(xd({timestamp, ?NOW + 5000})),
    ?assertNot(xd({list, [{long, 5}]})).

bridge_id_stops_loops_test() ->
    Id = {<<"x-delay-bridge-id">>, {utf8, <<"b1:42">>}},
    ?assertNot(asked([Id, {<<"x-delay">>, {long, 5000}}])),
    ?assertNot(asked([Id, {<<"x-delay-until">>, {long, ?NOW + 5000}}])),
    ?assertNot(asked([Id, {<<"x-opt-delivery-delay">>, {long, 5000}}])),
    %% present whatever its value
    ?assertNot(asked([{<<"x-delay-bridge-id">>, {long, 0}}, {<<"x-delay">>, {long, 5000}}])).

x_delay_until_test() ->
    U = fun(V) -> asked([{<<"x-delay-until">>, V}]) end,
    ?assert(U({long, ?NOW + 1})),
    ?assertNot(U({long, ?NOW})),
    ?assertNot(U({long, ?NOW - 1})),
    ?assert(U({timestamp, ?NOW + 1000})),
    ?assertNot(U({timestamp, ?NOW - 1000})),
    ?assert(U({double, ?NOW + 10.5})),
    ?assert(U({utf8, integer_to_binary(?NOW + 5000)})),
    ?assert(U({utf8, <<"2027-01-15T08:00:01.000Z">>})),   %% NOW is 2027-01-15T08:00:00Z
    ?assertNot(U({utf8, <<"2027-01-15T08:00:00.000Z">>})),
    ?assert(U({longstr, <<"2030-01-01T00:00:00+01:00">>})),
    ?assertNot(U({utf8, <<"2020-01-01T00:00:00Z">>})),
    ?assertNot(U({utf8, <<"soon">>})),
    %% epoch seconds where ms were meant: in the past, at once
    ?assertNot(U({long, ?NOW div 1000 + 3600})).

x_opt_delivery_test() ->
    T = fun(V) -> asked([{<<"x-opt-delivery-time">>, V}]) end,
    ?assert(T({long, ?NOW + 1500})),
    ?assert(T({timestamp, ?NOW + 1500})),
    ?assertNot(T({long, ?NOW - 1500})),
    D = fun(V) -> asked([{<<"x-opt-delivery-delay">>, V}]) end,
    ?assert(D({long, 1500})),
    ?assert(D({long, 5000000000})),          %% no plugin bound on the AMQP 1.0 annotation
    ?assertNot(D({long, 0})),
    ?assertNot(D({long, -5})),
    ?assertNot(D({utf8, <<"soon">>})).

precedence_test() ->
    Past = {long, ?NOW - 1000},
    Future = {long, ?NOW + 60000},
    %% the first present decides: x-delay-until, x-opt-delivery-time, x-delay, x-opt-delivery-delay
    ?assertNot(asked([{<<"x-delay-until">>, Past}, {<<"x-delay">>, {long, 5000}}])),
    ?assert(asked([{<<"x-delay-until">>, Future}, {<<"x-delay">>, {long, -5}}])),
    ?assertNot(asked([{<<"x-delay-until">>, {utf8, <<"soon">>}}, {<<"x-delay">>, {long, 5000}}])),
    ?assertNot(asked([{<<"x-opt-delivery-time">>, Past}, {<<"x-delay">>, {long, 5000}}])),
    ?assert(asked([{<<"x-opt-delivery-time">>, Future}, {<<"x-opt-delivery-delay">>, {long, 0}}])),
    ?assertNot(asked([{<<"x-delay">>, {long, 0}}, {<<"x-opt-delivery-delay">>, {long, 5000}}])),
    ?assert(asked([{<<"x-delay">>, {long, 5}}, {<<"x-opt-delivery-delay">>, {long, 0}}])).

topic(Pattern, Key) ->
    M = rabbit_exchange_type_delay_bridge,
    M:topic_match(M:split_topic(Pattern), M:split_topic(Key)).

topic_test() ->
    ?assert(topic(<<"#.eu">>, <<"order.eu">>)),
    ?assert(topic(<<"#.eu">>, <<"eu">>)),
    ?assert(topic(<<"#">>, <<"">>)),
    ?assert(topic(<<"#">>, <<"a.b.c">>)),
    ?assert(topic(<<"a.#">>, <<"a">>)),
    ?assert(topic(<<"a.*.c">>, <<"a.b.c">>)),
    ?assert(topic(<<"*.*">>, <<"a.">>)),        %% "a." is two words, the second empty
    ?assert(topic(<<"">>, <<"">>)),
    ?assert(topic(<<"a.#.z">>, <<"a.b.c.z">>)),
    ?assert(topic(<<"#.#">>, <<"a">>)),
    ?assertNot(topic(<<"#.us">>, <<"order.eu">>)),
    ?assertNot(topic(<<"*">>, <<"">>)),
    ?assertNot(topic(<<"*">>, <<"a.b">>)),
    ?assertNot(topic(<<"a.*.c">>, <<"a.c">>)),
    ?assertNot(topic(<<"">>, <<"a">>)),
    ?assertNot(topic(<<"order">>, <<"Order">>)).
