#!/usr/bin/env bash
# The process- and timing-sensitive default tests, N rounds in a row, with one busy-looping
# process per core as background load (a stand-in for `stress -c $(nproc)`), one line per round:
#
#     bash experiments/stress_tests.sh 20        # from the repository root, after `make setup`
#
# Stops the load on exit (also on Ctrl-C). Logs: /tmp/wheeler2_stress_<round>.log.
set -u
cd "$(dirname "$0")/.."
rounds=${1:-5}
load=()
for _ in $(seq "$(nproc)"); do
  python3 -c "while True: pass" &
  load+=($!)
done
trap 'kill "${load[@]}" 2>/dev/null' EXIT
tests=(tests/test_faults.py tests/test_local.py tests/test_buffer_gate.py
       tests/test_buffer_concurrent.py tests/test_sync.py tests/test_shm_sweep.py
       tests/test_buffer_lifecycle.py tests/test_runtime.py tests/test_resume_runtime.py)
failed=0
for i in $(seq "$rounds"); do
  start=$(date +%s)
  .venv/bin/python -m pytest -q -p no:warnings "${tests[@]}" > "/tmp/wheeler2_stress_$i.log" 2>&1
  rc=$?
  [ "$rc" -ne 0 ] && failed=$((failed + 1))
  echo "round $i: exit $rc, $(( $(date +%s) - start )) s, $(tail -1 "/tmp/wheeler2_stress_$i.log")"
done
echo "$((rounds - failed)) of $rounds rounds passed"
[ "$failed" -eq 0 ]
