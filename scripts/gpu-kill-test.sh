#!/usr/bin/env bash
# A peer killed at a random point of `m2n run --backend nccl` (issue 26):
# two processes of one run over two GPUs; rank 1 is killed with SIGKILL
# after a random delay (during set-up, the timed loop or a verification);
# the survivor, rank 0, must exit non-zero within --timeout + 10 s, naming
# rank 1 on its last line. N kills (default 20), one line each, then a
# summary. Run from the folder holding bin/ (make gpu-test builds it).
# TRANSPORT (default nccl) and ROUTE (default: every route) pick the run: with
# TRANSPORT=copy ROUTE=agbcast the processes push copies over CUDA IPC and
# the survivor waits on a flag its dead peer will never set.
set -u
N=${N:-20}
TIMEOUT=${TIMEOUT:-10}
PORT=${PORT:-29800}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
tmp=$(mktemp -d)
pass=0
for k in $(seq 1 "$N"); do
	delay=$(python3 -c "import random; print(round(random.uniform(0.5, 12), 2))")
	run="bin/m2n run --backend nccl --transport ${TRANSPORT:-nccl} ${ROUTE:+--route $ROUTE} --timeout ${TIMEOUT}s --iters 1000000 --warmup 1 paper-2gpu"
	env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 NCCL_COMM_ID=127.0.0.1:$PORT $run > "$tmp/0.out" 2> "$tmp/0.err" &
	p0=$!
	env RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 NCCL_COMM_ID=127.0.0.1:$PORT $run > "$tmp/1.out" 2> "$tmp/1.err" &
	p1=$!
	sleep "$delay"
	t0=$(date +%s.%N)
	kill -9 $p1
	( sleep $((TIMEOUT + 40)); kill -9 $p0 2> /dev/null ) &
	guard=$!
	wait $p0
	rc=$?
	t1=$(date +%s.%N)
	kill $guard 2> /dev/null
	wait $p1 2> /dev/null
	dt=$(python3 -c "print(round($t1 - $t0, 1))")
	last=$(grep -v '^W\|NCCL WARN\|^\s*$' "$tmp/0.err" | tail -1)
	ok=no
	if [ $rc -ne 0 ] && python3 -c "import sys; sys.exit(0 if $dt <= $TIMEOUT + 10 else 1)" && echo "$last" | grep -q "rank 1"; then
		ok=yes
		pass=$((pass + 1))
	fi
	echo "kill $k after ${delay}s: the survivor exited $rc ${dt}s later, ok=$ok: $last"
	PORT=$((PORT + 1))
done
rm -rf "$tmp"
echo "kill test: $pass of $N survivors exited non-zero within ${TIMEOUT} s + 10 s, naming rank 1"
