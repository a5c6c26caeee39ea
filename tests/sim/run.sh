#!/bin/sh
# tests/sim/run.sh -- run the deterministic simulator over a range of seeds.
#
#   tests/sim/run.sh --seeds N [--from S] [-j J] [--bin PATH] [--liveness] [--disk SEGMENTS] [--plant NAME]
#                    [--cpu-limit S]
#
# Prints one line per failing seed with the command that replays it
# exactly, then "N passed, N failed" and the figures (simulated operations
# and file-layer calls per second). With -j J the range is cut into J
# slices run side by side (each its own process). --liveness makes every
# seed a liveness seed (README: a small disk that must drain), --disk N
# gives a liveness seed's disk N segments. Exit 0 when every seed
# passed. The binary is build/tests/sim/sim unless --bin says otherwise
# (it is built by cmake --build build --target db_sim).
#
# --cpu-limit S: no process of the run may use more than S seconds of CPU
# (ulimit -S -t, for the simulator and each seed's child): a seed that never
# ends is killed by SIGXCPU and fails as that seed, with its replay line.
# CPU time, not wall time, so the bound means the same on an idle machine
# and on one where the run gets a small share (sim.seeds in tests.cmake).
set -eu
# All of it in one function, read whole before it runs: editing this file
# while a long run is under way cannot change what that run does.
main() {
    here=$(cd "$(dirname "$0")" && pwd)
    bin="$here/../../build/tests/sim/sim"
    seeds=1000 from=1 jobs=1 extra="" cpu=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --seeds) seeds=$2; shift 2 ;;
            --from) from=$2; shift 2 ;;
            -j) jobs=$2; shift 2 ;;
            --bin) bin=$2; shift 2 ;;
            --plant) extra="$extra --plant $2"; shift 2 ;;
            --liveness) extra="$extra --liveness"; shift ;;
            --disk) extra="$extra --disk $2"; shift 2 ;;
            --cpu-limit) cpu=$2; shift 2 ;;
            *) echo "usage: $0 --seeds N [--from S] [-j J] [--bin PATH] [--liveness] [--disk SEGMENTS] [--plant NAME] [--cpu-limit S]" >&2; exit 2 ;;
        esac
    done
    [ -z "$cpu" ] || ulimit -S -t "$cpu" # soft: SIGXCPU (the hard limit would be SIGKILL)
    [ -x "$bin" ] || { echo "$0: no simulator at $bin (cmake --build build --target db_sim)" >&2; exit 2; }
    if [ "$jobs" -le 1 ]; then
        exec "$bin" --seeds "$seeds" --from "$from" $extra
    fi
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    per=$(( (seeds + jobs - 1) / jobs ))
    i=0 s=$from left=$seeds
    while [ "$left" -gt 0 ]; do
        n=$per; [ "$n" -gt "$left" ] && n=$left
        "$bin" --seeds "$n" --from "$s" $extra > "$tmp/$i.out" 2>&1 &
        i=$((i + 1)); s=$((s + n)); left=$((left - n))
    done
    wait || true
    cat "$tmp"/*.out | grep -v ' passed, \|^seeds ' || true
    awk '/ passed, / { p += $1; f += $3 }
         /^seeds / { for (i = 1; i <= NF; i++) {
                         if ($i == "operations") o += $(i-1)
                         if ($i == "file-layer") c += $(i-1)
                         if ($i == "in" && $(i+2) == "s") w = $(i+1) > w ? $(i+1) : w
                         if ($i == "(cpu") cpu += $(i+1)
                         if ($i == "crashes,") cr += $(i-1)
                         if ($i == "takes;") tk += $(i-1)
                        if ($i == "corruption") rf += $(i+1)
                        if ($i == "stream") rb += $(i+1)
                        if ($i == "refused" && $(i-1) == "holes") rh += $(i+1)
                        if ($i == "liveness" && $(i+1) == "seeds") ls += $(i+2)
                        if ($i == "run" && $(i+1) == "in") lp += $(i+2)
                        if ($i == "it" && $(i+1) == "in") lf += $(i+2)
                        if ($i == "stopped" && $(i+1) == "in") { lsp += $(i+2); v = $(i+3); sub(/^\(/, "", v); lst += v }
                        if ($i == "drained") ld += $(i+2)
                        if ($i == "most") { v = $(i+1); sub(/[,%)]+$/, "", v)
                                            if ($(i+1) ~ /%/) lsh = v + 0 > lsh ? v + 0 : lsh
                                            else lm = v + 0 > lm ? v + 0 : lm }
                     } }
         END { printf "%d passed, %d failed\n", p, f;
               printf "%d operations, %d file-layer calls, %d crashes, %d takes; wall %.0f s (slowest slice), cpu %.0f s: %.0f operations and %.0f file-layer calls per cpu second\n",
                      o, c, cr, tk, w, cpu, (cpu > 0 ? o / cpu : 0), (cpu > 0 ? c / cpu : 0);
              printf "ended by a refused corruption %d; logs rebuilt from the stream %d, stream holes refused %d\n", rf, rb, rh;
              printf "liveness seeds %d: phase run in %d, disk full before it in %d, intake stopped in %d (%d stops), drained in %d steps, at most %d (%d%% of its bound)\n", ls, lp, lf, lsp, lst, ld, lm, lsh;
               exit (f > 0) }' "$tmp"/*.out
}
main "$@"
exit $?
