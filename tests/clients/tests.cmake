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
set(db_retry_recipes kombu kombu-policy celery nestjs java symfony)
foreach(recipe ${db_retry_recipes})
  add_test(NAME clients.retry.${recipe}
           COMMAND ${DB_PYTHON3} -u ${CMAKE_CURRENT_SOURCE_DIR}/clients/retry-recipes/run_recipe.py ${recipe})
  set_tests_properties(clients.retry.${recipe} PROPERTIES
    FIXTURES_REQUIRED rabbitmq
    RESOURCE_LOCK clients
    LABELS "clients;integration"
    SKIP_RETURN_CODE 77
    TIMEOUT 420
    ENVIRONMENT "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_TEST_BROKER_URI=${db_broker_uri};DB_TEST_BROKER_DIR=${db_broker_dir};DB_CLIENTS_WORK=${CMAKE_BINARY_DIR}/clients;PYTHONDONTWRITEBYTECODE=1")
endforeach()
