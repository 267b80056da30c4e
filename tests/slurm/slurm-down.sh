#!/usr/bin/env bash
# tests/slurm/slurm-down.sh [--keep] KIT - stops the cluster that
# tests/slurm/slurm-up.sh started in KIT and removes KIT (--keep: leaves
# the folder, with its logs, in place).
#
# Each daemon is stopped by the PID slurm-up recorded, never by name: in
# the order slurmd, slurmctld, munged, SIGTERM, then SIGKILL for any still
# alive after 5 s (a slurmd that cannot authenticate ignores SIGTERM). A
# PID is signalled only while /proc shows it is still that daemon, so a
# recycled PID is left alone. Safe to run twice, or on a half-started kit.
set -uo pipefail

keep=0
if [[ ${1:-} == --keep ]]; then
    keep=1
    shift
fi
if [[ $# -ne 1 || -z $1 ]]; then
    echo "usage: $0 [--keep] KIT" >&2
    exit 2
fi
KIT=$(realpath -m "$1")
[[ -d $KIT ]] || exit 0

# is_daemon PID NAME: PID is alive (a zombie is not: pitfall 4, a slow init
# reaps late) and its program is NAME (runuser for munged's wrapper).
is_daemon() {
    local comm stat
    { read -r comm <"/proc/$1/comm" && read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    [[ $comm == "$2" && ${stat:0:1} != Z ]]
}

# Jobs first, while the controller still answers, so that no job's
# processes outlive the kit: cancel them all, then wait up to 5 s for the
# node to hold none.
if [[ -f $KIT/etc/slurm.conf ]] && command -v scancel >/dev/null; then
    export SLURM_CONF=$KIT/etc/slurm.conf
    jobs=$(timeout 5 squeue -h -t PD,R,CG,S -o %A 2>/dev/null | tr '\n' ' ')
    if [[ -n ${jobs// /} ]]; then
        # shellcheck disable=SC2086
        timeout 5 scancel --quiet $jobs 2>/dev/null
        end=$((SECONDS + 5))
        while ((SECONDS < end)) &&
            [[ -n $(timeout 5 squeue -h -t R,CG -o %A 2>/dev/null) ]]; do
            sleep 0.2
        done
    fi
fi

pids=()
names=()
add() { # add PIDFILE NAME
    local pid
    [[ -f $1 ]] || return 0
    pid=$(tr -dc 0-9 <"$1")
    [[ -n $pid ]] && is_daemon "$pid" "$2" || return 0
    pids+=("$pid")
    names+=("$2")
}
add "$KIT/run/slurmd.pid" slurmd
add "$KIT/run/slurmd.daemon.pid" slurmd
add "$KIT/run/slurmctld.pid" slurmctld
add "$KIT/run/slurmctld.daemon.pid" slurmctld
add "$KIT/munge/munged.pid" munged
add "$KIT/run/munged.pid" runuser
add "$KIT/run/munged.pid" munged
# Job step daemons that slurmd left behind (it forks them; they carry the
# kit's SLURM_CONF in their environment).
for env in /proc/[0-9]*/environ; do
    pid=${env#/proc/}
    pid=${pid%/environ}
    is_daemon "$pid" slurmstepd || continue
    if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qx "SLURM_CONF=$KIT/etc/slurm.conf"; then
        pids+=("$pid")
        names+=(slurmstepd)
    fi
done

for i in "${!pids[@]}"; do
    kill -TERM "${pids[$i]}" 2>/dev/null
done
end=$((SECONDS + 5))
for i in "${!pids[@]}"; do
    while is_daemon "${pids[$i]}" "${names[$i]}" && ((SECONDS < end)); do
        sleep 0.1
    done
    if is_daemon "${pids[$i]}" "${names[$i]}"; then
        kill -KILL "${pids[$i]}" 2>/dev/null
    fi
done
# Reap what this shell can (the daemons are usually another shell's
# children; pitfall 4: a slow init may leave them <defunct> a while).
wait 2>/dev/null

if [[ -f $KIT/run/ports ]]; then
    port=$(tr -dc 0-9 <"$KIT/run/ports")
    if [[ -n $port && $(cat "/tmp/alallo-slurm-port-$port/kit" 2>/dev/null) == "$KIT" ]]; then
        rm -rf "/tmp/alallo-slurm-port-$port"
    fi
fi
rm -f "$KIT/run/slurmctld.pid" "$KIT/run/slurmd.pid" "$KIT/run/munged.pid"
if ((keep == 0)); then
    rm -rf "$KIT"
fi
exit 0
