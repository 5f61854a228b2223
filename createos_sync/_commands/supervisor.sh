# createos-sync command session: runs the commands of one lease, one request each.
#
# Run as `/bin/bash -c "$(cat supervisor.sh)" createos-sync-session SESSION_ID /workspace`; every
# managed process of this package already needs /bin/bash, and nothing else is used but
# cat, mkfifo, rm and grep. Requests, one line each on stdin (fields: one space):
#
#   R TOKEN N CWD STDIN SCRIPT   run command N (fields: "-" for none, or ":" and the
#                                bytes, every byte outside [A-Za-z0-9_./=+,-] as \0ooo)
#   K TOKEN N GRACE              end command N's processes (TERM, GRACE s, KILL), report
#
# Records on the session's stdout / stderr start with NUL RS and a TOKEN the client chose
# for this request (128 random bits, held only in this script's variables and pipes:
# never in an argv, an env or a file), so no command can write one:
#
#   stdout: <NUL><RS>TOKEN a\n (accepted) ... TOKEN x CODE\n (exited) | TOKEN s SIGNUM\n
#           (signal) | TOKEN L\n (its watcher was killed) | TOKEN k LEFT\n (a kill's report;
#           "k 0 never": that command's request never came)
#   stderr: <NUL><RS>TOKEN\n         the end of command N's stderr
#
# Each command is a fresh child in its own process group, with the env marker
# CREATEOS_SYNC_RUN=SESSION.N. (inherited by whatever it forks, setsid included), its
# own cwd and env (`bash -lc`, as a managed process), stdin from a file or /dev/null, and
# stdout / stderr through FIFOs relayed by `cat`: once it has ended (and 0.2 s passed for
# a background child holding them), its relays are cut, so nothing it leaves behind
# writes into a later command's output.
#
# Forks are what a command's start costs, so they are made ahead, while idle: one watcher
# (a child of this shell, for the whole session) runs the commands one after another. After
# each command's end records it makes the next one's slot (named by its pid and a count):
# its output FIFOs, their relays and the command's own process, that last one waiting to be
# told to go. It reads each command's token and N from a pipe only this shell writes to,
# then tells the slot's process to go through another, which reads its request from a
# file; both pipes have no name in any directory (and carry nothing the session's own stdin
# does not). A slot found broken when its command comes is made again at once; a watcher
# found dead is started again.

sid=$1
# The emulator's plain mode rewrites sandbox paths in a process's arguments (never in what
# it reads): there, commands must be managed processes. It shows by rewriting $2.
[ "x$2" = x/workspace ] || exit 97
set -m
exec 4>&2 2>/dev/null
tries=0 # a new name each time: one left by a session killed before its trap ran may exist
until d=${TMPDIR:-/tmp}/.createos_sync_session.$$.$RANDOM$RANDOM && mkdir -m 700 -- "$d"; do
    tries=$((tries + 1))
    [ "$tries" -lt 20 ] || exit 97
done
trap 'rm -rf -- "$d"' EXIT
mkfifo -m 600 -- "$d/tick" && exec 5<>"$d/tick" # read -t on it: a sleep without a fork

nap() { IFS= read -r -t "$1" -u 5 _ || :; }

# The status of command $2 (already waited for, `wait` status $1): "x CODE" or "s SIGNUM".
# `wait` gives 128+N for both an exit(128+N) and a death by signal N; only the latter
# leaves a job notice (bash's words for the signal) that is neither "Exit" nor "Done".
# None when that notice cannot be read (the session's directory is gone): unknown.
status_of() {
    s=$1 note= line= st=
    if [ "$s" -gt 128 ]; then
        while IFS= read -r line; do
            case $line in *" Exit "* | *" Done "*) ;; *the_command*) note=1 ;; esac
        done <"$d/w$2" || return 0
    fi
    if [ -n "$note" ]; then st="s $((s - 128))"; else st="x $s"; fi
}

# The command's own process (its job: the only one named the_command, see status_of),
# made ahead: it waits for "go N" on fd 6, then reads request N's fields (whether it has
# stdin, cwd, script) from its file. It reads fd 6 read-only: if the watcher dies first,
# it reads EOF and ends (its relays with it).
the_command() {
    local go= has_in= a= c=
    exec 4>&- 5>&- 6</proc/self/fd/6
    IFS=' ' read -r -u 6 go n
    exec 6<&-
    [ "$go" = go ] || exit 1
    IFS=' ' read -r has_in a c <"$d/q$n" || exit 1
    if field "$a"; then cd -- "$v" || exit 1; fi
    if [ "$has_in" = : ]; then exec 0<"$d/i$n" || exit 1; fi
    script=
    if field "$c"; then script=$v; fi
    export CREATEOS_SYNC_RUN="$sid.$n."
    exec /bin/bash -lc "$script"
}

relaying() { kill -0 "$ro" || kill -0 "$re"; }

# Whether a process carrying command $1's marker is alive (not a zombie: it has an env).
marked() { grep -q -s -a -F -- "CREATEOS_SYNC_RUN=$sid.$1." /proc/[0-9]*/environ; }

# Whether a process of command $1 (process group $2) is alive: its group first (no fork), its
# marker, then whatever still writes into its FIFOs (this slot's o and e).
lives() {
    kill -0 -- "-$2" || marked "$1" || {
        found=()
        writers "$o" "$e"
        [ "${#found[@]}" -gt 0 ]
    }
}

# The processes that hold FIFO $1 or $2 open for writing (the relays only read): into found.
writers() {
    local f p fd k v
    for f in /proc/[0-9]*/fd/[0-9]*; do
        [ "$f" -ef "$1" ] || [ "$f" -ef "$2" ] || continue
        p=${f#/proc/}
        p=${p%%/*}
        fd=${f##*/}
        v=0
        while read -r k v; do [ "$k" != flags: ] || break; done <"/proc/$p/fdinfo/$fd"
        [ $((8#${v:-0} & 3)) -eq 0 ] || found[$p]=
    done
}


# The session's commands, one after another (a background subshell; see above). Its stdin:
# "TOKEN N" for each command, EOF when the session ends.
watcher() {
    exec 0</proc/self/fd/0 {w_fd}<&- # read-only: the supervisor's end is the only writer
    set -m
    k=0
    while :; do
        k=$((k + 1)) ro= re= c=
        slot=$BASHPID.$k # never a name another watcher used
        o=$d/o$slot e=$d/e$slot
        made || abandon
        if ! IFS=' ' read -r token n; then # the session ended
            abandon && forsake
            exit 0
        fi
        if working || { abandon && made; }; then
            run_one
        else # a command removed the directory and it could not be made again
            abandon
            printf '\0\036%s\n' "$token" >&4
            printf '\0\036%s x 126\n' "$token"
        fi
        forsake
    done
}

# Run command N in the slot made for it, to its end records.
run_one() {
    printf '%s\n%s\n' "$c" "$slot" >"$d/p$n" # its process (and group), its slot: for a kill
    printf 'go %s\n' "$n" >&6
    exec 6>&-
    [ $((n % 64)) -ne 0 ] || forget_before "$n"
    # Without the session's directory (its EXIT trap removed it: closing terminates the
    # session; or a command did) a failed redirection must not pass for the command's status
    # ("x 1"), nor an exit(128+N) for a death by signal N with no job notice to tell them apart
    # ("x 143" for a SIGTERM): then no record, and the session's end or its "L" says so.
    { wait "$c"; s=$?; } 2>"$d/w$n" || { wait "$c"; s=$?; }
    jobs -l >>"$d/w$n"
    status_of "$s" "$n"
    if [ -z "$st" ]; then
        kill "$ro" "$re"
        exit 0
    fi
    tries=0 # the relays end as soon as they read EOF, normally: look again for 5 ms at most
    while relaying && [ "$tries" -lt 50 ]; do
        nap 0.0001
        tries=$((tries + 1))
    done
    if relaying && lives "$n" "$c"; then # a background child of it may hold them: 0.2 s
        waited=0
        while relaying && lives "$n" "$c" && [ "$waited" -lt 20 ]; do
            nap 0.01
            waited=$((waited + 1))
        done
    fi
    if relaying && lives "$n" "$c"; then # cut: drain what comes later, then stop the relay
        for relay in "$ro:$o" "$re:$e"; do
            if kill -0 "${relay%%:*}"; then
                cat <"${relay#*:}" >/dev/null &
                kill "${relay%%:*}"
            fi
        done
    fi
    wait "$ro" "$re"
    printf '\0\036%s\n' "$token" >&4
    printf '\0\036%s %s\n' "$token" "$st"
    : >"$d/z$n"
}

# Start the slot's relays and command process (blocked until told to go); false if any failed.
made() {
    mkfifo -m 600 -- "$o" "$e" || { rm -f -- "$o" "$e" && mkfifo -m 600 -- "$o" "$e"; } || return 1
    cat <"$o" &
    ro=$!
    cat <"$e" >&4 &
    re=$!
    exec 6<> <(:) || return 1 # its go: a pipe with no name (see the_command)
    the_command </dev/null >"$o" 2>"$e" &
    c=$!
}

# Whether the slot is still whole: its three processes and its FIFOs.
working() {
    [ -n "$c" ] && kill -0 "$c" && kill -0 "$ro" && kill -0 "$re" && [ -p "$o" ] && [ -p "$e" ]
}

# End what the slot made (never a command: none was told to go), so it can be made again.
abandon() {
    exec 6>&-
    for p in $c $ro $re; do kill -KILL "$p"; done
    [ -z "$c$ro$re" ] || wait $c $ro $re
    ro= re= c=
}

# The files of the slot and of command $n (in the background: the next slot is made meanwhile).
forsake() { rm -f -- "$o" "$e" "$d/i$n" "$d/q$n" "$d/w$n" & }

# Remove the pid and end marks commands before $1 left (once in 64 commands): only the
# running command's are ever read again. The one just before $1 may still be writing its end
# mark: it goes with the next 64.
forget_before() {
    local upto=$(($1 - 1)) k=$(($1 - 65))
    set --
    while [ "$k" -lt "$upto" ]; do
        set -- "$@" "$d/p$k" "$d/z$k"
        k=$((k + 1))
    done
    rm -f -- "$@" &
}

# Signal every process of command $1 the kernel still ties to it: its group, its env marker,
# its process's descendants, whatever holds its output FIFOs for writing or its stdin file,
# and what an earlier sweep of it found so (by pid and start time: never a recycled pid).
# One that clears its env, leaves the group, closes or redirects all of these descriptors
# and whose parent had already ended when it was looked for is a daemon: none of these find it.
sweep() {
    left=0 pg= slot=
    { IFS= read -r pg && IFS= read -r slot; } <"$d/p$1"
    found=()
    [ -z "$slot" ] || tied "$1" "$pg" "$slot" # first: before its parent is signalled
    if [ -n "$pg" ]; then kill "-$2" -- "-$pg" && left=1; fi
    for f in $(grep -l -s -a -F -- "CREATEOS_SYNC_RUN=$sid.$1." /proc/[0-9]*/environ); do
        p=${f#/proc/}
        p=${p%/environ}
        [ "$p" = "$$" ] || { kill "-$2" "$p" && left=$((left + 1)); }
    done
    for p in "${!found[@]}"; do
        kill "-$2" "$p" && left=$((left + 1))
    done
}

# Which processes of command $1 (its process: $2, its slot: $3) live: into found, and into
# known (pid: start time).
tied() {
    local -A parent=() start=()
    local n=$1 c=$2 o=$d/o$3 e=$d/e$3 i=$d/i$1 f p line rest k v
    found=()
    for f in /proc/[0-9]*/stat; do
        IFS= read -r line <"$f" || continue
        p=${f#/proc/}
        p=${p%/stat}
        rest=${line##*) }
        set -f
        # shellcheck disable=SC2086 # the fields after the name: state, parent, ..., start
        set -- $rest
        set +f
        [ "$1" != Z ] || continue
        parent[$p]=$2 start[$p]=${20}
        [ "${known[$p]}" != "${20}" ] || found[$p]=
    done
    for p in "${!parent[@]}"; do # descendants of the command's process
        k=$p v=0
        while [ "$v" -lt 64 ] && [ "${parent[$k]:-0}" -gt 1 ]; do
            k=${parent[$k]}
            if [ "$k" = "$c" ]; then found[$p]= && break; fi
            v=$((v + 1))
        done
    done
    if [ ! -e "$d/z$n" ]; then # its FIFOs are its own until its end records (then removed)
        writers "$o" "$e"
        [ ! -e "$i" ] || for f in /proc/[0-9]*/fd/[0-9]*; do # and its stdin file's readers
            [ "$f" -ef "$i" ] || continue
            p=${f#/proc/}
            found[${p%%/*}]=
        done
    fi
    unset "found[$$]" "found[$BASHPID]"
    for p in "${!found[@]}"; do
        [ -z "${start[$p]}" ] || known[$p]=${start[$p]}
    done
}

# End command $2's processes; report how many are left (0: none, confirmed).
end_command() {
    token=$1 n=$2 grace=$3
    known=()
    sweep "$n" TERM
    tries=0
    while [ "$left" -gt 0 ] && [ "$tries" -lt "$grace" ]; do
        nap 0.05
        sweep "$n" 0
        tries=$((tries + 1))
    done
    tries=0
    while { [ "$left" -gt 0 ] || [ ! -e "$d/z$n" ]; } && [ "$tries" -lt 40 ]; do
        sweep "$n" KILL
        nap 0.05
        tries=$((tries + 1))
    done
    sweep "$n" 0
    printf '\0\036%s k %s\n' "$token" "$left"
}

field() { # $1 into $v; false for "-"
    case $1 in
    :*) printf -v v '%b' "${1#:}" ;;
    *) return 1 ;;
    esac
}

# A watcher killed by its command (`kill $PPID`) wrote no end records: say so instead.
check_watcher() {
    if [ -n "$cur_w" ] && ! kill -0 "$cur_w" && [ ! -e "$d/z$cur_n" ]; then
        printf '\0\036%s\n' "$cur_t" >&4
        printf '\0\036%s L\n' "$cur_t"
        cur_w=
    fi
}

# Start the watcher (see above): its pid in w_pid, the pipe to it in w_fd.
start_watcher() {
    [ -z "$w_fd" ] || exec {w_fd}>&-
    w_fd= w_pid=
    [ -d "$d" ] || mkdir -m 700 -- "$d" # unless a command removed it
    # A pipe of its own, nameless: read-write here, its other end the process substitution's
    # (which ends at once). The watcher reopens it read-only: then EOF when this end closes.
    exec {w_fd}<> <(:) || { w_fd= && return 1; }
    watcher <&"$w_fd" &
    w_pid=$!
}

# Hand request R (token $1, N $2, fields $3 $4 $5: cwd, stdin, script) to the watcher;
# false if it is gone.
dispatch() {
    [ -n "$w_pid" ] && kill -0 "$w_pid" || return 1
    [ -d "$d" ] || mkdir -m 700 -- "$d"
    case $4 in :*) printf '%b' "${4#:}" >"$d/i$2" ;; esac &&
        printf '%s %s %s\n' "${4:0:1}" "$3" "$5" >"$d/q$2" &&
        printf '%s %s\n' "$1" "$2" >&"$w_fd" || return 1
    cur_w=$w_pid cur_n=$2 cur_t=$1
}

declare -A known found # what a sweep found (see tied)
buf= cur_w= cur_n= cur_t= w_pid= w_fd=
start_watcher
while :; do
    if [ -n "$cur_w" ] && [ -e "$d/z$cur_n" ]; then cur_w=; fi # its records are written
    if [ -n "$cur_w" ]; then # a command runs: look after its watcher once a second
        IFS= read -r -t 1 part
    else # idle: no wake-up at all
        IFS= read -r part
    fi
    rc=$?
    buf=$buf$part
    if [ "$rc" -gt 128 ]; then # no request for 1 s (a partial line is kept in buf)
        check_watcher
        continue
    fi
    [ "$rc" -eq 0 ] || exit 0 # stdin closed: the lease is done with this session
    IFS=' '
    set -f
    # shellcheck disable=SC2086 # split on spaces only, no glob
    set -- $buf
    set +f
    unset IFS
    buf= kind=$1 token=$2 n=$3 a=$4 b=$5 c=$6
    case $kind in
    R)
        printf '\0\036%s a\n' "$token" # accepted: whatever ends this session now, it ran
        if ! dispatch "$token" "$n" "$a" "$b" "$c"; then # no watcher (a command killed it)
            start_watcher
            if ! dispatch "$token" "$n" "$a" "$b" "$c"; then
                printf '\0\036%s\n' "$token" >&4
                printf '\0\036%s x 126\n' "$token"
            fi
        fi
        ;;
    K)
        if [ "$n" = "$cur_n" ]; then
            end_command "$token" "$n" "$a"
        else # its request never came (requests arrive in order): nothing of it ran
            printf '\0\036%s k 0 never\n' "$token"
        fi
        ;;
    esac
done
