# shellcheck shell=bash
# Who is using a service that a testbed script started (sourced by ovs-start/stop, dockerd-start/stop).
#
# Every caller of a *-start script registers itself as a holder: the shell that ran the script, named by
# its PID and start time (so a reused PID is not mistaken for it). The *-stop script stops the service only
# when the last live holder leaves, so one `make` invocation never stops a daemon another one still uses;
# the started-by-us marker decides, as before, whether the service is ours to stop at all.
HOLDERS_ROOT=${TESTBED_RUN_DIR:-/run/testbed}/holders

_start_time() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $20}'; }

# hold SERVICE: register the calling shell ($PPID of the script) as a holder of SERVICE.
hold() {
    mkdir -p "$HOLDERS_ROOT/$1"
    : > "$HOLDERS_ROOT/$1/$PPID-$(_start_time "$PPID")"
}

# release SERVICE: unregister the calling shell; prints how many other live holders remain.
release() {
    local dir="$HOLDERS_ROOT/$1" entry pid live=0
    rm -f "$dir/$PPID-$(_start_time "$PPID")"
    for entry in "$dir"/*; do
        [ -e "$entry" ] || continue
        pid=${entry##*/}; pid=${pid%%-*}
        if [ "${entry##*/}" = "$pid-$(_start_time "$pid")" ]; then
            live=$((live + 1))
        else
            rm -f "$entry"                  # its shell is gone (or the PID was reused): not a holder
        fi
    done
    echo "$live"
}
