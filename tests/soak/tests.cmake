# Soak tests (included from tests/CMakeLists.txt): long runs against a broker
# of their own, with broker timers shortened so that minutes show what
# months would. Label "soak". The suite runs the short form; the long form
# is run by hand and its figures go to the README:
#
#   DB_BRIDGE_BIN=build/delay-bridge tests/soak/ha_soak.py --minutes 10
#   ctest --test-dir build -L soak --output-on-failure      # the 3-minute form

if(DB_PYTHON3)
  add_test(NAME soak.ha
           COMMAND ${DB_PYTHON3} -u ${CMAKE_CURRENT_SOURCE_DIR}/soak/ha_soak.py
                   --minutes 3 --kill-every 50)
  set_tests_properties(soak.ha PROPERTIES
    LABELS soak
    RESOURCE_LOCK soak_broker
    COST 300
    TIMEOUT 480
    ENVIRONMENT "DB_BRIDGE_BIN=$<TARGET_FILE:delay-bridge>;DB_SOAK_PORT=5697;PYTHONDONTWRITEBYTECODE=1")
endif()
