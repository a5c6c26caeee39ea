# Deploy tests (label "deploy"): the files in deploy/ checked against
# systemd, Kubernetes' object shapes, RabbitMQ's permission model and the
# daemon's own --check-config. No broker, no cluster, nothing installed.
#
# Included from tests/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/deploy/tests.cmake)
#
#   ctest --test-dir build -L deploy --output-on-failure
#
# Each script also runs alone, with the daemon's path as its argument:
#   bash tests/deploy/test_systemd.sh build/delay-bridge
#   /usr/bin/python3 tests/deploy/test_manifests.py build/delay-bridge
#   /usr/bin/python3 tests/deploy/test_manpages.py
# They exit 77 (ctest: skipped) when their tool is missing: systemd-analyze
# (package systemd), python3's yaml module (package python3-yaml).

set(db_deploy_dir ${CMAKE_CURRENT_LIST_DIR})

# /usr/bin/python3 first: Debian's python3-yaml is installed for it.
find_program(DB_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT DB_PYTHON3)
  find_program(DB_PYTHON3 NAMES python3)
endif()

add_test(NAME deploy.systemd
         COMMAND bash ${db_deploy_dir}/test_systemd.sh $<TARGET_FILE:delay-bridge>)
set_tests_properties(deploy.systemd PROPERTIES
  LABELS deploy SKIP_RETURN_CODE 77 TIMEOUT 120)

if(DB_PYTHON3)
  add_test(NAME deploy.manifests
           COMMAND ${DB_PYTHON3} ${db_deploy_dir}/test_manifests.py $<TARGET_FILE:delay-bridge>)
  set_tests_properties(deploy.manifests PROPERTIES
    LABELS deploy SKIP_RETURN_CODE 77 TIMEOUT 120
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
else()
  add_test(NAME deploy.manifests
           COMMAND ${CMAKE_COMMAND} -E echo "deploy.manifests needs python3 with yaml (apt-get install python3-yaml)")
  set_tests_properties(deploy.manifests PROPERTIES LABELS deploy WILL_FAIL TRUE)
endif()

# The man pages (deploy/man/) against the parser's keys, the README's
# configuration table and the daemon's commands; reads sources only.
if(DB_PYTHON3)
  add_test(NAME deploy.manpages
           COMMAND ${DB_PYTHON3} ${db_deploy_dir}/test_manpages.py)
  set_tests_properties(deploy.manpages PROPERTIES
    LABELS deploy TIMEOUT 60 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
endif()

# The unit the Debian package installs (deploy/debian/package.cmake writes it).
if(EXISTS ${CMAKE_BINARY_DIR}/deb/delay-bridge.service)
  add_test(NAME deploy.systemd_package
           COMMAND bash ${db_deploy_dir}/test_systemd_package.sh
                   ${CMAKE_BINARY_DIR}/deb/delay-bridge.service $<TARGET_FILE:delay-bridge>)
  set_tests_properties(deploy.systemd_package PROPERTIES
    LABELS deploy SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()
