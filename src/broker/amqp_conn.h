/*
 * amqp_conn.h -- the old name of delay-bridge/broker_conn.h, for src/repl/
 * alone until its callers are renamed (issue 42: src/repl/ is being changed
 * on another branch). Nothing else may include it; delete it with the last
 * caller (sed -E 's/\bamqp_conn(\b|_)/broker_conn\1/g' over src/repl/, the include
 * becoming "delay-bridge/broker_conn.h").
 */
#ifndef DB_AMQP_CONN_COMPAT_H
#define DB_AMQP_CONN_COMPAT_H

#include "delay-bridge/broker_conn.h"

#define amqp_conn broker_conn
#define amqp_conn_answer_close broker_conn_answer_close
#define amqp_conn_buffered broker_conn_buffered
#define amqp_conn_check broker_conn_check
#define amqp_conn_close broker_conn_close
#define amqp_conn_open_next broker_conn_open_next
#define amqp_conn_reopen broker_conn_reopen
#define amqp_conn_reply_text broker_conn_reply_text
#define amqp_conn_server_version broker_conn_server_version

#endif
