#!/usr/bin/env bash
# The checks a lent GPU machine runs, in one call (its image holds torch and little else; the
# other packages travel as wheels in .whl/, fetched here as /work/.library/device/README.md says):
#   1. experiments.cuda_check: every algorithm learns with device = "cuda", and DDPG's gradient
#      steps/s on the GPU against the same machine's CPU;
#   2. experiments.atari_vs_sb3 --device cuda: Pong env steps/s and learner updates/s, both sides'
#      networks on the GPU;
#   3. experiments.minatar_vs_sb3 --device cuda: DQN on MinAtar Breakout, both sides, seeds 0-2,
#      one process per seed and side at once, at a budget that fits the call (MINATAR_STEPS).
# Everything lands in $OUT/results.tgz (the device tool brings back few files).
set -u
OUT=${OUT:-/tmp/gpu_checks}
R=$OUT/r
mkdir -p "$R"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SDL_VIDEODRIVER=dummy
# setup.cfg installs agents/, envs/ and tasks/ as wheeler2.agents, ...: links stand in for that.
for d in agents envs tasks; do [ -e "wheeler2/$d" ] || ln -s "../$d" "wheeler2/$d"; done
{ nvidia-smi -L; nproc; python3 -c "import torch; print(torch.__version__)"; } > "$R/machine.txt" 2>&1
python3 -c "import wheeler2.cli, wheeler2.agents.dqn" || exit 1
python3 -m experiments.cuda_check --steps 200 > "$R/cuda_check.txt" 2>&1
python3 -m experiments.atari_vs_sb3 --device cuda --steps 4000 --collect-steps 8000 \
    --learning-starts 500 --out "$R/atari_vs_sb3_cuda.md" > "$R/atari.log" 2>&1
for seed in 0 1 2; do
    for side in wheeler2 sb3; do
        timeout -s INT "${MINATAR_S:-330}" python3 -m experiments.minatar_vs_sb3 --games Breakout \
            --seeds $seed --sides $side --steps "${MINATAR_STEPS:-50000}" --device cuda \
            --out "$R/minatar_${side}_$seed.md" > "$R/minatar_${side}_$seed.log" 2>&1 &
    done
done
wait
tar czf "$OUT/results.tgz" -C "$OUT" r
