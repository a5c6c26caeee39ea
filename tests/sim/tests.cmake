# The deterministic simulator (tests/sim/README.md): the engine, the wheel,
# the segment log, checkpoints, compaction and keys on a simulated clock
# and file layer (src/wal/walfs.h under -DDB_SIM), one seed per run.
#
#   sim.seeds   3000 seeds, 400 under sanitizers (label "sim" and "unit": under 60 s on one core;
#               about one in five a liveness seed: a small disk that must drain, README)
#   sim.seed.N  the seeds that found bugs, replayed (regressions)
#   sim.plant   planted bugs the checker must catch (proves it can fail)
#   sim.long    10^6 seeds, about 45 min on 2 cores (label "sim-long"; only with
#               -C long, so the suite never starts it: ctest -C long -L sim-long;
#               -L is a regex, so run the short ones with -L '^sim$', not -L sim)
set(DB_SIM_SOURCES
  src/base/clock.c src/base/crc32c.c src/base/failpoint.c src/base/pool.c src/base/idmap.c src/engine/keymap.c src/base/siphash.c src/engine/wheel.c src/engine/wheel_tree.c
  src/engine/duecount.c src/wal/walrec.c src/wal/walscan.c src/wal/wal.c src/wal/wal_open.c src/wal/wal_space.c src/wal/wal_reserve.c
  src/wal/wal_log.c src/wal/wal_dir.c src/wal/wlog.c src/wal/walckpt.c src/engine/engine.c src/engine/engine_recover.c
  src/engine/engine_ckpt.c src/engine/engine_admin.c src/engine/engine_state.c src/base/stats.c
  src/wal/replrec.c)
list(TRANSFORM DB_SIM_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/)
add_executable(db_sim ${CMAKE_CURRENT_SOURCE_DIR}/sim/sim.c ${CMAKE_CURRENT_SOURCE_DIR}/sim/simfs.c
               ${CMAKE_CURRENT_SOURCE_DIR}/sim/simrepl.c ${CMAKE_CURRENT_SOURCE_DIR}/sim/simlive.c
               ${DB_SIM_SOURCES})
target_compile_definitions(db_sim PRIVATE DB_SIM=1)
target_include_directories(db_sim PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src
                           ${CMAKE_CURRENT_SOURCE_DIR}/sim)
target_link_libraries(db_sim PRIVATE Threads::Threads)
set_target_properties(db_sim PROPERTIES OUTPUT_NAME sim RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/sim)

# How long sim.seeds may take is planned, not hoped for (issue 42: 1000
# seeds under ASan took 240 s of a 300 s timeout beside tests/run.sh's
# other stages and a root's debootstrap, and once over 300 s).
#
# The work, sized by what a seed costs in each build: a seed costs about
# 6.5 ms of CPU in the plain build and 51 ms under ASan + UBSan (8x: the
# sanitizers' shadow memory, page faults mostly; 200 seeds, 1.3 s and
# 10.2 s of CPU, 2026-12-06, 2 cores). The plain build runs 3000 seeds,
# 20-27 s of CPU; the sanitized one 400, the same (what it adds is a
# memory error in a state the seeds reach, and the plain run covers the
# states; the regression seeds below run under both). Measured as ctest
# runs them, on the shared machine: 3000 plain 26.7 s of CPU, 400 under
# ASan 26.4 s.
#
# The bound, in CPU time: run.sh --cpu-limit 120 (ulimit -S -t) lets no
# process of the run use more than 120 s of CPU, so a seed that never ends
# fails as that seed -- on an idle machine and on a loaded one alike. The
# wall TIMEOUT is only a backstop for a process that blocks; it is not a
# bound on speed: [asan] runs under nice beside [build]'s tests (tests/run.sh),
# so it gets what they leave, at worst about 5 % of a core (nice 10 against
# two busy processes a core: 110 / (2 x 1024 + 110)); 27 s of CPU then
# take 540 s, inside the 900 s of the backstop, and [asan] still ends
# before [build] (over 600 s).
if(DB_SANITIZE)
  set(db_sim_seeds 400)
else()
  set(db_sim_seeds 3000)
endif()
add_test(NAME sim.seeds COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/sim/run.sh --bin $<TARGET_FILE:db_sim> --seeds ${db_sim_seeds}
                                --cpu-limit 120)
set_tests_properties(sim.seeds PROPERTIES LABELS "sim;unit" TIMEOUT 900)
# Seeds that found bugs (tests/sim/README.md, "Bugs found"): each failed without its fix
# (1503 ... 48: bugs 1-4; 3 16 26 46: bug 5, liveness seeds stuck on a full disk at cee05c4).
foreach(seed 1503 1686 426 641 7 14 44 48 3 16 26 46)
  add_test(NAME sim.seed.${seed} COMMAND $<TARGET_FILE:db_sim> --seed ${seed})
  set_tests_properties(sim.seed.${seed} PROPERTIES LABELS "sim;unit" TIMEOUT 60)
endforeach()
# On a disk of 5 segments (--disk 5) seeds 14 and 17 stuck with nothing held until the
# newest segment rolled away under pressure (e0f0101).
foreach(seed 14 17)
  add_test(NAME sim.seed.${seed}.disk5 COMMAND $<TARGET_FILE:db_sim> --seed ${seed} --liveness --disk 5)
  set_tests_properties(sim.seed.${seed}.disk5 PROPERTIES LABELS "sim;unit" TIMEOUT 60)
endforeach()
# The intake gate forgot the bytes still in the write buffer at each look: a commit then
# needed more than the reserve (73ebd68). 2007493 is a liveness seed by its own draw.
add_test(NAME sim.seed.2007493 COMMAND $<TARGET_FILE:db_sim> --seed 2007493)
add_test(NAME sim.seed.5004519.liveness COMMAND $<TARGET_FILE:db_sim> --seed 5004519 --liveness)
set_tests_properties(sim.seed.2007493 sim.seed.5004519.liveness PROPERTIES LABELS "sim;unit" TIMEOUT 60)
add_test(NAME sim.plant COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/sim/plant.sh $<TARGET_FILE:db_sim>)
set_tests_properties(sim.plant PROPERTIES LABELS "sim;unit" TIMEOUT 300)
add_test(NAME sim.long CONFIGURATIONS long COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/sim/run.sh --bin $<TARGET_FILE:db_sim> --seeds 1000000 -j 2)
set_tests_properties(sim.long PROPERTIES LABELS sim-long TIMEOUT 7200)
