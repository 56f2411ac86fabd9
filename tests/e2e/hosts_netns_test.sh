#!/usr/bin/env bash
# Several hosts, for real (issue 17): three network namespaces joined by a bridge (in a fourth
# namespace, so the machine's own network is untouched) act as three hosts. redis-server runs
# on host 0; one rank per host trains over Gloo with the Redis store, each listening on its
# host's address. Part 1: the job completes and its trained model is the one the same job
# makes on one host (--nproc 3). Part 2: host 2's link is cut mid-training (ip link set down);
# ranks 0 and 1 exit non-zero within --timeout + 10 s, naming rank 2.
# Exits 77 (CTest: skipped) where namespaces cannot be made (no root, no CAP_SYS_ADMIN).
# Usage: hosts_netns_test.sh TOOL SOURCE_DIR
set -uo pipefail
tool="$1"
src="$2"
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -5 "$f"; done; exit 1; }

[[ $(id -u) == 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no ip (iproute2)"
redis=$(command -v redis-server || echo /usr/bin/redis-server)
[[ -x "$redis" ]] || skip "no redis-server"

tag="o$$"  # interface names stay under 15 characters
work=$(mktemp -d /tmp/omt-netns-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  for n in h0 h1 h2 sw; do ip netns del "${tag}$n" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "${tag}sw" 2>/dev/null || skip "cannot create network namespaces here"
ip -n "${tag}sw" link add br0 type bridge && ip -n "${tag}sw" link set br0 up || skip "no bridge"
for h in 0 1 2; do
  ns="${tag}h$h"
  ip netns add "$ns" || fail "ip netns add $ns"
  ip link add "v${tag}h$h" type veth peer name "p${tag}h$h" || skip "no veth"
  ip link set "v${tag}h$h" netns "$ns"
  ip link set "p${tag}h$h" netns "${tag}sw"
  ip -n "${tag}sw" link set "p${tag}h$h" master br0 up
  ip -n "$ns" addr add "10.213.0.$((h + 1))/24" dev "v${tag}h$h"
  ip -n "$ns" link set "v${tag}h$h" up
  ip -n "$ns" link set lo up
done

ip netns exec "${tag}h0" "$redis" --bind 10.213.0.1 --port 6379 --save '' --appendonly no \
  --protected-mode no > "$work/redis.log" 2>&1 &
pids+=($!)
for i in $(seq 100); do
  ip netns exec "${tag}h1" bash -c "echo > /dev/tcp/10.213.0.1/6379" 2>/dev/null && break
  sleep 0.1
done
# Namespaces that cannot reach each other (a bridge filtered by the host's firewall) are this
# machine's limit, not the job's.
ip netns exec "${tag}h1" bash -c "echo > /dev/tcp/10.213.0.1/6379" 2>/dev/null \
  || skip "host 1 cannot reach redis on host 0 through the bridge here"

model="$src/models/mlp.onnx"
common=(train "$model" --data fashion-mnist --global-batch 96 --seed 3)
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

# rank R on host R (its own host name too, omt-hostR); extra arguments after the run id
start_rank() {
  local r=$1 run=$2
  shift 2
  ip netns exec "${tag}h$r" unshare --uts sh -c 'hostname "$0" && exec "$@"' "omt-host$r" \
    env OMT_RANK="$r" OMT_WORLD_SIZE=3 OMT_STORE=redis://10.213.0.1:6379 \
    OMT_RUN_ID="$run" OMT_BIND_ADDRESS="10.213.0.$((r + 1))" OMT_RUN_SECRET="$secret" \
    "$tool" "${common[@]}" "$@" > "$work/$run.rank$r.log" 2>&1 &
  rank_pids[$r]=$!
  pids+=($!)
}

# ---- Part 1: the job completes across three hosts, with the one-host result
declare -a rank_pids
for r in 0 1 2; do start_rank "$r" part1 --steps 40 --timeout 30 --output "$work/hosts.onnx"; done
for r in 0 1 2; do
  wait "${rank_pids[$r]}" || fail "part 1: rank $r exited $?"
done
"$tool" "${common[@]}" --steps 40 --nproc 3 --output "$work/local.onnx" > "$work/local.log" 2>&1 \
  || fail "the one-host run failed"
cmp -s "$work/hosts.onnx" "$work/local.onnx" || fail "three hosts trained another model than one host"
echo "part 1: 40 steps on three hosts over redis://10.213.0.1:6379, model identical to --nproc 3 on one host"

# ---- Part 2: host 2's link goes down mid-training; the survivors name rank 2 in time
timeout_s=8
for r in 0 1 2; do start_rank "$r" part2 --epochs 100 --timeout "$timeout_s"; done
for i in $(seq 600); do
  grep -q "steps" "$work/part2.rank0.log" 2>/dev/null && break
  sleep 0.05
done
grep -q "steps" "$work/part2.rank0.log" || fail "part 2 did not start training"
sleep 1
ip -n "${tag}h2" link set "v${tag}h2" down
cut=$(date +%s%N)
for r in 0 1; do
  status=0
  wait "${rank_pids[$r]}" || status=$?
  took=$(awk -v a="$cut" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  [[ $status != 0 ]] || fail "part 2: rank $r exited 0 after its peer's link was cut"
  (( status < 128 )) || fail "part 2: rank $r ended by signal $((status - 128))"
  awk -v t="$took" -v lim=$((timeout_s + 10)) 'BEGIN { exit !(t < lim) }' \
    || fail "part 2: rank $r took $took s (timeout $timeout_s s)"
  grep -q "rank 2 (pid [0-9]* on host omt-host2)" "$work/part2.rank$r.log" || fail "part 2: rank $r did not name rank 2 on omt-host2"
  echo "part 2: rank $r exited $status after $took s naming rank 2: $(grep -o 'rank 2 ([^)]*)[^.]*' "$work/part2.rank$r.log" | head -1)"
done
echo "PASS"
