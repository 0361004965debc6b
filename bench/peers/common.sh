# Shared helpers for the peers' `run` scripts (sourced, not executed).
#
# Contract: `./run <workload> [--quick] [--pairs N] [--size BYTES]` prints
# exactly one JSON line on stdout; everything else goes to stderr. If the
# peer program crashes or prints no JSON, a line with "ok":false and an
# "error" is printed instead, never a number.
#
# The remote workloads (remote-pingpong, remote-pi) run a second OS process
# on 127.0.0.1. The peer program (or the run script) writes the pid of every
# process it starts for that to the file named by $PEER_PIDFILE, one a line;
# run_peer kills those pids when the program has ended, and on exit of the
# run script, so nothing is left behind even when the program fails.

PEER_WORKLOADS="counting pingpong skynet fanin rings idle pi remote-pingpong remote-pi cluster-virtual failover"

# json_str STRING -> STRING escaped for use inside a JSON string literal
json_str() {
    printf '%s' "$1" | tr -d '\000-\010\013-\037' | tr '\n\t' '  ' \
        | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'
}

# emit_fail IMPL WORKLOAD ERROR [EXTRA_JSON_FIELDS]
emit_fail() {
    local extra=""
    [ -n "${4:-}" ] && extra=",$4"
    printf '{"workload":"%s","impl":"%s","ok":false,"elapsed_ms":null,"msgs_per_sec":null,"peak_rss_bytes":null,"bytes_per_actor":null,"error":"%s"%s}\n' \
        "$(json_str "$2")" "$1" "$(json_str "$3")" "$extra"
}

# parse_args IMPL "$@"  -> sets WORKLOAD and QUICK (0/1), and exports PAIRS
# (--pairs N, default 1) and SIZE (--size BYTES, default 16), which only the
# remote-pingpong workload uses, and MODE (--mode kill|leave, default kill),
# which only the failover workload uses; exits on bad usage
parse_args() {
    local impl="$1"; shift
    WORKLOAD=""
    QUICK=0
    PAIRS=1
    SIZE=16
    MODE=kill
    local a v
    while [ $# -gt 0 ]; do
        a="$1"; shift
        case "$a" in
            --quick) QUICK=1 ;;
            --pairs|--size)
                if [ $# -eq 0 ]; then emit_fail "$impl" "${WORKLOAD:-?}" "option $a needs a value"; exit 2; fi
                v="$1"; shift
                _set_num_opt "$impl" "$a" "$v" ;;
            --pairs=*|--size=*) _set_num_opt "$impl" "${a%%=*}" "${a#*=}" ;;
            --mode|--mode=*)
                if [ "$a" = --mode ]; then
                    if [ $# -eq 0 ]; then emit_fail "$impl" "${WORKLOAD:-?}" "option --mode needs a value"; exit 2; fi
                    v="$1"; shift
                else v="${a#*=}"; fi
                case "$v" in kill|leave) MODE="$v" ;;
                    *) emit_fail "$impl" "${WORKLOAD:-?}" "bad value for --mode: '$v' (kill or leave)"; exit 2 ;;
                esac ;;
            -*) emit_fail "$impl" "${WORKLOAD:-?}" "unknown option $a"; exit 2 ;;
            *) if [ -z "$WORKLOAD" ]; then WORKLOAD="$a"; else
                   emit_fail "$impl" "$WORKLOAD" "unexpected argument $a"; exit 2; fi ;;
        esac
    done
    export PAIRS SIZE MODE
    if [ -z "$WORKLOAD" ]; then
        emit_fail "$impl" "?" "usage: run <workload> [--quick] [--pairs N] [--size BYTES] [--mode kill|leave]; workloads: $PEER_WORKLOADS"
        exit 2
    fi
    if [ "$WORKLOAD" = direct ]; then
        emit_fail "$impl" direct "not applicable: workload 7 (direct) measures a local synchronous dispatch path with no mailbox, which $impl does not have; only the Rust side runs it"
        exit 0
    fi
    case " $PEER_WORKLOADS " in
        *" $WORKLOAD "*) ;;
        *) emit_fail "$impl" "$WORKLOAD" "unknown workload; expected one of: $PEER_WORKLOADS"; exit 2 ;;
    esac
}

# _set_num_opt IMPL OPTION VALUE -> PAIRS or SIZE; exits 2 unless VALUE is a
# positive integer (--size may be 0)
_set_num_opt() {
    local impl="$1" opt="$2" v="$3"
    if ! [[ "$v" =~ ^[0-9]+$ ]] || { [ "$opt" = --pairs ] && [ "$v" -eq 0 ]; } \
        || [ "${#v}" -gt 9 ]; then
        emit_fail "$impl" "${WORKLOAD:-?}" "bad value for $opt: '$v' (a positive integer)"
        exit 2
    fi
    case "$opt" in
        --pairs) PAIRS=$((10#$v)) ;;
        --size) SIZE=$((10#$v)) ;;
    esac
}

# is_remote WORKLOAD -> true for the remote workloads (remote-pingpong, remote-pi)
is_remote() { case "$1" in remote-*) return 0 ;; *) return 1 ;; esac; }

# is_cluster WORKLOAD -> true for the cluster workloads (cluster-virtual, failover)
is_cluster() { case "$1" in cluster-virtual|failover) return 0 ;; *) return 1 ;; esac; }

# kill_children: kills every pid listed in $PEER_PIDFILE (see the top)
kill_children() {
    local p
    [ -n "${PEER_PIDFILE:-}" ] && [ -f "$PEER_PIDFILE" ] || return 0
    while read -r p; do
        [[ "$p" =~ ^[0-9]+$ ]] && kill -KILL "$p" 2>/dev/null
    done < "$PEER_PIDFILE"
    : > "$PEER_PIDFILE"
}

# _on_signal NAME STATUS: run_peer's handler for INT/TERM: ends the program,
# prints a failure line, exits (the EXIT trap cleans up the rest)
_on_signal() {
    if [ -n "${PEER_MAIN_PID:-}" ]; then
        kill -TERM "$PEER_MAIN_PID" 2>/dev/null
        # (the BEAM may take its time over SIGTERM: 2 s, then SIGKILL)
        local i
        for i in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 "$PEER_MAIN_PID" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$PEER_MAIN_PID" 2>/dev/null
        emit_fail "$PEER_IMPL" "$PEER_WORKLOAD" "interrupted by SIG$1 before the program printed a result"
    fi
    exit "$2"
}

# run_peer IMPL WORKLOAD CMD...
# (PEER_EXTRA_CLEANUP, if set, is a shell command run when the run script
# exits, e.g. to stop a helper process the run script itself started.)
# Runs CMD with its stdout captured; forwards non-JSON stdout and all stderr
# to stderr; prints the last JSON line (or a failure line) on stdout.
run_peer() {
    local impl="$1" workload="$2"; shift 2
    local tmp out err rc line
    tmp="$(mktemp -d)"
    out="$tmp/out"; err="$tmp/err"
    export PEER_PIDFILE="$tmp/children"
    : > "$PEER_PIDFILE"
    trap 'kill_children; [ -n "${PEER_EXTRA_CLEANUP:-}" ] && eval "$PEER_EXTRA_CLEANUP"; rm -rf "'"$tmp"'"' EXIT
    # The program runs in the background and is waited for, so that a signal
    # to this script is handled at once: it ends the program, then the EXIT
    # trap ends the second process of a remote workload.
    PEER_MAIN_PID=""
    PEER_IMPL="$impl" PEER_WORKLOAD="$workload"
    trap '_on_signal INT 130' INT
    trap '_on_signal TERM 143' TERM
    "$@" <&0 >"$out" 2> >(tee "$err" >&2) &
    PEER_MAIN_PID=$!
    wait "$PEER_MAIN_PID"
    rc=$?
    PEER_MAIN_PID=""
    kill_children
    wait 2>/dev/null
    line="$(grep -E '^\{.*\}[[:space:]]*$' "$out" | tail -n 1)"
    grep -vE '^\{.*\}[[:space:]]*$' "$out" >&2
    if [ -n "$line" ]; then
        printf '%s\n' "$line"
    else
        local last
        last="$(grep -v '^[[:space:]]*$' "$err" | tail -n 3 | tr '\n' ' ')"
        emit_fail "$impl" "$workload" "peer program exited with status $rc without a result: $last"
    fi
    rm -rf "$tmp"
    [ -n "$line" ] || return 1
    return 0
}
