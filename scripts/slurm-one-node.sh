#!/usr/bin/env bash
# A one-machine Slurm cluster with accounting, entirely under one folder, for tests:
#   scripts/slurm-one-node.sh start BASE   # writes BASE/etc/slurm.conf, starts the daemons
#   scripts/slurm-one-node.sh stop BASE    # stops what start started, by pid, newest first
# Clients reach it with SLURM_CONF=BASE/etc/slurm.conf. Daemons we start leave their pid in
# BASE/run/*.pid; nothing else is ever stopped. A munged already serving /run/munge (one per
# machine) is used as it is.
# Knobs (environment): CLUSTER (ettci), PROLOG / EPILOG (PrologSlurmctld / EpilogSlurmctld
# programs), CPUS (8: the node may declare more than the machine has), and the ports
# CTLD_PORT, SLURMD_PORT, DBD_PORT, DB_PORT (6917, 6918, 6919, 3317).
set -euo pipefail
cmd=${1:?usage: $0 start|stop BASE}
BASE=$(realpath -m "${2:?usage: $0 start|stop BASE}")
RUN=$BASE/run LOG=$BASE/log ETC=$BASE/etc
export SLURM_CONF=$ETC/slurm.conf
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
waitfor() { # waitfor SECONDS WHAT COMMAND...
  local n=$1 what=$2; shift 2
  for ((i = 0; i < n * 4; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  echo "slurm-one-node: timed out waiting for $what (logs in $LOG)" >&2; return 1
}

if [ "$cmd" = stop ]; then
  # TERM every daemon we started at once (newest first), then wait for each, KILL after 20 s.
  pids=()
  for d in slurmd slurmctld slurmdbd mariadb munged; do
    f=$RUN/$d.pid
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; pids+=("$pid"); fi
    rm -f "$f"
  done
  for pid in "${pids[@]}"; do
    for ((i = 0; i < 80; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  done
  exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop BASE" >&2; exit 2; }

CLUSTER=${CLUSTER:-ettci}
HOST=$(hostname -s)
CTLD_PORT=${CTLD_PORT:-6917} SLURMD_PORT=${SLURMD_PORT:-6918}
DBD_PORT=${DBD_PORT:-6919} DB_PORT=${DB_PORT:-3317}
mkdir -p "$RUN" "$LOG" "$ETC" "$BASE/state" "$BASE/spool" "$BASE/mysql"
cat > "$ETC/slurm.conf" <<CONF
ClusterName=$CLUSTER
SlurmctldHost=$HOST
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
JobRequeue=1
${PROLOG:+PrologSlurmctld=$PROLOG}
${EPILOG:+EpilogSlurmctld=$EPILOG}
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
# Test timing: a requeued job may run again after 10 s instead of 121 s, and the
# scheduler looks every 5 s.
AuthInfo=cred_expire=10
SchedulerParameters=sched_interval=5,bf_interval=5
OverTimeLimit=0
KillWait=5
MinJobAge=300
InactiveLimit=0
NodeName=$HOST CPUs=${CPUS:-8} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$ETC/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
chmod 600 "$ETC/slurmdbd.conf"

# munge: one per machine, on /run/munge.
if ! alive "$RUN/munged.pid" && ! { [ -S /run/munge/munge.socket.2 ] && munge -n </dev/null | unmunge >/dev/null 2>&1; }; then
  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged --force
  waitfor 10 munged test -s /run/munge/munged.pid
  cp /run/munge/munged.pid "$RUN/munged.pid"
  waitfor 10 "the munge socket" bash -c 'munge -n </dev/null | unmunge'
fi

# A private MariaDB for slurmdbd.
SOCK=$BASE/mysql/mysqld.sock
MYSQL=(mariadb --no-defaults -S "$SOCK" -uroot)
if ! alive "$RUN/mariadb.pid"; then
  [ -d "$BASE/mysql/data/mysql" ] || mariadb-install-db --no-defaults --user=root \
    --datadir="$BASE/mysql/data" --auth-root-authentication-method=socket --skip-test-db \
    > "$LOG/mariadb-install.log" 2>&1
  setsid /usr/sbin/mariadbd --no-defaults --user=root --datadir="$BASE/mysql/data" \
    --socket="$SOCK" --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
    --pid-file="$BASE/mysql/mariadbd.pid" --log-error="$LOG/mariadb.err" \
    --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 </dev/null >/dev/null 2>&1 &
  echo $! > "$RUN/mariadb.pid"
  waitfor 60 mariadb "${MYSQL[@]}" -e 'select 1'
fi
"${MYSQL[@]}" -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"

if ! alive "$RUN/slurmdbd.pid"; then
  rm -f "$RUN/slurmdbd.pid"
  slurmdbd
  waitfor 60 slurmdbd sacctmgr -n list cluster
fi
sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null

if alive "$RUN/slurmctld.pid"; then
  scontrol reconfigure || true
else
  rm -f "$RUN/slurmctld.pid"
  slurmctld
  waitfor 30 slurmctld scontrol ping
fi
if ! alive "$RUN/slurmd.pid"; then
  rm -f "$RUN/slurmd.pid"
  slurmd
  waitfor 10 slurmd test -s "$RUN/slurmd.pid"
fi
state=$(sinfo -h -n "$HOST" -o %T 2>/dev/null || true)
case "$state" in down*|drain*|fail*) scontrol update nodename="$HOST" state=resume || true ;; esac
waitfor 60 "the node to be idle" bash -c "sinfo -h -n $HOST -o %T | grep -qx idle"
echo "slurm-one-node: cluster $CLUSTER up (SLURM_CONF=$SLURM_CONF)"
