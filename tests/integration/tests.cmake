# Integration tests against a real RabbitMQ (included from tests/CMakeLists.txt).
#
# One ctest test per tests/integration/test_*.py (label "integration"), all
# sharing one throwaway broker that a fixture starts with rabbitmq.sh under
# ${CMAKE_BINARY_DIR}/rabbitmq on 127.0.0.1:${DB_TEST_BROKER_PORT} and stops
# at the end. Most run alone (RUN_SERIAL): some restart the broker or change
# it for everyone (alarm, broker_restart), start brokers or clusters of their
# own (tls, cluster, scale_out, replicate_cluster), or measure under load and
# kill at chosen moments (crash, kill_loop, failpoints, stalled_broker, ...).
# The ones in db_it_parallel below may run beside each other under
# "ctest -j" (tests/run.sh passes it): each names its exchanges and
# queues with a random suffix (harness.py: dbt.<test>.<6 random chars>),
# keeps its files in its own temporary directory, takes its HTTP ports from
# the kernel, touches no broker-wide setting (secrets adds and deletes a
# user of a random name, bad_messages a policy on its own queue), and
# asserts no timing tighter than seconds.
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

if(db_integration_problem)
  # Configure anyway (the daemon builds without python), but make ctest say why.
  message(WARNING "integration tests cannot run: ${db_integration_problem}; "
                  "configure with -DDB_INTEGRATION=OFF to leave them out")
  add_test(NAME integration.prerequisites
           COMMAND ${CMAKE_COMMAND} -E echo "integration tests cannot run: ${db_integration_problem}")
  set_tests_properties(integration.prerequisites PROPERTIES LABELS integration WILL_FAIL TRUE)
  return()
endif()

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
  # A fresh node each run: stop whatever a previous run left, wipe its state.
  add_test(NAME integration.broker.start
           COMMAND bash -c "set -e; bash \"$0\" stop \"$1\"; rm -rf \"$1/mnesia\"; bash \"$0\" start \"$1\" \"$2\" \"$3\""
                   ${db_it_dir}/rabbitmq.sh ${db_broker_dir} ${DB_TEST_BROKER_PORT} ${DB_TEST_BROKER_DIST_PORT})
  add_test(NAME integration.broker.stop
           COMMAND bash ${db_it_dir}/rabbitmq.sh stop ${db_broker_dir})
endif()
set_tests_properties(integration.broker.start PROPERTIES
  FIXTURES_SETUP rabbitmq LABELS integration RUN_SERIAL TRUE TIMEOUT 180)
set_tests_properties(integration.broker.stop PROPERTIES
  FIXTURES_CLEANUP rabbitmq LABELS integration RUN_SERIAL TRUE TIMEOUT 120)

set(db_it_parallel bad_config config harness cli_publish cli_wal wal_lock wal_corruption
    immediate properties routes target_missing unroutable xdelay_types
    bad_messages secrets)
# Not among them: browse_purge (it bounds lateness to 3 s, which a busy machine
# breaks) and http (it stops and starts the broker: properties, beside it, found
# the node gone twice).

foreach(script ${db_it_tests})
  get_filename_component(name ${script} NAME_WE)
  string(REGEX REPLACE "^test_" "" name ${name})
  add_test(NAME integration.${name} COMMAND ${DB_PYTHON3} -u ${script})
  if(name IN_LIST db_it_parallel)
    set(db_serial FALSE)
  else()
    set(db_serial TRUE)
  endif()
  set_tests_properties(integration.${name} PROPERTIES
    FIXTURES_REQUIRED rabbitmq
    RUN_SERIAL ${db_serial}
    LABELS integration
    SKIP_RETURN_CODE 77
    TIMEOUT 300
    ENVIRONMENT "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_BRIDGE_FP_BIN=$<TARGET_FILE:delay-bridge-fp>;DB_WAL_FILL_BIN=$<TARGET_FILE:wal_fill>;DB_TEST_BROKER_URI=${db_broker_uri};DB_TEST_BROKER_DIR=${db_broker_dir};PYTHONDONTWRITEBYTECODE=1")
endforeach()
