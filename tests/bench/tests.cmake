# The end-to-end benchmark's load tools and its smoke test (included from
# tests/CMakeLists.txt; see tests/bench/README.md).
#
# load_publish, load_consume and load_retry (retry.sh's consumer that fails
# chosen messages, its topology and queue watcher) speak AMQP through
# rabbitmq-c only, so they are not bench_*.c (those link dbcore alone). tests/bench/run.sh drives
# them against a broker of its own; it builds nothing and takes the
# binaries from BUILD_DIR.
#
# bench.smoke (label bench-smoke) runs `run.sh --smoke`: every scenario at
# tiny sizes, its own RabbitMQ on 127.0.0.1:5695, in about 35 s. It checks
# only that every message arrived, never a time. Exit 77 (skipped) when
# rabbitmq-server is not installed. On RabbitMQ 4.0 (DB_RABBITMQ=4.0) it
# also runs the delayed-message plugin's steady and burst loads when the
# plugin is built on the machine (36 s in all, measured); without it, a line
# says so and nothing fails.
#
#   ctest --test-dir build -L bench-smoke --output-on-failure

foreach(db_load load_publish load_consume load_retry)
  add_executable(${db_load} ${CMAKE_CURRENT_LIST_DIR}/${db_load}.c)
  target_link_libraries(${db_load} PRIVATE PkgConfig::RABBITMQ)
endforeach()

# db_bench_smoke(NAME SCRIPT COST): `SCRIPT --smoke`, one at a time (lock
# "bench"), label bench-smoke, skipped (77) without RabbitMQ, the build's
# bridge and load tools.
function(db_bench_smoke name script cost)
  add_test(NAME ${name} COMMAND bash ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${script} --smoke)
  set_tests_properties(${name} PROPERTIES
  FIXTURES_REQUIRED rabbitmq
  LABELS bench-smoke
  RESOURCE_LOCK bench
  COST ${cost}
  SKIP_RETURN_CODE 77
  TIMEOUT 300
  ENVIRONMENT "BUILD_DIR=${CMAKE_BINARY_DIR};BENCH_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;BENCH_TOOLS_DIR=$<TARGET_FILE_DIR:load_publish>")
endfunction()

# FIXTURES_REQUIRED rabbitmq only orders them (each smoke runs a broker of
# its own): once a fixture's setup ends, ctest (3.25) starts every test that
# requires it before any test that does not, whatever their COST, so without
# it the two smokes (69 s one after the other, lock "bench") started after
# the ~100 integration tests and were the suite's tail.
db_bench_smoke(bench.smoke run.sh 60)

# bench.hops.smoke: `hops.sh --smoke`, the broker's CPU per hop (2k messages
# per phase, its own RabbitMQ on 127.0.0.1:5696): checks only that every
# message of every phase arrived. On RabbitMQ 4.0 (DB_RABBITMQ=4.0) with the
# delayed-message plugin built, also its phase SP (about 43 s in all);
# without it, a line says why and nothing fails.
db_bench_smoke(bench.hops.smoke hops.sh 40)

# bench.ontime.smoke: `ontime.sh --smoke`, lateness at 25/50/90 % of the
# bridge's accept rate (2k messages a load, delays 1-3 s, its own RabbitMQ
# on 127.0.0.1:5698; on 4.0 the plugin's loads too): checks only that every
# message of every load arrived.
db_bench_smoke(bench.ontime.smoke ontime.sh 40)

# bench.retry.smoke: `retry.sh --smoke`, what a retry costs the broker
# through a retry route and through a TTL ladder (300 messages a path at
# full speed), then one 2 s step of the sustained-rate search for each at
# 200 msg/s, every 10th message failed three times; its own RabbitMQ on
# 127.0.0.1:5694. Checks only that every message was acked, with the
# bridge's x-retry-attempt matching the consumer's count (26 s measured).
db_bench_smoke(bench.retry.smoke retry.sh 30)

# bench.median: median.sh's parser (median.py) over two canned reports
# (tests/bench/median-test/run-*.txt; numbers medianed, a cell that reads
# differently, a row one run lacks, a table matched by position), its
# output against expected.txt. No broker; label unit.
add_test(NAME bench.median
  COMMAND bash -c "set -o pipefail; /usr/bin/python3 ../median.py run-1.txt run-2.txt | diff -u expected.txt -"
  WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR}/median-test)
set_tests_properties(bench.median PROPERTIES LABELS unit TIMEOUT 60)
