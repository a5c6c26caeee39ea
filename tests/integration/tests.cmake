# Integration tests against a real RabbitMQ (included from tests/CMakeLists.txt).
#
# One ctest test per tests/integration/test_*.py (label "integration").
# They are mostly waiting (for due times, restarts, takeovers): on 2 cores
# the machine sits 70-90 % idle under one test at a time, so they run side
# by side under "ctest -j" (tests/run.sh passes -j 5, DB_TEST_JOBS), in three lanes:
#
#   shared   most tests share one throwaway broker that a fixture starts
#            with rabbitmq.sh under ${CMAKE_BINARY_DIR}/rabbitmq on
#            127.0.0.1:${DB_TEST_BROKER_PORT} and stops at the end. Each names
#            its exchanges and queues with a random suffix (harness.py:
#            dbt.<test>.<6 random chars>), keeps its files in its own
#            temporary directory, takes its HTTP ports from the kernel, and
#            touches no broker-wide setting (secrets adds and deletes a user
#            of a random name, vhosts two vhosts of random names,
#            bad_messages a policy on its own queue).
#   owned    the tests that stop, restart or alarm their broker (alarm,
#            broker_restart, http) get a second node of their own
#            (${CMAKE_BINARY_DIR}/rabbitmq-owned, port DB_TEST_BROKER_PORT+1),
#            one at a time (RESOURCE_LOCK broker_owned): they can no longer
#            pull the broker from under the others.
#   cluster  the three-node cluster (tests/integration/cluster/, ports
#            DB_TEST_CLUSTER_PORT..+2) is formed by one test at a time
#            (RESOURCE_LOCK cluster): cluster, scale_out, replicate_cluster.
#
# tls starts a TLS node of its own on free ports. Tests whose figures need a
# quiet machine never run beside a heavy one (db_it_sensitive below, and
# DB_HEAVY_LOCKS in tests/CMakeLists.txt). COST puts the long tests first,
# so the short ones fill the gaps around them.
#
# To use a broker of your own instead, set DB_TEST_BROKER_URI in the
# environment when configuring (cmake -S . -B build): the fixture then
# starts nothing, and the tests that must restart the broker are skipped.
#
#   ctest --test-dir build -L integration --output-on-failure
#   ctest --test-dir build -R integration.order -V      # one test, verbose

set(DB_TEST_BROKER_PORT 5681 CACHE STRING "AMQP port of the integration tests' RabbitMQ (127.0.0.1)")
set(DB_TEST_BROKER_DIST_PORT 25681 CACHE STRING "Erlang distribution port of the integration tests' RabbitMQ")

# /usr/bin/python3 first: Debian's python3-pika is installed for it, and a
# python3 earlier in PATH (pyenv, venv) usually lacks pika.
find_program(DB_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT DB_PYTHON3)
  find_program(DB_PYTHON3 NAMES python3)
endif()
set(db_integration_problem "")
if(NOT DB_PYTHON3)
  set(db_integration_problem "python3 not found (apt-get install python3-pika)")
else()
  execute_process(COMMAND ${DB_PYTHON3} -c "import pika"
                  RESULT_VARIABLE db_pika_rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT db_pika_rc EQUAL 0)
    set(db_integration_problem "${DB_PYTHON3} cannot import pika (apt-get install python3-pika)")
  endif()
endif()

set(db_it_dir ${CMAKE_CURRENT_SOURCE_DIR}/integration)
file(GLOB db_it_tests CONFIGURE_DEPENDS ${db_it_dir}/test_*.py)
# test_migrate_plugin.py runs on a 4.0.5 node of its own, in two modes (end of this file)
list(REMOVE_ITEM db_it_tests ${db_it_dir}/test_migrate_plugin.py)

if(db_integration_problem)
  # Configure anyway (the daemon builds without python), but make ctest say why.
  message(WARNING "integration tests cannot run: ${db_integration_problem}; "
                  "configure with -DDB_INTEGRATION=OFF to leave them out")
  add_test(NAME integration.prerequisites
           COMMAND ${CMAKE_COMMAND} -E echo "integration tests cannot run: ${db_integration_problem}")
  set_tests_properties(integration.prerequisites PROPERTIES LABELS integration WILL_FAIL TRUE)
  return()
endif()

# integration.NAME.start and .stop: a throwaway node in DIR, fresh each run
# (stop whatever a previous run left, wipe its state, start).
function(db_broker_node name dir port dist_port)
  add_test(NAME integration.${name}.start
           COMMAND bash -c "set -e; bash \"$0\" stop \"$1\"; DB_RABBITMQ_FRESH=1 bash \"$0\" start \"$1\" \"$2\" \"$3\""
                   ${db_it_dir}/rabbitmq.sh ${dir} ${port} ${dist_port})
  add_test(NAME integration.${name}.stop COMMAND bash ${db_it_dir}/rabbitmq.sh stop ${dir})
endfunction()

if(DEFINED ENV{DB_TEST_BROKER_URI} AND NOT "$ENV{DB_TEST_BROKER_URI}" STREQUAL "")
  set(db_broker_uri "$ENV{DB_TEST_BROKER_URI}")
  set(db_broker_dir "")
  message(STATUS "integration tests: using the broker at DB_TEST_BROKER_URI (broker-restart tests skip)")
  add_test(NAME integration.broker.start
           COMMAND ${DB_PYTHON3} -c "import sys, pika; pika.BlockingConnection(pika.URLParameters(sys.argv[1])).close()"
                   ${db_broker_uri})
  add_test(NAME integration.broker.stop COMMAND ${CMAKE_COMMAND} -E true)
else()
  set(db_broker_uri "amqp://guest:guest@127.0.0.1:${DB_TEST_BROKER_PORT}/%2f")
  set(db_broker_dir "${CMAKE_BINARY_DIR}/rabbitmq")
  db_broker_node(broker ${db_broker_dir} ${DB_TEST_BROKER_PORT} ${DB_TEST_BROKER_DIST_PORT})
endif()
set_tests_properties(integration.broker.start PROPERTIES
  FIXTURES_SETUP rabbitmq LABELS integration TIMEOUT 180)
set_tests_properties(integration.broker.stop PROPERTIES
  FIXTURES_CLEANUP rabbitmq LABELS integration TIMEOUT 120)

# The owned lane: a second broker for the tests that stop, restart or alarm it.
math(EXPR db_owned_port "${DB_TEST_BROKER_PORT} + 1")
math(EXPR db_owned_dist_port "${DB_TEST_BROKER_DIST_PORT} + 1")
set(db_it_owned alarm broker_restart http)
if(db_broker_dir)
  set(db_owned_uri "amqp://guest:guest@127.0.0.1:${db_owned_port}/%2f")
  set(db_owned_dir "${CMAKE_BINARY_DIR}/rabbitmq-owned")
  db_broker_node(broker_owned ${db_owned_dir} ${db_owned_port} ${db_owned_dist_port})
  set_tests_properties(integration.broker_owned.start PROPERTIES
    FIXTURES_SETUP rabbitmq_owned LABELS integration RESOURCE_LOCK broker_owned TIMEOUT 180)
  set_tests_properties(integration.broker_owned.stop PROPERTIES
    FIXTURES_CLEANUP rabbitmq_owned LABELS integration RESOURCE_LOCK broker_owned TIMEOUT 120)
else()
  # Your own broker (DB_TEST_BROKER_URI): these tests skip, as they need to restart it.
  set(db_owned_uri "${db_broker_uri}")
  set(db_owned_dir "")
  add_test(NAME integration.broker_owned.start COMMAND ${CMAKE_COMMAND} -E true)
  add_test(NAME integration.broker_owned.stop COMMAND ${CMAKE_COMMAND} -E true)
  set_tests_properties(integration.broker_owned.start PROPERTIES FIXTURES_SETUP rabbitmq_owned LABELS integration)
  set_tests_properties(integration.broker_owned.stop PROPERTIES FIXTURES_CLEANUP rabbitmq_owned LABELS integration)
endif()

set(db_it_cluster cluster scale_out replicate_cluster)

# The sanitized daemon. With -DDB_IT_SANITIZED_DIR=<a build configured with
# -DDB_SANITIZE=ON> (tests/run.sh passes build-asan), every integration test
# but the heavy ones below runs that build's daemon (ASan + UBSan, leaks
# checked at exit), once: the suite runs each test one time, the broad
# functional set under the sanitizers, the volume, fault, multi-node and
# browser tests (and the client matrix, the soak, the benchmark smoke and
# the containers) against this build's optimized daemon. Empty (the
# default): all run this build's daemon. The sanitized daemon is 2-3x
# slower, so its tests allow 5 s of lateness instead of 2 (DB_TEST_LATE_S:
# a bound on gross misbehaviour, not a figure -- the benchmarks measure
# lateness; "never early" keeps its 50 ms).
set(DB_IT_SANITIZED_DIR "" CACHE PATH
    "Build dir with -DDB_SANITIZE=ON whose daemon most integration tests run (tests/run.sh: build-asan)")
set(db_it_plain_only kill_loop failpoints tls recovery_progress browse_purge cluster scale_out
    drain stalled_broker replicate_enable replicate_crash ui broker4)

# Heavy: 10^5-message volumes, 50 kill -9 in a row, every failpoint in turn
# (lock "heavy", one at a time). Sensitive: browse_purge bounds lateness to
# 3 s, stalled_broker wants /healthz answered within 1 s, alarm and
# broker_restart hold their messages only while a burst is being published,
# keys reads /pending through two restarts before a 5 s message falls due:
# on 2 cores the heavy ones can break those figures, so they take every
# heavy lock (DB_HEAVY_LOCKS, tests/CMakeLists.txt) and never run beside one.
set(db_it_heavy failpoints kill_loop recovery_progress drain)
set(db_it_sensitive browse_purge stalled_broker alarm broker_restart keys)

# Seconds each took alone on 2 cores: ctest starts the long ones first.
set(db_it_cost_failpoints 90)
set(db_it_cost_replicate_cluster 70)
set(db_it_cost_cluster 65)
set(db_it_cost_drain 60)
set(db_it_cost_scale_out 45)
set(db_it_cost_browse_purge 30)
set(db_it_cost_recovery_progress 25)
set(db_it_cost_replicate_hole 35)
set(db_it_cost_replicate_enable 25)
set(db_it_cost_replicate_forgery 40)
set(db_it_cost_replicate_legacy 35)
set(db_it_cost_keys 45)
set(db_it_cost_kill_loop 20)
set(db_it_cost_stream_ingress 17)
set(db_it_cost_stream_crash 12)
set(db_it_cost_routes_live 40)
set(db_it_cost_delayed_exchanges 50)
set(db_it_cost_vhosts 30)
set(db_it_cost_max_held 15)
# broker4: a node of its own (the suite's port + 10), every case of "Supported brokers"
set(db_it_cost_broker4 100)
# shim: a node of its own (free ports) with deploy/plugin's shim, restarted twice, the shim disabled and enabled
set(db_it_cost_shim 50)

foreach(script ${db_it_tests})
  get_filename_component(name ${script} NAME_WE)
  string(REGEX REPLACE "^test_" "" name ${name})
  add_test(NAME integration.${name} COMMAND ${DB_PYTHON3} -u ${script})
  set(db_fixture rabbitmq)
  set(db_uri ${db_broker_uri})
  set(db_dir ${db_broker_dir})
  set(db_locks "")
  if(name IN_LIST db_it_owned)
    set(db_fixture rabbitmq_owned)
    set(db_uri ${db_owned_uri})
    set(db_dir ${db_owned_dir})
    list(APPEND db_locks broker_owned)
  endif()
  # A loaded machine took 141 s to form the cluster alone (61 s on CI):
  # the cluster tests' own budgets are 420 s, ctest's timeout above them.
  set(db_timeout 300)
  if(name IN_LIST db_it_cluster)
    list(APPEND db_locks cluster)
    set(db_timeout 480)
  endif()
  if(name IN_LIST db_it_heavy)
    list(APPEND db_locks heavy)
  endif()
  if(name IN_LIST db_it_sensitive)
    list(APPEND db_locks sensitive ${DB_HEAVY_LOCKS})
  endif()
  set(db_bins "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_BRIDGE_FP_BIN=$<TARGET_FILE:delay-bridge-fp>;DB_WAL_FILL_BIN=$<TARGET_FILE:wal_fill>")
  set(db_labels integration)
  if(DB_IT_SANITIZED_DIR AND NOT name IN_LIST db_it_plain_only)
    set(db_bins "DB_BRIDGE_BIN=${DB_IT_SANITIZED_DIR}/delay-bridge;DB_BRIDGE_FP_BIN=${DB_IT_SANITIZED_DIR}/delay-bridge-fp;DB_WAL_FILL_BIN=${DB_IT_SANITIZED_DIR}/tests/wal_fill;ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1;DB_TEST_LATE_S=5")
    set(db_labels "integration;sanitized")
  endif()
  set(db_cost 5)
  if(DEFINED db_it_cost_${name})
    set(db_cost ${db_it_cost_${name}})
  endif()
  set_tests_properties(integration.${name} PROPERTIES
    FIXTURES_REQUIRED "${db_fixture}"
    LABELS "${db_labels}"
    SKIP_RETURN_CODE 77
    TIMEOUT ${db_timeout}
    COST ${db_cost}
    ENVIRONMENT "${db_bins};DB_TEST_BROKER_URI=${db_uri};DB_TEST_BROKER_DIR=${db_dir};PYTHONDONTWRITEBYTECODE=1")
  if(db_locks)
    set_tests_properties(integration.${name} PROPERTIES RESOURCE_LOCK "${db_locks}")
  endif()
endforeach()

# test_disk_full_self.py: the WAL's volume filled by intake alone, nobody
# relieving it (issue 26). integration.disk_full_self (above) is its first
# case, the issue's run on an 8 MiB tmpfs; each other case (the script's
# docstring) is a test of its own, with the same daemon and broker as the
# others. big and xfs400 fill 320-400 MiB volumes with segment_mb 64
# (20-60 s each, but 300 MiB of RAM in the broker and a tmpfs): label "long",
# never in the suite, by hand only:
#   ctest --test-dir build -C long -R integration.disk_full_self --output-on-failure
set(db_it_disk_self tiny edge short held ext4 ext4min repl keys stream xfs)
set(db_it_disk_self_long big xfs400)
foreach(case ${db_it_disk_self} ${db_it_disk_self_long})
  set(db_name integration.disk_full_self.${case})
  set(db_bins "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>")
  if(case IN_LIST db_it_disk_self_long)
    add_test(NAME ${db_name} CONFIGURATIONS long
             COMMAND ${DB_PYTHON3} -u ${db_it_dir}/test_disk_full_self.py ${case})
    set(db_labels long)
  else()
    add_test(NAME ${db_name} COMMAND ${DB_PYTHON3} -u ${db_it_dir}/test_disk_full_self.py ${case})
    set(db_labels integration)
    if(DB_IT_SANITIZED_DIR)
      set(db_bins "DB_BRIDGE_BIN=${DB_IT_SANITIZED_DIR}/delay-bridge;ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1;DB_TEST_LATE_S=5")
      set(db_labels "integration;sanitized")
    endif()
  endif()
  set_tests_properties(${db_name} PROPERTIES
    FIXTURES_REQUIRED rabbitmq
    LABELS "${db_labels}"
    SKIP_RETURN_CODE 77
    TIMEOUT 300
    COST 30
    ENVIRONMENT "${db_bins};DB_TEST_BROKER_URI=${db_broker_uri};DB_TEST_BROKER_DIR=${db_broker_dir};PYTHONDONTWRITEBYTECODE=1")
endforeach()

# test_plugin_compat.py plugin: the plugin-compatibility checks against the
# delayed-message plugin 4.0.7 on a RabbitMQ 4.0.5 node of its own (free
# ports), whatever DB_RABBITMQ says (the plugin runs on 4.0 only); the bridge
# mode is integration.plugin_compat above. It builds the plugin on first use
# from its source in /var/cache/delay-bridge/plugin-4.0.7/src and skips (77)
# when that source or the 4.0 root is missing (the script's docstring).
add_test(NAME integration.plugin_compat.reference
         COMMAND ${DB_PYTHON3} -u ${db_it_dir}/test_plugin_compat.py plugin)
set_tests_properties(integration.plugin_compat.reference PROPERTIES
  LABELS integration
  SKIP_RETURN_CODE 77
  TIMEOUT 300
  COST 20
  ENVIRONMENT "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_TEST_BROKER_URI=${db_broker_uri};PYTHONDONTWRITEBYTECODE=1")

# test_migrate_plugin.py: deploy/plugin/migrate/delay-bridge-migrate-plugin
# moves the messages the delayed-message plugin holds into the bridge, on a
# RabbitMQ 4.0.5 node of its own (free ports; the plugin's tables are Mnesia,
# which 4.3 does not have), whatever DB_RABBITMQ says. .fixture: the plugin's
# table written by tests/integration/migrate_fixture.erl (no plugin source
# needed: CI); .reference: the real plugin 4.0.7, built as for
# plugin_compat.reference, skipped (77) without its source. 20,000 messages
# each (about 70 s, most of it waiting for the short delays); the 100,000
# of issue 40 (about 2 min each, heavy on the CPU for 40 s) under label
# migrate_long, never in the suite, by hand:
#   ctest --test-dir build -C long -L migrate_long --output-on-failure
foreach(mode fixture reference)
  add_test(NAME integration.migrate_plugin.${mode}
           COMMAND ${DB_PYTHON3} -u ${db_it_dir}/test_migrate_plugin.py ${mode} 20000)
  add_test(NAME integration.migrate_plugin.${mode}.100k CONFIGURATIONS long
           COMMAND ${DB_PYTHON3} -u ${db_it_dir}/test_migrate_plugin.py ${mode} 100000)
  set_tests_properties(integration.migrate_plugin.${mode} PROPERTIES
    LABELS integration
    SKIP_RETURN_CODE 77
    TIMEOUT 480
    COST 70
    ENVIRONMENT "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_TEST_BROKER_URI=${db_broker_uri};PYTHONDONTWRITEBYTECODE=1")
  set_tests_properties(integration.migrate_plugin.${mode}.100k PROPERTIES
    LABELS migrate_long
    SKIP_RETURN_CODE 77
    TIMEOUT 1600
    RESOURCE_LOCK heavy
    ENVIRONMENT "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_TEST_BROKER_URI=${db_broker_uri};PYTHONDONTWRITEBYTECODE=1")
endforeach()
