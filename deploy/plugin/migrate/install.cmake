# The migration out of the delayed-message plugin, in the Debian package
# (included by deploy/debian/package.cmake):
#   /usr/bin/delay-bridge-migrate-plugin                  the command
#   /usr/share/delay-bridge/migrate/delay_bridge_migrate.erl  the module it loads
#                                                         into the RabbitMQ node
install(PROGRAMS ${CMAKE_SOURCE_DIR}/deploy/plugin/migrate/delay-bridge-migrate-plugin DESTINATION bin)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/plugin/migrate/delay_bridge_migrate.erl
        DESTINATION share/delay-bridge/migrate)
