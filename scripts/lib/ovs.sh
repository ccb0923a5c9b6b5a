# shellcheck shell=bash disable=SC2034   # sourced; the names are read by the scripts that source it
# What scripts/ovs-start and scripts/ovs-stop share (sourced): where things are, the lock both take, and
# which ovs-vswitchd is running.
#
# The started-by-us marker holds "DATAPATH PID STARTTIME" of the ovs-vswitchd that ovs-start started: a
# daemon is ours to stop only while that very process (same PID and kernel start time) is the one running,
# so a daemon the user (or anything else) started later, after ours went away, is never stopped.
# Both scripts hold an exclusive lock from start to end, so one invocation's stop cannot slip between
# another's "already running" and its use of the daemon.
. "$(dirname "$0")/lib/holders.sh"
RUN=${TESTBED_RUN_DIR:-/run/testbed}
OVS_CTL=${TESTBED_OVS_CTL:-/usr/share/openvswitch/scripts/ovs-ctl}
VSWITCHD_PID=${OVS_RUNDIR:-/var/run/openvswitch}/ovs-vswitchd.pid
MARK=$RUN/ovs-started
WMEM_ORIG=$RUN/wmem_default.orig

# ovs_lock: hold $RUN/ovs.lock until the script exits.
ovs_lock() {
    mkdir -p "$RUN"
    exec 9>"$RUN/ovs.lock"
    flock 9
}

# ovs_ctl ARGS: ovs-ctl without the lock's descriptor, which the daemons it starts would otherwise keep
# (and with it the lock, for as long as they run).
ovs_ctl() {
    "$OVS_CTL" "$@" 9>&-
}

# vswitchd_identity: "PID STARTTIME" of the running ovs-vswitchd, or nothing.
vswitchd_identity() {
    local pid
    pid=$(cat "$VSWITCHD_PID" 2>/dev/null) || return 0
    [ -n "$pid" ] && [ -e "/proc/$pid" ] && echo "$pid $(_start_time "$pid")"
    return 0
}

# marked_ours: true if the marker names the ovs-vswitchd running now.
marked_ours() {
    local _datapath pid start
    [ -f "$MARK" ] || return 1
    read -r _datapath pid start < "$MARK" || true
    [ -n "${pid:-}" ] && [ "$pid ${start:-}" = "$(vswitchd_identity)" ]
}
