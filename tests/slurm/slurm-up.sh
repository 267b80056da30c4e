#!/usr/bin/env bash
# tests/slurm/slurm-up.sh KIT - starts a throwaway single-node Slurm cluster
# whose every file lives under the folder KIT (created; must not hold a
# running kit), and prints one line for the caller to eval:
#
#   export SLURM_CONF=KIT/etc/slurm.conf
#
# What it runs (as root, without systemd): munged with its own socket and
# key, slurmctld and slurmd in the foreground as background processes,
# their PIDs recorded in KIT/run/*.pid for tests/slurm/slurm-down.sh. Two
# partitions share the one node: `ondemand` (the default, never preempted)
# and `spot` (preemptible by ondemand: PreemptMode=REQUEUE, GraceTime=20).
# Two fake GPUs are character devices under KIT/dev. Nothing is written to
# /etc; the ports are chosen per kit (a hash of KIT's path, then the next
# free pair), so two kits, or a system Slurm, run side by side.
#
# Every wait has a deadline. On a failure it prints what failed and the
# daemon's last log lines to stderr, stops what it started, and exits 1.
# Environment: SLURM_KIT_MEM_MB (the node's memory, default 4000),
# SLURM_KIT_GRACE_S (spot's GraceTime, default 20).
# docs/slurm.md explains the settings; the reference is
# ../shared/reference/SLURM-POSTGRES.md §4.
set -euo pipefail

if [[ $# -ne 1 || -z $1 ]]; then
    echo "usage: $0 KIT" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
KIT=$(realpath -m "$1")
if [[ $EUID -ne 0 ]]; then
    echo "slurm-up: must run as root (slurmd runs jobs as their users)" >&2
    exit 1
fi
for b in munged slurmctld slurmd scontrol sinfo; do
    command -v "$b" >/dev/null || {
        echo "slurm-up: $b not found; run scripts/deps.sh test" >&2
        exit 1
    }
done
if [[ -e $KIT/run/slurmctld.pid ]]; then
    echo "slurm-up: $KIT already holds a kit; run slurm-down.sh $KIT first" >&2
    exit 1
fi

fail() {
    local what=$1 log=${2:-}
    echo "slurm-up: $what" >&2
    if [[ -n $log && -f $log ]]; then
        echo "--- last lines of $log:" >&2
        tail -n 15 "$log" >&2
    fi
    "$here/slurm-down.sh" --keep "$KIT" >/dev/null 2>&1 || true
    exit 1
}

# wait_for SECONDS DESCRIPTION LOG COMMAND...: runs COMMAND every 0.1 s until
# it succeeds; past the deadline, fails with LOG's last lines.
wait_for() {
    local secs=$1 what=$2 log=$3
    shift 3
    local end=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= end)); then
            fail "$what did not happen within ${secs} s" "$log"
        fi
        sleep 0.1
    done
}

# A port is taken when any TCP socket uses it (listening or connected: ss
# lists it) or another kit being set up has reserved it in /tmp. Ports come
# from below the kernel's ephemeral range, so that no outgoing connection
# of another program takes one between the check and slurmctld's bind.
port_free() {
    ! ss -Htan "sport = :$1" 2>/dev/null | grep -q . &&
        ! ss -Htan "sport = :$2" 2>/dev/null | grep -q .
}
pick_ports() {
    local lo=20000 hi eph
    eph=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    hi=$((eph > lo + 2000 ? eph : 60000))
    local pairs=$(((hi - lo) / 2 - 1))
    local h
    h=$(printf '%s' "$KIT" | cksum | cut -d' ' -f1)
    local i
    for ((i = 0; i < 200; i++)); do
        local p=$((lo + ((h + i) % pairs) * 2))
        if port_free "$p" $((p + 1)) &&
            mkdir "/tmp/alallo-slurm-port-$p" 2>/dev/null; then
            echo "$KIT" >"/tmp/alallo-slurm-port-$p/kit"
            echo "$p"
            return 0
        fi
    done
    return 1
}

mkdir -p "$KIT"/{etc,state,spool,log,run,dev,munge,munge-key,jobs}
chmod 755 "$KIT"
chown munge:munge "$KIT/munge" "$KIT/munge-key"
chmod 755 "$KIT/munge"
chmod 700 "$KIT/munge-key"
chmod 1777 "$KIT/jobs"
dd if=/dev/urandom of="$KIT/munge-key/munge.key" bs=1024 count=1 status=none
chown munge:munge "$KIT/munge-key/munge.key"
chmod 400 "$KIT/munge-key/munge.key"
[[ -e $KIT/dev/gpu0 ]] || mknod "$KIT/dev/gpu0" c 1 3
[[ -e $KIT/dev/gpu1 ]] || mknod "$KIT/dev/gpu1" c 1 5

# munged runs as munge and slurmd's jobs as their users: every folder
# above KIT must let others pass (a mktemp -d folder is 0700).
if ! runuser -u munge -- test -x "$KIT/munge"; then
    echo "slurm-up: the munge user cannot reach $KIT/munge: a folder above $KIT is not" \
        "searchable by others (chmod o+x it, or choose another KIT)" >&2
    exit 1
fi

port=$(pick_ports) || fail "no free pair of ports below the ephemeral range"
echo "$port" >"$KIT/run/ports"
node=$(hostname -s)
cpus=$(nproc)
mem=${SLURM_KIT_MEM_MB:-4000}
grace=${SLURM_KIT_GRACE_S:-20}
cluster="alallo-$(printf '%s' "$KIT" | cksum | cut -d' ' -f1)"

cat >"$KIT/etc/slurm.conf" <<EOF
# A throwaway single-node cluster written by tests/slurm/slurm-up.sh.
ClusterName=${cluster:0:30}
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$KIT/munge/munge.socket
StateSaveLocation=$KIT/state
SlurmdSpoolDir=$KIT/spool
SlurmctldPidFile=$KIT/run/slurmctld.daemon.pid
SlurmdPidFile=$KIT/run/slurmd.daemon.pid
SlurmctldLogFile=$KIT/log/slurmctld.log
SlurmdLogFile=$KIT/log/slurmd.log
SlurmctldPort=$port
SlurmdPort=$((port + 1))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=5,sched_interval=10
JobCompType=jobcomp/filetxt
JobCompLoc=$KIT/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
MinJobAge=600
MaxJobCount=20000
KillWait=10
JobRequeue=0
GresTypes=gpu
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:2 State=UNKNOWN
PartitionName=ondemand Nodes=$node Default=YES MaxTime=12:00:00 PriorityTier=2 PreemptMode=OFF State=UP
PartitionName=spot Nodes=$node MaxTime=12:00:00 PriorityTier=1 PreemptMode=REQUEUE GraceTime=$grace State=UP
EOF
cat >"$KIT/etc/gres.conf" <<EOF
NodeName=$node Name=gpu File=$KIT/dev/gpu[0-1]
EOF
# An empty plugstack, so that the system's /etc/slurm/plugstack.conf (if
# any) does not load plugins into the kit's jobs.
: >"$KIT/etc/plugstack.conf"
echo "PlugStackConfig=$KIT/etc/plugstack.conf" >>"$KIT/etc/slurm.conf"
export SLURM_CONF=$KIT/etc/slurm.conf

# setsid: each daemon in its own session, so that a caller's Ctrl-C or a
# test runner's process-group kill does not reach them before slurm-down.
setsid runuser -u munge -- munged --foreground --force \
    --socket="$KIT/munge/munge.socket" \
    --key-file="$KIT/munge-key/munge.key" --pid-file="$KIT/munge/munged.pid" \
    --log-file="$KIT/munge/munged.log" --seed-file="$KIT/munge/munged.seed" \
    </dev/null >"$KIT/log/munged.out" 2>&1 &
echo $! >"$KIT/run/munged.pid"
wait_for 10 "munged's socket" "$KIT/munge/munged.log" test -S "$KIT/munge/munge.socket"
wait_for 10 "a munge credential" "$KIT/munge/munged.log" \
    bash -c "munge -S '$KIT/munge/munge.socket' -n | unmunge -S '$KIT/munge/munge.socket'"

setsid slurmctld -D -i </dev/null >"$KIT/log/slurmctld.out" 2>&1 &
echo $! >"$KIT/run/slurmctld.pid"
wait_for 30 "slurmctld answering (scontrol ping)" "$KIT/log/slurmctld.log" \
    bash -c "scontrol ping | grep -q UP"

setsid slurmd -D -N "$node" </dev/null >"$KIT/log/slurmd.out" 2>&1 &
echo $! >"$KIT/run/slurmd.pid"
wait_for 30 "the node idle (sinfo)" "$KIT/log/slurmd.log" \
    bash -c "sinfo -h -o %t | grep -qx idle"

echo "export SLURM_CONF=$KIT/etc/slurm.conf"
