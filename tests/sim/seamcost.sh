#!/bin/sh
# tests/sim/seamcost.sh -- show that src/wal/walfs.h costs nothing in the default build.
#
# Compiles each log-layer file twice with the project's flags (RelWithDebInfo:
# -O2 -g): once as it is (walfs_NAME through walfs.h), once with every
# walfs_NAME written back as the plain system call and walfs.h dropped, and
# compares the disassembly and the read-only data. Prints SAME or DIFF per file;
# exit 1 on any DIFF.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/seam" "$tmp/plain"
cp -r "$root"/src/. "$tmp/seam/"
cp -r "$root"/src/. "$tmp/plain/"
files="wal/wal wal/wal_open wal/wal_space wal/wal_reserve wal/wal_dir wal/wal_log wal/walckpt wal/walscan wal/ingress_off base/clock"
for f in $files; do
    perl -pi -e 's/\bwalfs_thread_create\b/pthread_create/g; s/\bwalfs_thread_join\b/pthread_join/g;
                 s/\bwalfs_dir\b/DIR/g; s/\bwalfs_(\w+)\(/$1(/g' "$tmp/plain/$f.c"
done
sed -i '/#include "\(wal\/\)\{0,1\}walfs.h"/d' "$tmp"/plain/*/*.c "$tmp"/plain/*/*.h
status=0
for f in $files; do
    for v in seam plain; do
        ${CC:-cc} -O2 -g -DNDEBUG -std=gnu11 -I"$root/include" -I"$tmp/$v" -c "$tmp/$v/$f.c" -o "$tmp/$v/$f.o"
        objdump -d --no-show-raw-insn "$tmp/$v/$f.o" | tail -n +3 > "$tmp/$v/$f.dis"
        objdump -s -j .rodata -j .rodata.str1.1 -j .rodata.str1.8 "$tmp/$v/$f.o" 2>/dev/null | tail -n +3 > "$tmp/$v/$f.ro" || true
    done
    if cmp -s "$tmp/seam/$f.dis" "$tmp/plain/$f.dis" && cmp -s "$tmp/seam/$f.ro" "$tmp/plain/$f.ro"; then
        echo "src/$f.c: SAME code and data with and without the seam"
    else
        echo "src/$f.c: DIFF"; status=1
    fi
done
exit $status
