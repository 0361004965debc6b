# Shared helpers for the peers' `run` scripts (sourced, not executed).
#
# Contract: `./run <workload> [--quick]` prints exactly one JSON line on
# stdout; everything else goes to stderr. If the peer program crashes or
# prints no JSON, a line with "ok":false and an "error" is printed instead,
# never a number.

PEER_WORKLOADS="counting pingpong skynet fanin rings idle pi"
# Two processes on loopback (workloads 9 and 11); a peer lists the ones it
# implements in REMOTE_WORKLOADS before calling parse_args.
ALL_REMOTE_WORKLOADS="remote-pingpong remote-pi"

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

# parse_args IMPL "$@"  -> sets WORKLOAD, QUICK (0/1), and for the remote
# workloads PAIRS (default 1) and SIZE (bytes, default 16); exits on bad usage
parse_args() {
    local impl="$1"; shift
    WORKLOAD=""
    QUICK=0
    PAIRS=1
    SIZE=16
    while [ $# -gt 0 ]; do
        local a="$1"; shift
        case "$a" in
            --quick) QUICK=1 ;;
            --pairs) PAIRS="${1:-}"; shift ;;
            --size) SIZE="${1:-}"; shift ;;
            -*) emit_fail "$impl" "${WORKLOAD:-?}" "unknown option $a"; exit 2 ;;
            *) if [ -z "$WORKLOAD" ]; then WORKLOAD="$a"; else
                   emit_fail "$impl" "$WORKLOAD" "unexpected argument $a"; exit 2; fi ;;
        esac
    done
    if [ -z "$WORKLOAD" ]; then
        emit_fail "$impl" "?" "usage: run <workload> [--quick]; workloads: $PEER_WORKLOADS"
        exit 2
    fi
    if [ "$WORKLOAD" = direct ]; then
        emit_fail "$impl" direct "not applicable: workload 7 (direct) measures a local synchronous dispatch path with no mailbox, which $impl does not have; only the Rust side runs it"
        exit 0
    fi
    case " $ALL_REMOTE_WORKLOADS " in
        *" $WORKLOAD "*)
            case " ${REMOTE_WORKLOADS:-} " in
                *" $WORKLOAD "*) ;;
                *) emit_fail "$impl" "$WORKLOAD" "not implemented by this peer yet"; exit 0 ;;
            esac
            case "$PAIRS$SIZE" in
                *[!0-9]*|"") emit_fail "$impl" "$WORKLOAD" "--pairs and --size take numbers"; exit 2 ;;
            esac
            return ;;
    esac
    case " $PEER_WORKLOADS " in
        *" $WORKLOAD "*) ;;
        *) emit_fail "$impl" "$WORKLOAD" "unknown workload; expected one of: $PEER_WORKLOADS $ALL_REMOTE_WORKLOADS"; exit 2 ;;
    esac
}

# run_peer IMPL WORKLOAD CMD...
# Runs CMD with its stdout captured; forwards non-JSON stdout and all stderr
# to stderr; prints the last JSON line (or a failure line) on stdout.
run_peer() {
    local impl="$1" workload="$2"; shift 2
    local tmp out err rc line
    tmp="$(mktemp -d)"
    out="$tmp/out"; err="$tmp/err"
    "$@" >"$out" 2> >(tee "$err" >&2)
    rc=$?
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
