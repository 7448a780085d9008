#!/usr/bin/env bash
# Run deploy/slurm-array.sbatch under a real single-node Slurm on this machine (slurmctld,
# slurmd and munge on localhost only, started here and stopped on exit): a job array of 2
# shards over the 78 ORAND-CAR-A val images, then `merge`, which must be byte-identical to an
# unsharded run. Needs root (Slurm runs as root here), Debian's slurm-wlm (.ci/run installs
# it) and ../shared/data/orand-car-a; prints "skipped: …" otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${VERISAMPLE_BIN:-$PWD/target/release/verisample}
LABELS=../shared/data/orand-car-a/labels.jsonl
[ -f "$LABELS" ] || { echo "skipped: no $LABELS"; exit 0; }
[ "$(id -u)" = 0 ] || { echo "skipped: the local Slurm runs as root"; exit 0; }
command -v slurmctld >/dev/null || { echo "skipped: no slurm-wlm (apt-get install slurm-wlm)"; exit 0; }
[ -x "$BIN" ] || cargo build --release

work=$(mktemp -d)
started=()
cleanup() {
    local status=$?
    for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
    # The daemons save their state on SIGTERM (slurmctld into $work/state): wait until they
    # are gone before removing their folder, or rm races their last writes.
    for pid in "${started[@]}"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    done
    rm -rf "$work" 2>/dev/null || { sleep 2; rm -rf "$work" || echo "note: could not remove $work"; }
    exit "$status"
}
trap cleanup EXIT
host=$(hostname)
mkdir -p "$work"/{state,spool,log}
cat > "$work/slurm.conf" <<CONF
ClusterName=verisample-test
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmctldPort=6917
SlurmdPort=6918
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf
if [ ! -S /run/munge/munge.socket.2 ]; then
    mkdir -p /run/munge
    [ -f /etc/munge/munge.key ] || mungekey --create
    munged --force --pid-file="$work/munged.pid"
    started+=("$(cat "$work/munged.pid")")
fi
slurmctld
for _ in $(seq 50); do [ -s "$work/slurmctld.pid" ] && break; sleep 0.1; done
started+=("$(cat "$work/slurmctld.pid")")
slurmd
for _ in $(seq 50); do [ -s "$work/slurmd.pid" ] && break; sleep 0.1; done
started+=("$(cat "$work/slurmd.pid")")
for _ in $(seq 100); do sinfo -h -o %T | grep -q idle && break; sleep 0.2; done

"$BIN" -q prepare --labels "$LABELS" --family OrandCar --split val --out "$work/val" >/dev/null
# The job file as written, with CPU-sized resources instead of its GPU request.
VERISAMPLE_BIN=$BIN VERISAMPLE_MODEL=$PWD/assets/model VERISAMPLE_DATA=$work/val/data \
VERISAMPLE_OUT=$work/out VERISAMPLE_DEVICE=cpu \
    sbatch --wait --array=0-1 --gpus-per-task=0 --cpus-per-task=1 \
    --output="$work/log/task-%a.log" deploy/slurm-array.sbatch
"$BIN" -q merge --out "$work/merged" "$work/out-0" "$work/out-1"
"$BIN" -q run --model assets/model --data "$work/val/data" --out "$work/whole" --device cpu
for f in $(cd "$work/whole" && find data errors.jsonl cleaning.jsonl generations.jsonl -type f | sort); do
    cmp "$work/whole/$f" "$work/merged/$f"
done
rows=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['stats']['input_rows'])" "$work/merged/run.json")
[ "$rows" = 78 ] || { echo "merged run read $rows rows, not 78" >&2; exit 1; }
echo "slurm array of 2 shards + merge == unsharded run over the 78 val images"
