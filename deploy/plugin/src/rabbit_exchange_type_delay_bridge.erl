%% rabbit_exchange_type_delay_bridge -- the exchange type x-delayed-message
%% without the delayed-message plugin's storage (delay-bridge issue 40).
%%
%% Applications written for the rabbitmq-delayed-message-exchange plugin
%% declare exchanges of type x-delayed-message (argument x-delayed-type:
%% direct, topic, fanout or headers) and publish to them with a header
%% x-delay. This module registers that exchange type and keeps nothing: its
%% route callback sends a message that asks for a delay to the one queue
%% delay-bridge.delayed of the exchange's vhost, where delay-bridge holds
%% it and, when due, publishes it back to the same exchange with the same
%% routing key and a header x-delay-bridge-id; every other message (no
%% delay, zero, negative, a due time in the past, and whatever the bridge
%% publishes back) is routed by the x-delayed-type's own module, bindings
%% and all, exactly as an exchange of that type would route it.
%%
%% What "asks for a delay" means is delay_asked/2, the one place that says
%% it (unit-tested by rabbit_exchange_type_delay_bridge_tests):
%%
%%   1. a message with a header x-delay-bridge-id is never delayed: the
%%      bridge puts it on everything it publishes, so nothing loops;
%%   2. otherwise the first of these headers present decides, in the
%%      bridge's own precedence (absolute before relative, the plugin's
%%      header before AMQP 1.0's annotations), even when its value is
%%      unreadable (then: not a delay, routed at once):
%%        x-delay-until         a due time in the future (epoch ms as a
%%                              number or integer text, RFC 3339 text, an
%%                              AMQP timestamp)
%%        x-opt-delivery-time   the same (the AMQP 1.0 annotation)
%%        x-delay               a delay > 0 and =< 2^32-1 ms, as the plugin
%%                              read it: any integer kind, a float or
%%                              decimal truncated, a number as UTF-8 text
%%                              ("1500", "1500.7" -> 1500); beyond 2^32-1
%%                              the plugin routed at once, and so does this
%%        x-opt-delivery-delay  a delay > 0 ms (the AMQP 1.0 annotation)
%%
%% The queue. delay-bridge.delayed is a durable classic queue declared with
%% exactly the arguments the bridge declares its classic ingress queue with
%% (x-queue-type classic: src/broker/consumer_declare.c), so whichever of the
%% two declares it first, the other's declare is accepted. It is declared
%% (if it does not exist) when an x-delayed-message exchange is created, at
%% boot for every vhost that has one (boot step
%% rabbit_delay_bridge_queues, after recovery), and again when a delayed
%% message is routed while it is missing (someone deleted it): that check
%% is an ETS lookup per delayed message, the declare happens once. Should
%% the declare fail, the message is unroutable and the broker does with it
%% what it does with any unroutable message: a mandatory publish comes back
%% as basic.return, a non-mandatory one is dropped (the publisher's confirm
%% is still an ack, as for any exchange with no matching binding).
%%
%% The exchange's create callback is also run by the broker when it
%% recovers durable exchanges at boot, before queues are recovered: there
%% the queue is left alone (rabbit:is_booted() is false) and the boot step
%% declares it later.
%%
%% Broker lines. RabbitMQ 4.x hands route/3 an mc message container (the
%% headers through mc:x_header/2, AMQP 1.0 annotations included) and calls
%% create/delete with a serial; 3.10 hands route/2 a #delivery{} with a
%% #basic_message{} and calls create/delete with a transaction flag. The
%% build (build.sh) defines DB_BASIC_MESSAGE for 3.x; the rest is common.

-module(rabbit_exchange_type_delay_bridge).

-rabbit_boot_step(
   {rabbit_exchange_type_delay_bridge,
    [{description, "exchange type x-delayed-message (delay-bridge): registry"},
     {mfa, {rabbit_registry, register, [exchange, <<"x-delayed-message">>, ?MODULE]}},
     {cleanup, {rabbit_registry, unregister, [exchange, <<"x-delayed-message">>]}},
     {requires, rabbit_registry},
     {enables, kernel_ready}]}).

-rabbit_boot_step(
   {rabbit_delay_bridge_queues,
    [{description, "delay-bridge.delayed in every vhost with an x-delayed-message exchange"},
     {mfa, {?MODULE, declare_queues, []}},
     {requires, recovery},
     {enables, routing_ready}]}).

-include_lib("rabbit_common/include/rabbit.hrl").
-include_lib("rabbit_common/include/rabbit_framing.hrl").

-behaviour(rabbit_exchange_type).

-export([description/0, serialise_events/0, validate/1, validate_binding/2,
         policy_changed/2, assert_args_equivalence/2, info/1, info/2,
         create/2, add_binding/3, remove_bindings/3]).
-ifdef(DB_BASIC_MESSAGE).
-export([route/2, delete/3]).
-else.
-export([route/3, delete/2]).
-endif.
-export([declare_queues/0, delay_asked/2, topic_match/2, split_topic/1]).

-define(TYPE, 'x-delayed-message').
-define(QUEUE, <<"delay-bridge.delayed">>).
-define(QUEUE_ARGS, [{<<"x-queue-type">>, longstr, <<"classic">>}]).
-define(ACTING_USER, <<"rmq-internal">>).
-define(PLUGIN_MAX_DELAY, 4294967295). %% the plugin's bound on x-delay (Erlang's timer)
%% The delay headers, in the order the bridge reads them (README "Headers").
-define(DELAY_HEADERS, [{<<"x-delay-until">>, due}, {<<"x-opt-delivery-time">>, due},
                        {<<"x-delay">>, plugin_delay}, {<<"x-opt-delivery-delay">>, delay}]).

description() ->
    [{name, <<"x-delayed-message">>},
     {description, <<"Delayed Message Exchange (delay-bridge: held by delay-bridge, not the broker)">>}].

serialise_events() -> false.

%% --------------------------------------------------------------------------
%% Routing

-ifdef(DB_BASIC_MESSAGE).
route(X, Delivery = #delivery{message = #basic_message{content = Content0,
                                                       routing_keys = RKs}}) ->
    #content{properties = #'P_basic'{headers = H}} =
        rabbit_binary_parser:ensure_content_decoded(Content0),
    Get = fun(Key) -> header_091(H, Key) end,
    case delay_asked(Get, os:system_time(millisecond)) of
        true -> delayed_queue(X);
        false -> by_type(X, RKs, fun(M) -> M:route(X, Delivery) end)
    end.

header_091(undefined, _Key) ->
    undefined;
header_091(H, Key) ->
    case rabbit_misc:table_lookup(H, Key) of
        {timestamp, S} -> {timestamp, S * 1000};  %% 0-9-1 timestamps are seconds
        Other -> Other
    end.
-else.
route(X, Msg, Opts) ->
    %% mc:x_header/2 fails on header kinds it cannot convert (a decimal
    %% x-delay closed the publisher's connection under the plugin): here
    %% such a header reads as unreadable, i.e. not a delay.
    Get = fun(Key) -> try mc:x_header(Key, Msg) catch _:_ -> unreadable end end,
    case delay_asked(Get, os:system_time(millisecond)) of
        true -> delayed_queue(X);
        false -> by_type(X, mc:routing_keys(Msg), fun(M) -> M:route(X, Msg, Opts) end)
    end.
-endif.

%% Routed as the x-delayed-type routes, by its own module, except topic:
%% RabbitMQ keeps topic bindings in a trie that, under Khepri (4.3; 4.x
%% with khepri_db), holds only the bindings of exchanges of type topic, so
%% rabbit_exchange_type_topic finds none of an x-delayed-message exchange's.
%% Here topic patterns are matched against the exchange's bindings, on every
%% line alike (a scan of its bindings, as the headers type does).
by_type(X = #exchange{name = XName}, RKs, Route) ->
    case type_module(X) of
        rabbit_exchange_type_topic ->
            Keys = [split_topic(RK) || RK <- RKs],
            rabbit_router:match_bindings(
              XName, fun(#binding{key = BK}) ->
                             P = split_topic(BK),
                             lists:any(fun(K) -> topic_match(P, K) end, Keys)
                     end);
        Mod ->
            Route(Mod)
    end.

%% Words of a topic key, as RabbitMQ splits them: "" has none, "a." two.
split_topic(<<>>) -> [];
split_topic(Key) -> binary:split(Key, <<".">>, [global]).

%% "*" one word, "#" zero or more.
topic_match([], []) -> true;
topic_match([<<"#">> | Ps] = Hash, Ws) ->
    topic_match(Ps, Ws) orelse (Ws =/= [] andalso topic_match(Hash, tl(Ws)));
topic_match([<<"*">> | Ps], [_ | Ws]) -> topic_match(Ps, Ws);
topic_match([W | Ps], [W | Ws]) -> topic_match(Ps, Ws);
topic_match(_, _) -> false.

%% The one queue of the exchange's vhost, declared again if someone deleted it.
delayed_queue(#exchange{name = #resource{virtual_host = VHost}}) ->
    QName = rabbit_misc:r(VHost, queue, ?QUEUE),
    _ = rabbit_amqqueue:exists(QName) orelse ensure_queue(VHost),
    [QName].

%% delay_asked(Get, NowMs): does a message whose header Key reads Get(Key)
%% (undefined when absent, else {Kind, Value} as the broker hands it, with
%% timestamps in ms) ask to be held? The rules: this module's header.
delay_asked(Get, Now) ->
    case Get(<<"x-delay-bridge-id">>) of
        undefined -> first_delay(Get, Now, ?DELAY_HEADERS);
        _ -> false
    end.

first_delay(_Get, _Now, []) ->
    false;
first_delay(Get, Now, [{Key, Kind} | Rest]) ->
    case Get(Key) of
        undefined -> first_delay(Get, Now, Rest);
        Value -> asks(Kind, Value, Now)
    end.

asks(due, {timestamp, Ms}, Now) when is_integer(Ms) ->
    Ms > Now;
asks(due, Value, Now) ->
    case due_ms(Value) of
        {ok, Ms} -> Ms > Now;
        error -> false
    end;
asks(plugin_delay, Value, _Now) ->
    case number(Value) of
        {ok, D} -> D > 0 andalso D =< ?PLUGIN_MAX_DELAY;
        error -> false
    end;
asks(delay, Value, _Now) ->
    case number(Value) of
        {ok, D} -> D > 0;
        error -> false
    end.

%% An absolute due time: a number of epoch ms, or RFC 3339 text.
due_ms({Kind, Text}) when is_binary(Text), Kind =:= utf8 orelse Kind =:= longstr ->
    try calendar:rfc3339_to_system_time(binary_to_list(string:trim(Text, both, " ")),
                                        [{unit, millisecond}]) of
        Ms -> {ok, Ms}
    catch _:_ -> number({Kind, Text})
    end;
due_ms(Value) ->
    case number(Value) of
        {ok, Ms} -> {ok, Ms};
        error -> error
    end.

%% A number, truncated toward zero: any integer kind, float, double,
%% decimal, or decimal text ([ ]*[+-]?(D+(.D*)?|.D+)[ ]*).
number({timestamp, _}) -> error;
number({_Kind, I}) when is_integer(I) -> {ok, I};
number({_Kind, F}) when is_float(F) -> {ok, trunc(F)};
number({decimal, {Scale, V}}) when is_integer(Scale), is_integer(V), Scale >= 0, Scale < 64 ->
    {ok, V div pow10(Scale)};
number({Kind, Text}) when is_binary(Text), Kind =:= utf8 orelse Kind =:= longstr ->
    %% (re leaves out a trailing group that matched nothing: "1500" gives [Sign, Int])
    case re:run(Text, "^ *([+-]?)([0-9]*)(?:\\.([0-9]*))? *$", [{capture, all_but_first, list}]) of
        {match, [_Sign, "", [_ | _]]} -> {ok, 0};                    %% ".5"
        {match, [Sign, Int | _]} when Int =/= "", length(Int) =< 20 ->
            N = list_to_integer(Int),
            {ok, case Sign of "-" -> -N; _ -> N end};
        _ -> error                                                   %% "", ".", "+", not a number
    end;
number(_) ->
    error.

pow10(0) -> 1;
pow10(N) -> 10 * pow10(N - 1).

%% --------------------------------------------------------------------------
%% The queue

%% Boot step (after recovery): the queue in every vhost that has an
%% x-delayed-message exchange.
declare_queues() ->
    VHosts = lists:usort([VH || #exchange{type = ?TYPE, name = #resource{virtual_host = VH}}
                                    <- rabbit_exchange:list()]),
    lists:foreach(fun ensure_queue/1, VHosts).

%% delay-bridge.delayed in VHost, unless it exists. Never fails: a queue
%% that cannot be declared leaves delayed messages unroutable (returned when
%% mandatory), and says so in the log.
ensure_queue(VHost) ->
    QName = rabbit_misc:r(VHost, queue, ?QUEUE),
    %% The vhost's max-queues counts (RabbitMQ 4.x checks it in declare, 3.x
    %% only for a client's queue.declare: here for both).
    try rabbit_amqqueue:exists(QName) orelse
            case rabbit_vhost_limit:is_over_queue_limit(VHost) of
                false -> rabbit_amqqueue:declare(QName, true, false, ?QUEUE_ARGS, none, ?ACTING_USER);
                {true, Limit} -> {vhost_max_queues, Limit}
            end of
        true -> ok;
        {new, _} ->
            logger:info("delay-bridge shim: declared ~ts", [rabbit_misc:rs(QName)]);
        {existing, _} -> ok;
        Other ->
            logger:warning("delay-bridge shim: could not declare ~ts: ~tp",
                           [rabbit_misc:rs(QName), Other])
    catch C:R ->
            logger:warning("delay-bridge shim: could not declare ~ts: ~tp:~tp",
                           [rabbit_misc:rs(QName), C, R])
    end,
    ok.

%% --------------------------------------------------------------------------
%% The rest: checks of the plugin, then the x-delayed-type's own module

validate(#exchange{arguments = Args} = X) ->
    case rabbit_misc:table_lookup(Args, <<"x-delayed-type">>) of
        {_, <<"x-delayed-message">>} ->
            rabbit_misc:protocol_error(precondition_failed,
                                       "Invalid argument, 'x-delayed-message' can't be used "
                                       "for 'x-delayed-type'", []);
        {_, Type} when is_binary(Type) ->
            rabbit_exchange:check_type(Type),
            (type_module(X)):validate(X);
        _ ->
            rabbit_misc:protocol_error(precondition_failed,
                                       "Invalid argument, 'x-delayed-type' must be "
                                       "an existing exchange type", [])
    end.

%% Serial: none | a serial on 4.x; transaction | none on 3.x (then the
%% queue only outside the transaction). During boot the queues are not
%% recovered yet: the boot step rabbit_delay_bridge_queues declares it then.
create(Serial, X = #exchange{name = #resource{virtual_host = VHost}}) ->
    ok = (type_module(X)):create(Serial, X),
    case Serial =/= transaction andalso rabbit:is_booted() of
        true -> ensure_queue(VHost);
        false -> ok
    end.

-ifdef(DB_BASIC_MESSAGE).
delete(Tx, X, Bs) -> (type_module(X)):delete(Tx, X, Bs).
-else.
delete(Serial, X) -> (type_module(X)):delete(Serial, X).
-endif.

validate_binding(X, B) -> (type_module(X)):validate_binding(X, B).
policy_changed(X1, X2) -> (type_module(X1)):policy_changed(X1, X2).
add_binding(Serial, X, B) -> (type_module(X)):add_binding(Serial, X, B).
remove_bindings(Serial, X, Bs) -> (type_module(X)):remove_bindings(Serial, X, Bs).
assert_args_equivalence(X, Args) -> (type_module(X)):assert_args_equivalence(X, Args).
info(_X) -> [].
info(_X, _Items) -> [].

%% The module of x-delayed-type (validate/1 checked it exists).
type_module(#exchange{arguments = Args}) ->
    {_, Type} = rabbit_misc:table_lookup(Args, <<"x-delayed-type">>),
    {ok, Mod} = rabbit_registry:lookup_module(exchange, rabbit_registry:binary_to_type(Type)),
    Mod.
