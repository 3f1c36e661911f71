#!/usr/bin/env bash
# The process- and timing-sensitive default tests, N rounds in a row, with one busy-looping
# process per core as background load (a stand-in for `stress -c $(nproc)`), one line per round:
#
#     bash experiments/stress_tests.sh 20        # from the repository root, after `make setup`
#     bash experiments/stress_tests.sh 2 all     # the whole default run (make test's pytest) a round
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
# Every default test that starts processes, threads or a team on the local or ray backend.
tests=(tests/test_faults.py tests/test_local.py tests/test_buffer_gate.py
       tests/test_buffer_concurrent.py tests/test_buffer_gate_rules.py tests/test_buffer_sampling.py
       tests/test_trainer.py
       tests/test_sync.py tests/test_shm_sweep.py tests/test_ray.py
       tests/test_buffer_lifecycle.py tests/test_runtime.py tests/test_resume_runtime.py
       tests/test_backends_agree.py tests/test_vector.py tests/test_run_dir.py tests/test_api.py
       tests/test_task_path.py::test_run_eval_and_resume_from_other_folders
       "tests/test_finite_guard.py::test_a_nan_reward_head_stops_the_run_naming_head_and_step[local]"
       tests/test_detached.py::test_local_team_with_a_detached_explorer_per_head_runs
       tests/test_tables.py::test_local_two_tables_each_explorer_syncs_from_its_own_tables_learner
       tests/test_cli.py::test_check_exit_codes_via_python_m
       "tests/test_recurrent_ppo.py::test_a_team_with_a_recurrent_explorer_runs_and_syncs[local]"
       tests/test_buffer_sequence.py::test_state_written_in_one_process_is_read_back_in_another)
# The rest of the default run is single-process arithmetic that load cannot change; `all` runs it
# too, which is what a loaded CI machine's `make test` meets.
[ "${2:-}" = all ] && tests=()
# What a round leaves behind counts as a failure too: shared memory whose creating process is
# gone (names carry the creator's pid: w2r_<pid>_...), and any process the round started. Those
# carry W2_STRESS_ROUND in their environment (children inherit it), so a developer's own runs
# from the same venv beside the stress run are not mistaken for leftovers.
leftovers() {
  local seg pid env found=() procs=()
  for seg in /dev/shm/w2r_* /dev/shm/sem.w2r_*; do
    [ -e "$seg" ] || continue
    pid=${seg#*w2r_}
    pid=${pid%%_*}
    kill -0 "$pid" 2>/dev/null || found+=("$(basename "$seg")")
  done
  for env in /proc/[0-9]*/environ; do
    { tr '\0' '\n' < "$env"; } 2>/dev/null | grep -qx "W2_STRESS_ROUND=$1" || continue
    pid=${env#/proc/}
    procs+=("${pid%/environ}")
  done
  [ ${#procs[@]} -gt 0 ] && found+=("processes: ${procs[*]}")
  echo "${found[*]}"
}
failed=0
for i in $(seq "$rounds"); do
  start=$(date +%s)
  W2_STRESS_ROUND=$i .venv/bin/python -m pytest -q -p no:warnings "${tests[@]}" \
    > "/tmp/wheeler2_stress_$i.log" 2>&1
  rc=$?
  sleep 5  # let the last team's processes exit before looking for what is left
  left=$(leftovers "$i")
  { [ "$rc" -ne 0 ] || [ -n "$left" ]; } && failed=$((failed + 1))
  echo "round $i: exit $rc, $(( $(date +%s) - start )) s, $(tail -1 "/tmp/wheeler2_stress_$i.log")${left:+, LEFT BEHIND: $left}"
done
echo "$((rounds - failed)) of $rounds rounds passed"
[ "$failed" -eq 0 ]
