#!/bin/bash
# build_qq_delay.sh -- a RabbitMQ node with quorum-queue message delays
# (rabbitmq-server's qq-vNext branch), built once and cached beside the
# other broker roots.
#
#   build_qq_delay.sh [--force]    build ROOTS/qq-delay if it is not there yet
#
# Why this can be done without erlang.mk, hex or the internet. RabbitMQ's
# qq-vNext branch (commit 656ea1e "QQ: implement message delays" and the
# deferral-token commits around it) lies on main, the 4.4 line. Debian
# forky's rabbitmq-server 4.3.6 (the 4.3 root broker.sh makes) already ships
# every third-party application that branch asks for in its
# rabbitmq-components.mk at the same version -- ra 3.1.10, osiris 1.13.1,
# seshat, horus, cuttlefish, ... -- but one: khepri, 0.19.0-beta.1 there
# against 0.18.1 here. So only the applications that changed are compiled,
# with plain erlc inside the forky root (Erlang/OTP 29 lives there):
#
#   from rabbitmq-server at REF: rabbit_common, amqp10_common,
#       rabbitmq_prelaunch and rabbit (the AMQP 0-9-1 and 1.0 framing
#       modules generated from rabbitmq_codegen's specs with python3, as
#       erlang.mk does; the SQL filter lexer/parser from their .xrl/.yrl);
#   from khepri at KHEPRI_REF: khepri (.app from its own .app.src);
#   from khepri_mnesia_migration: only its private header
#       src/kmm_logging.hrl, which rabbit includes and Debian does not ship
#       (the application itself, 0.8.1, is the root's).
#
# What the root lacks for a build, the OTP headers (public_key.hrl ...) and
# parsetools (leex, yecc), comes from forky's erlang-dev and
# erlang-parsetools, installed into the new root with apt-get from the
# Debian mirror apt uses here. Each .app file but khepri's is the 4.3.6 one
# with vsn, modules, env (rabbit's PROJECT_ENV) and applications (kernel,
# stdlib, LOCAL_DEPS, DEPS: the rule erlang.mk follows) taken from the
# branch's Makefile. The root
# is forky's root hard-linked file by file (cp -al: a second, free copy of
# 580 MB; nothing here ever writes into a linked file, replaced
# applications are unlinked, never overwritten) with the five applications
# swapped in its plugins directory; the 4.3.6 CLI escripts stay and drive
# the new node (rabbitmqctl, rabbitmq-diagnostics, ...). A failed build
# leaves ROOTS/qq-delay.tmp behind to look at, and never a half root.
#
# Environment:
#   DB_RABBITMQ_ROOTS   where the roots live (default /var/cache/delay-bridge/roots)
#   QQ_DELAY_SERVER_GIT rabbitmq-server git directory or URL
#                       (default /work/.mirror/rabbitmq+rabbitmq-server/repo)
#   QQ_DELAY_REF        its branch, tag or commit (default qq-vNext)
#   QQ_DELAY_KHEPRI_GIT khepri git directory or URL (default /work/.mirror/rabbitmq+khepri/repo)
#   QQ_DELAY_KHEPRI_REF (default v0.19.0-beta.1)
#   QQ_DELAY_KMM_GIT    khepri_mnesia_migration git directory or URL
#                       (default /work/.mirror/rabbitmq+khepri_mnesia_migration/repo)
#   QQ_DELAY_KMM_REF    (default v0.8.0: the newest tag there; its kmm_logging.hrl
#                       is the one 0.8.1 has)
#   QQ_DELAY_NAME       the root's name under ROOTS (default qq-delay)
#   QQ_DELAY_VSN        the version the node reports (default
#                       4.4.0-alpha.<ref>.<commit>, e.g. 4.4.0-alpha.qq.vnext.c6ab3c91:
#                       check_qq_delay.py expects publish delays when it names qq)
# A URL is cloned bare once into ROOTS/qq-delay.git/. The same recipe
# builds another ref (QQ_DELAY_REF=main QQ_DELAY_NAME=main) as long as it
# asks for the same ra; another khepri or osiris than the ones used here is
# a warning (see tests/bench/qq-delay-notes.md for main).
#
# Exit codes: 0 built (or already there), 1 build failed, 77 this machine
# cannot (not root, no forky root and no debootstrap).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOTS=${DB_RABBITMQ_ROOTS:-/var/cache/delay-bridge/roots}
SERVER_GIT=${QQ_DELAY_SERVER_GIT:-/work/.mirror/rabbitmq+rabbitmq-server/repo}
REF=${QQ_DELAY_REF:-qq-vNext}
KHEPRI_GIT=${QQ_DELAY_KHEPRI_GIT:-/work/.mirror/rabbitmq+khepri/repo}
KHEPRI_REF=${QQ_DELAY_KHEPRI_REF:-v0.19.0-beta.1}
KMM_GIT=${QQ_DELAY_KMM_GIT:-/work/.mirror/rabbitmq+khepri_mnesia_migration/repo}
KMM_REF=${QQ_DELAY_KMM_REF:-v0.8.0}
NAME=${QQ_DELAY_NAME:-qq-delay}
BASE=$ROOTS/forky
ROOT=$ROOTS/$NAME
TMP=$ROOT.tmp
BASE_VSN=4.3.6

say() { printf 'build_qq_delay.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
cannot() { say "cannot build the qq-delay node here: $*"; exit 77; }

FORCE=0
[ "${1:-}" = --force ] && FORCE=1
if [ $FORCE = 0 ] && [ -x "$ROOT/usr/lib/rabbitmq/bin/rabbitmq-server" ] && [ -f "$ROOT/QQ_DELAY_BUILD" ]; then
    exit 0
fi
[ "$(id -u)" -eq 0 ] || cannot "it needs root (chroot)"
command -v git >/dev/null || cannot "git is not installed"

# The 4.3 root first: broker.sh makes it if need be (broker.sh prepare
# qq-delay makes forky itself before calling this script, under its lock).
if [ ! -x "$BASE/usr/lib/rabbitmq/bin/rabbitmq-server" ]; then
    DB_RABBITMQ_ROOTS=$ROOTS "$HERE/broker.sh" prepare 4.3 || exit $?
fi
PLUG_REL=usr/lib/rabbitmq/lib/rabbitmq_server-$BASE_VSN/plugins
[ -d "$BASE/$PLUG_REL/ra-3.1.10" ] ||
    die "the forky root has no ra 3.1.10 ($BASE/$PLUG_REL): the recipe assumes forky's rabbitmq-server $BASE_VSN"

# A git directory for SOURCE (a local git dir, or a URL cloned bare once).
git_dir() {
    local src=$1 name=$2
    if [ -d "$src" ] && git --git-dir="$src" rev-parse --git-dir >/dev/null 2>&1; then
        echo "$src"
        return
    fi
    local d=$ROOTS/qq-delay.git/$name
    if [ ! -d "$d" ]; then
        say "cloning $src into $d"
        git clone --quiet --bare "$src" "$d.tmp" && mv "$d.tmp" "$d"
    fi
    echo "$d"
}

START=$(date +%s)
SG=$(git_dir "$SERVER_GIT" rabbitmq-server)
KG=$(git_dir "$KHEPRI_GIT" khepri)
MG=$(git_dir "$KMM_GIT" khepri_mnesia_migration)
SHA=$(git --git-dir="$SG" rev-parse --verify "$REF^{commit}") || die "no $REF in $SG"
KSHA=$(git --git-dir="$KG" rev-parse --verify "$KHEPRI_REF^{commit}") || die "no $KHEPRI_REF in $KG"
git --git-dir="$MG" rev-parse --verify "$KMM_REF^{commit}" >/dev/null || die "no $KMM_REF in $MG"
WANT_RA=$(git --git-dir="$SG" show "$SHA:rabbitmq-components.mk" | awk '$1 == "dep_ra" {print $4}')
WANT_KHEPRI=$(git --git-dir="$SG" show "$SHA:rabbitmq-components.mk" | awk '$1 == "dep_khepri" {print $4}')
WANT_OSIRIS=$(git --git-dir="$SG" show "$SHA:rabbitmq-components.mk" | awk '$1 == "dep_osiris" {print $5}')
[ "$WANT_RA" = 3.1.10 ] || die "$REF asks for ra $WANT_RA; the forky root has 3.1.10"
[ "v$WANT_KHEPRI" = "$KHEPRI_REF" ] || say "warning: $REF asks for khepri $WANT_KHEPRI, building $KHEPRI_REF"
[ -d "$BASE/$PLUG_REL/osiris-${WANT_OSIRIS#v}" ] ||
    say "warning: $REF asks for osiris $WANT_OSIRIS, the root has $(cd "$BASE/$PLUG_REL" && echo osiris-*)"
# The version the node reports: the 4.4 line, then the ref and commit.
TAG=$(printf '%s' "$REF" | tr -c '[:alnum:]' '.' | tr '[:upper:]' '[:lower:]')
VSN=${QQ_DELAY_VSN:-4.4.0-alpha.$TAG.${SHA:0:8}}
KVSN=${KHEPRI_REF#v}
say "building rabbitmq-server $REF ($SHA) as $VSN with khepri $KVSN (log: $TMP/build/build.log)"

# Unmount ROOT's proc, dev and sys (the wrappers mount them, sometimes
# twice). A mount still busy (a process of a node that just stopped) is
# detached lazily: it leaves the tree at once, so nothing below walks into it.
unmount_root() {
    local r=$1 d n
    for d in proc dev sys; do
        n=0
        while mountpoint -q "$r/$d" 2>/dev/null; do
            if ! umount "$r/$d" 2>/dev/null; then
                n=$((n + 1))
                if [ $n -ge 5 ]; then
                    umount -l "$r/$d" || die "cannot unmount $r/$d"
                else
                    sleep 1
                fi
            fi
        done
    done
}
# rm -rf of a root, its mounts gone first; --one-file-system as a second guard.
remove_root() {
    local r=$1
    [ -e "$r" ] || return 0
    unmount_root "$r"
    rm -rf --one-file-system "$r"
}

# No node may run in the root being replaced (its files would go from under it).
running_in() {
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$1" ] && { echo "${p#/proc/}"; return 0; }
    done
    return 1
}
if pid=$(running_in "$ROOT"); then
    die "process $pid runs in $ROOT (a node?): stop it first (rabbitmq.sh stop DIR)"
fi

# A fresh copy of the forky root, hard-linked; proc, dev, sys and tmp empty.
remove_root "$TMP"
mkdir -p "$TMP"
for e in "$BASE"/* "$BASE"/.[!.]*; do
    [ -e "$e" ] || continue
    b=${e#"$BASE"/}
    case $b in
    proc | dev | sys | tmp) mkdir "$TMP/$b" ;;
    etc | var) cp -a "$e" "$TMP/$b" ;;   # apt and dpkg append to files there: real copies
    *) cp -al "$e" "$TMP/$b" ;;
    esac
done
chmod 1777 "$TMP/tmp"
for d in proc dev sys; do mount --bind "/$d" "$TMP/$d"; done
release() { unmount_root "$TMP"; }
trap release EXIT

# The Erlang headers (public_key.hrl, ...) and parsetools (leex, yecc) a
# build needs are not in the root: forky's erlang-dev and erlang-parsetools,
# from the mirror apt uses here. dpkg unpacks new files and renames over
# old ones, so the hard-linked files of the forky root stay as they were.
if ! ls -d "$TMP"/usr/lib/erlang/lib/public_key-*/include >/dev/null 2>&1 ||
    ! ls -d "$TMP"/usr/lib/erlang/lib/parsetools-* >/dev/null 2>&1; then
    say "installing erlang-dev and erlang-parsetools into the root (apt-get, forky)"
    m=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$m" ] || m=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    echo "deb ${m:-http://deb.debian.org/debian} forky main" >"$TMP/etc/apt/sources.list"
    if ! { chroot "$TMP" env DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::Check-Valid-Until=false update &&
        chroot "$TMP" env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends \
            erlang-dev erlang-parsetools; } >"$TMP/apt.log" 2>&1; then
        tail -n 20 "$TMP/apt.log" >&2
        die "apt-get in the root failed (log $TMP/apt.log)"
    fi
    chroot "$TMP" apt-get clean
fi

# Sources, inside the root so the chroot sees them.
S=$TMP/build/src
mkdir -p "$S/khepri" "$S/kmm/src"
git --git-dir="$SG" archive "$SHA" rabbitmq-components.mk deps/rabbit_common deps/amqp10_common \
    deps/rabbitmq_prelaunch deps/rabbit deps/rabbitmq_codegen | tar -x -C "$S"
git --git-dir="$KG" archive "$KSHA" src include | tar -x -C "$S/khepri"
git --git-dir="$MG" show "$KMM_REF:src/kmm_logging.hrl" >"$S/kmm/src/kmm_logging.hrl"

cat >"$TMP/build/mkapp.escript" <<'ESCRIPT'
%% mkapp.escript TEMPLATE.app OUT.app VSN EBIN ENVFILE|- APP...
%% The template's keys, with vsn, modules (EBIN's beams), env (ENVFILE's
%% term, or the template's when "-") and applications (APPs, or the
%% template's when none) replaced.
main([Template, Out, Vsn, Ebin, EnvFile | Apps]) ->
    {ok, [{application, Name, Props0}]} = file:consult(Template),
    Mods = lists:sort([list_to_atom(filename:basename(F, ".beam"))
                       || F <- filelib:wildcard(filename:join(Ebin, "*.beam"))]),
    Env = case EnvFile of
              "-" -> proplists:get_value(env, Props0, []);
              _ -> {ok, [E]} = file:consult(EnvFile), E
          end,
    AppList = case Apps of
                  [] -> proplists:get_value(applications, Props0);
                  _ -> [list_to_atom(A) || A <- Apps]
              end,
    Props = lists:foldl(fun({K, V}, P) -> lists:keystore(K, 1, P, {K, V}) end,
                        Props0, [{vsn, Vsn}, {modules, Mods}, {env, Env},
                                 {applications, AppList}]),
    ok = file:write_file(Out, io_lib:format("~p.~n", [{application, Name, Props}])).
ESCRIPT

# The compile step, run inside the root.
cat >"$TMP/build/compile.sh" <<'INNER'
#!/bin/bash
# Inside the root: compile the changed applications into /build/out.
set -euo pipefail
VSN=$1 KVSN=$2 BASE_VSN=$3
P=/usr/lib/rabbitmq/lib/rabbitmq_server-$BASE_VSN/plugins
S=/build/src
O=/build/out
L=/build/libs           # ERL_LIBS while compiling: the root's apps + the new ones
rm -rf "$O" "$L"
mkdir -p "$O" "$L"
for a in "$P"/*; do
    n=$(basename "$a")
    case ${n%-*} in
    rabbit | rabbit_common | amqp10_common | rabbitmq_prelaunch | khepri | khepri_mnesia_migration) ;;
    *) ln -s "$a" "$L/$n" ;;
    esac
done
# khepri_mnesia_migration: the root's ebin plus its private header.
mkdir -p "$L/khepri_mnesia_migration-0.8.1"
ln -s "$P"/khepri_mnesia_migration-*/ebin "$L/khepri_mnesia_migration-0.8.1/ebin"
ln -s "$S/kmm/src" "$L/khepri_mnesia_migration-0.8.1/src"
export ERL_LIBS=$L
# -I rabbit_common/include: what rabbit's Makefile adds (RMQ_ERLC_OPTS).
OPTS=(+debug_info +deterministic +warn_export_vars +warn_obsolete_guard -DINSTR_MOD=gm -I "$S/deps/rabbit_common/include")

# app NAME VSN SRCDIR TEMPLATE_APP ENVFILE APPS...: compile SRCDIR/src into $O/NAME-VSN.
app() {
    local name=$1 vsn=$2 src=$3 tmpl=$4 env=$5
    shift 5
    local d=$O/$name-$vsn
    mkdir -p "$d/ebin"
    [ -d "$src/include" ] && cp -r "$src/include" "$d/"
    [ -d "$src/priv" ] && cp -r "$src/priv" "$d/"
    ln -sfn "$d" "$L/$name-$vsn"
    echo "== $name $vsn: $(ls "$src"/src/*.erl | wc -l) modules"
    erlc -o "$d/ebin" "${OPTS[@]}" -I "$src/include" -I "$src/src" -I "$src" -pa "$d/ebin" "$src"/src/*.erl
    escript /build/mkapp.escript "$tmpl" "$d/ebin/$name.app" "$vsn" "$d/ebin" "$env" "$@"
}
# make_apps MAKEFILE: kernel stdlib LOCAL_DEPS DEPS, as erlang.mk lists them
# (split into words on purpose where it is used).
make_apps() {
    echo kernel stdlib
    sed -n -e 's/^LOCAL_DEPS *= *//p' -e 's/^DEPS *= *//p' "$1"
}
make_env() {   # PROJECT_ENV of MAKEFILE into FILE as a term
    sed -n '/^define PROJECT_ENV/,/^endef/p' "$1" | sed '1d;$d' >"$2"
    echo . >>"$2"
}
R=$S/deps

# rabbit_common: the AMQP 0-9-1 framing is generated, as development.post.mk does.
C=$R/rabbitmq_codegen
( cd "$R/rabbit_common" &&
  PYTHONPATH=$C python3 codegen.py --ignore-conflicts header "$C/amqp-rabbitmq-0.9.1.json" "$C/credit_extension.json" include/rabbit_framing.hrl &&
  PYTHONPATH=$C python3 codegen.py body "$C/amqp-rabbitmq-0.9.1.json" "$C/credit_extension.json" src/rabbit_framing_amqp_0_9_1.erl )
# amqp10_common: the AMQP 1.0 framing, likewise.
X=$C/amqp-1.0
( cd "$R/amqp10_common" && mkdir -p include &&
  PYTHONPATH=$C python3 codegen.py hrl "$X/messaging.xml" "$X/security.xml" "$X/transport.xml" "$X/transactions.xml" >include/amqp10_framing.hrl &&
  PYTHONPATH=$C python3 codegen.py erl "$X/messaging.xml" "$X/security.xml" "$X/transport.xml" "$X/transactions.xml" >src/amqp10_framing0.erl )
# rabbit: the SQL filter's lexer and parser, from their .xrl/.yrl with
# parsetools; the root has no parsetools (erlang-parsetools is not a
# dependency of rabbitmq-server), so there the 4.3.6 beams are taken: both
# sources are the same on qq-vNext as in 4.3.5 (git diff v4.3.5 qq-vNext).
if erl -noshell -eval 'halt(case code:which(leex) of non_existing -> 1; _ -> 0 end)'; then
    ( cd "$R/rabbit/src" && erlc +deterministic rabbit_amqp_sql_lexer.xrl && erlc +deterministic rabbit_amqp_sql_parser.yrl )
else
    echo "== no parsetools: rabbit_amqp_sql_lexer and rabbit_amqp_sql_parser from rabbit $BASE_VSN"
    mkdir -p "$O/rabbit-$VSN/ebin"
    cp "$P/rabbit-$BASE_VSN"/ebin/rabbit_amqp_sql_{lexer,parser}.beam "$O/rabbit-$VSN/ebin/"
fi

app rabbit_common "$VSN" "$R/rabbit_common" "$P/rabbit_common-$BASE_VSN/ebin/rabbit_common.app" - \
    $(make_apps "$R/rabbit_common/Makefile")
app amqp10_common "$VSN" "$R/amqp10_common" "$P/amqp10_common-$BASE_VSN/ebin/amqp10_common.app" - \
    $(make_apps "$R/amqp10_common/Makefile")
app rabbitmq_prelaunch "$VSN" "$R/rabbitmq_prelaunch" "$P/rabbitmq_prelaunch-$BASE_VSN/ebin/rabbitmq_prelaunch.app" - \
    $(make_apps "$R/rabbitmq_prelaunch/Makefile")
app khepri "$KVSN" "$S/khepri" "$S/khepri/src/khepri.app.src" -   # its own app.src as the template
make_env "$R/rabbit/Makefile" /build/rabbit.env
app rabbit "$VSN" "$R/rabbit" "$P/rabbit-$BASE_VSN/ebin/rabbit.app" /build/rabbit.env \
    $(make_apps "$R/rabbit/Makefile")
echo "== compiled into $O"
INNER
chmod 755 "$TMP/build/compile.sh"

if ! nice -n 19 chroot "$TMP" /build/compile.sh "$VSN" "$KVSN" "$BASE_VSN" >"$TMP/build/build.log" 2>&1; then
    grep -v -E '^[^ ]+:[0-9]+:[0-9]+: Warning:|^%' "$TMP/build/build.log" | tail -n 30 >&2
    die "compiling failed (log $TMP/build/build.log)"
fi

# Swap the applications in the root's plugins directory (unlink, never overwrite).
PL=$TMP/$PLUG_REL
rm -rf "$PL"/rabbit-"$BASE_VSN" "$PL"/rabbit_common-"$BASE_VSN" "$PL"/amqp10_common-"$BASE_VSN" \
    "$PL"/rabbitmq_prelaunch-"$BASE_VSN" "$PL"/khepri-0.18.1
cp -r "$TMP"/build/out/* "$PL/"
release
trap - EXIT
cat >"$TMP/QQ_DELAY_BUILD" <<EOF
rabbitmq-server $REF $SHA
version $VSN
khepri $KHEPRI_REF $KSHA
base forky rabbitmq-server $BASE_VSN
built $(date -u +%FT%TZ) in $(($(date +%s) - START)) s
EOF
remove_root "$ROOT.old"
if [ -e "$ROOT" ]; then
    unmount_root "$ROOT"
    mv "$ROOT" "$ROOT.old"
fi
mv "$TMP" "$ROOT"
remove_root "$ROOT.old"
say "built $ROOT ($VSN) in $(($(date +%s) - START)) s"
