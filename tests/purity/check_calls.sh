#!/bin/bash
# check_calls.sh -- inside a folder of src/, calls go one way (run by ctest as "calls").
#
#   bash tests/purity/check_calls.sh "FOLDER ..." OBJECT...
#
# The objects are a library's (ctest passes $<TARGET_OBJECTS:dbcore>); for
# each FOLDER (src/FOLDER), a file that calls a function (or reads data)
# another file of the folder defines depends on it, read from nm's defined
# and undefined symbols. Two files that depend on each other fail the test:
# a file split out of another never calls back into it (src/STYLE.md); what
# both need goes one floor down, as config/ puts config_schema.c and
# config_json.c under the rest. Prints each folder's edges. Exit 0 pass, 1 fail.
set -u
folders=$1
shift
all=()
for arg in "$@"; do # a generator expression's list arrives as one argument, ';' between
    IFS=';' read -ra items <<<"$arg"
    all+=("${items[@]}")
done
fail=0
for folder in $folders; do
    objs=()
    for o in "${all[@]}"; do
        case "$o" in */src/"$folder"/*.o) objs+=("$o") ;; esac
    done
    for o in "${objs[@]}"; do
        [ -f "$o" ] || { echo "FAIL: $o: no such object (build first)"; exit 1; }
    done
    if [ ${#objs[@]} -eq 0 ]; then
        echo "FAIL: no object of src/$folder/ given"
        fail=1
        continue
    fi
    declare -A def=()
    for o in "${objs[@]}"; do
        f=$(basename "$o" .o)
        f=${f%.c}
        while read -r s; do def[$s]=$f; done < <(nm --defined-only "$o" | awk '$2 ~ /[TDBRV]/ {print $3}')
    done
    edges=$(for o in "${objs[@]}"; do
        f=$(basename "$o" .o)
        f=${f%.c}
        nm -u "$o" | awk '{print $2}' | while read -r s; do
            d=${def[$s]:-}
            [ -n "$d" ] && [ "$d" != "$f" ] && echo "$f -> $d"
        done
    done | sort -u)
    echo "src/$folder:"
    echo "$edges" | sed 's/^/  /'
    while read -r a _ b; do
        [ -z "$a" ] && continue
        if grep -qx "$b -> $a" <<<"$edges" && [[ "$a" < "$b" ]]; then
            echo "FAIL: src/$folder: $a.c and $b.c call each other; move what both need one floor down"
            fail=1
        fi
    done <<<"$edges"
    unset def
done
[ $fail -eq 0 ] && echo "ok: no two files of src/{$folders} call each other"
exit $fail
