# deploy/monitoring/ (label "deploy"): promtool check rules, and every metric
# the rules and the Grafana dashboard name is one a running bridge exports.
# Included from tests/CMakeLists.txt after integration/tests.cmake: it starts
# a bridge against the integration tests' broker (fixture "rabbitmq").
#
#   ctest --test-dir build -R deploy.monitoring --output-on-failure
if(db_integration_problem OR NOT DB_PYTHON3)
  return()
endif()
add_test(NAME deploy.monitoring COMMAND ${DB_PYTHON3} -u ${CMAKE_CURRENT_LIST_DIR}/test_monitoring.py)
set_tests_properties(deploy.monitoring PROPERTIES
  FIXTURES_REQUIRED rabbitmq
  LABELS deploy
  SKIP_RETURN_CODE 77
  TIMEOUT 180
  ENVIRONMENT "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_TEST_BROKER_URI=${db_broker_uri};DB_TEST_BROKER_DIR=${db_broker_dir};PYTHONDONTWRITEBYTECODE=1")
