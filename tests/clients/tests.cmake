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
