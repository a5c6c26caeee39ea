%% migrate_fixture: the delayed-message plugin's table, without the plugin.
%%
%% integration.migrate_plugin.fixture runs the migration test where the
%% plugin's source is not (a fresh CI machine): this module, loaded into a
%% RabbitMQ 4.0.5 node the way delay-bridge-migrate-plugin loads its own
%% (source text compiled by rabbitmqctl eval: no macros, no records), makes
%% the tables the plugin 4.0.7 makes (src/rabbit_delayed_message.erl,
%% setup_mnesia/0: same names, record names, attributes, types, disc copies)
%% and writes entries as its delay_message/3 does (the index key, then the
%% entry, both dirty):
%%
%%   rabbit_delayed_message<node>        bag, record delay_entry:
%%       {delay_entry, {delay_key, DueMs, #exchange{}}, mc:state(), make_ref()}
%%   rabbit_delayed_message<node>_index  ordered_set, record delay_index:
%%       {delay_index, {delay_key, DueMs, #exchange{}}, true}
%%
%% The message is what the plugin stores: an mc state made from AMQP 0-9-1
%% content (mc_amqpl:message/3, as a channel makes it), with exchange and
%% routing key annotations, message_id, delivery_mode 2 and x-delay. What
%% it does not do is fire anything: no process, no timer (entries due
%% during the test stay until the migration moves them).
%%
%%   setup()      -> ok                      the two tables
%%   fill(File)   -> {ok, Count}             file:consult(File): one term per message,
%%                                           {VHost, Exchange, RoutingKey, MessageId, DueMs, DelayMs}
%%   held()       -> Count
-module(migrate_fixture).

-export([setup/0, fill/1, held/0]).

table() -> list_to_atom("rabbit_delayed_message" ++ atom_to_list(node())).
index_table() -> list_to_atom(atom_to_list(table()) ++ "_index").

setup() ->
    _ = mnesia:create_table(table(), [{record_name, delay_entry},
                                      {attributes, [delay_key, delivery, ref]},
                                      {type, bag},
                                      {disc_copies, [node()]}]),
    _ = mnesia:create_table(index_table(), [{record_name, delay_index},
                                            {attributes, [delay_key, const]},
                                            {type, ordered_set},
                                            {disc_copies, [node()]}]),
    ok = mnesia:wait_for_tables([table(), index_table()], 30000).

held() ->
    mnesia:table_info(table(), size).

fill(File) ->
    {ok, Terms} = file:consult(File),
    Xs = lists:foldl(fun({VH, X, _, _, _, _}, Acc) ->
                             XName = {resource, VH, exchange, X},
                             case maps:is_key(XName, Acc) of
                                 true -> Acc;
                                 false ->
                                     {ok, Rec} = rabbit_exchange:lookup(XName),
                                     Acc#{XName => Rec}
                             end
                     end, #{}, Terms),
    lists:foreach(
      fun({VH, X, RK, Id, Due, Delay}) ->
              XName = {resource, VH, exchange, X},
              Exchange = maps:get(XName, Xs),
              Props = rabbit_basic:properties([{message_id, Id}, {delivery_mode, 2},
                                               {headers, [{<<"x-delay">>, long, Delay}]}]),
              Content = rabbit_basic:build_content(Props, <<"fixture ", Id/binary>>),
              {ok, Msg} = mc_amqpl:message(XName, RK, Content),
              Key = {delay_key, Due, Exchange},
              mnesia:dirty_write(index_table(), {delay_index, Key, true}),
              mnesia:dirty_write(table(), {delay_entry, Key, Msg, make_ref()})
      end, Terms),
    {ok, length(Terms)}.
