# The client matrix (README "Clients and frameworks"): one test per client library,
# labels "clients" and "integration", sharing the integration tests' broker
# fixture. Each skips (77) with the package to install when its toolchain
# or library is missing; deploy/packages.sh's "clients" group installs them.
# amqp10 (AMQP 1.0 publishers, python3-qpid-proton) runs on RabbitMQ 4.x only
# (DB_RABBITMQ=4.0 or 4.3) and skips on 3.10.
#
#   ctest --test-dir build -L clients --output-on-failure
#   ctest --test-dir build -R clients.kombu -V

set(db_client_names amqplib php-amqplib bunny amqp091-go java pika kombu celery amqp10)
foreach(client ${db_client_names})
  add_test(NAME clients.${client}
           COMMAND ${DB_PYTHON3} -u ${CMAKE_CURRENT_SOURCE_DIR}/clients/run_client.py ${client})
  set_tests_properties(clients.${client} PROPERTIES
    FIXTURES_REQUIRED rabbitmq
    RESOURCE_LOCK clients
    LABELS "clients;integration"
    SKIP_RETURN_CODE 77
    TIMEOUT 400
    ENVIRONMENT "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_TEST_BROKER_URI=${db_broker_uri};DB_TEST_BROKER_DIR=${db_broker_dir};DB_CLIENTS_WORK=${CMAKE_BINARY_DIR}/clients;PYTHONDONTWRITEBYTECODE=1")
endforeach()

# The README's retry recipes ("Retries with backoff"): a consumer written with
# each framework fails some messages a chosen number of times, the bridge's
# retry route sends them back with the configured backoff and parks the one
# that fails every attempt (tests/clients/retry-recipes/run_recipe.py).
#
#   ctest --test-dir build -R clients.retry --output-on-failure
#
# Scheduling (tests/run.sh's ten minutes): the recipes and consumers that
# need only Python or PHP are as light as any integration test and take no
# lock; those that build with a toolchain (npm + tsc, javac, go build) take
# the "clients" lock like the client matrix. COST starts them all early, so
# they do not queue behind each other at the end of the run.
set(db_retry_toolchains nestjs java amqplib amqp091-go)
# db_retry_client_test(NAME SCRIPT ARG TIMEOUT): one retry test on the suite's broker.
function(db_retry_client_test name script arg timeout)
  add_test(NAME ${name} COMMAND ${DB_PYTHON3} -u ${CMAKE_CURRENT_SOURCE_DIR}/clients/${script} ${arg})
  if(arg IN_LIST db_retry_toolchains)
    set_tests_properties(${name} PROPERTIES RESOURCE_LOCK clients)
  endif()
  set_tests_properties(${name} PROPERTIES
    FIXTURES_REQUIRED rabbitmq
    COST 30
    LABELS "clients;integration"
    SKIP_RETURN_CODE 77
    TIMEOUT ${timeout}
    ENVIRONMENT "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_TEST_BROKER_URI=${db_broker_uri};DB_TEST_BROKER_DIR=${db_broker_dir};DB_CLIENTS_WORK=${CMAKE_BINARY_DIR}/clients;PYTHONDONTWRITEBYTECODE=1")
endfunction()
foreach(recipe kombu kombu-policy celery nestjs java symfony)
  db_retry_client_test(clients.retry.${recipe} retry-recipes/run_recipe.py ${recipe} 420)
endforeach()

# A retry route under real consumers (issue 30; README "Retries with
# backoff"): a consumer program per client library (pika, Node amqplib,
# amqp091-go; tests/clients/retry-consumers/) fails chosen messages k times on
# a classic and a quorum queue; run_consumers.py checks each ends acked after
# k + 1 deliveries or parked after max_attempts, never early against the
# bridge's x-retry-history (zero tolerance), at most 1.5 s late. .crash runs
# the three at once through a kill -9 of the bridge and a broker restart, on
# the owned broker (it restarts it: lock broker_owned, as integration.broker_restart).
#
#   ctest --test-dir build -R clients.retry_consumers --output-on-failure
foreach(client pika amqplib amqp091-go)
  db_retry_client_test(clients.retry_consumers.${client} retry-consumers/run_consumers.py ${client} 200)
endforeach()
add_test(NAME clients.retry_consumers.crash
         COMMAND ${DB_PYTHON3} -u ${CMAKE_CURRENT_SOURCE_DIR}/clients/retry-consumers/run_consumers.py crash)
set_tests_properties(clients.retry_consumers.crash PROPERTIES
  FIXTURES_REQUIRED rabbitmq_owned
  RESOURCE_LOCK "clients;broker_owned"
  COST 60
  LABELS "clients;integration"
  SKIP_RETURN_CODE 77
  TIMEOUT 240
  ENVIRONMENT "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_TEST_BROKER_URI=${db_owned_uri};DB_TEST_BROKER_DIR=${db_owned_dir};DB_CLIENTS_WORK=${CMAKE_BINARY_DIR}/clients;PYTHONDONTWRITEBYTECODE=1")

# Unchanged x-delayed-message applications (issue 40; README "Clients and
# frameworks"): each client's publisher, DB_MODE=x-delayed-message, declares
# x-delayed-message exchanges of x-delayed-type direct, topic, fanout and
# headers, binds its queues and publishes with x-delay as its library types
# it, through the shim (deploy/plugin) and one delayed_exchanges route, on a
# node of its own (harness_plugin.PluginNode, free ports) of the suite's line
# (DB_RABBITMQ: 3.10, 4.0, 4.3): no broker fixture. run_client.py shim_test().
#
#   ctest --test-dir build -R clients.shim --output-on-failure
foreach(client pika amqplib java kombu bunny amqp091-go)
  add_test(NAME clients.shim.${client}
           COMMAND ${DB_PYTHON3} -u ${CMAKE_CURRENT_SOURCE_DIR}/clients/run_client.py shim ${client})
  set_tests_properties(clients.shim.${client} PROPERTIES
    RESOURCE_LOCK clients
    COST 20
    LABELS "clients;integration"
    SKIP_RETURN_CODE 77
    TIMEOUT 200
    ENVIRONMENT "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_TEST_BROKER_URI=${db_broker_uri};DB_CLIENTS_WORK=${CMAKE_BINARY_DIR}/clients;PYTHONDONTWRITEBYTECODE=1")
endforeach()
