#!/bin/bash
# mtkit training across nodes under SLURM: one torchrun agent per node, every node's
# processes meeting at one rendezvous endpoint; restarted attempts continue the run.
#
#   sbatch docs/slurm-train.sh recipes/en-de.yaml /shared/runs/en-de
#
# The run directory must be on a file system every node sees (NFS, Lustre, GPFS): rank 0
# writes it (data/, checkpoints, logs) and every rank reads data/ and last.pt from it.
#SBATCH --job-name=mtkit
#SBATCH --nodes=2                 # nodes asked for; --nnodes below accepts 1 to this many
#SBATCH --ntasks-per-node=1       # one torchrun agent per node (it starts the GPU workers)
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --time=24:00:00
#SBATCH --requeue                 # a preempted job is queued again with this same script
#SBATCH --signal=TERM@60          # SIGTERM 60 s before the time limit: a checkpoint is saved

set -euo pipefail
RECIPE=${1:?usage: sbatch docs/slurm-train.sh RECIPE RUN_DIR}
RUN_DIR=${2:?usage: sbatch docs/slurm-train.sh RECIPE RUN_DIR}

# The rendezvous endpoint: the first node of the allocation, a port free on it.
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
PORT=29500

# One store per attempt: torchrun's agent otherwise shares its rendezvous store with every
# attempt's workers, and a restarted attempt may read the previous one's addresses from it
# (fails to connect, or hangs; README, multi-node section).
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1

# --nnodes 1:N lets an attempt start with fewer nodes than asked for (a node lost);
# --max-restarts restarts every worker with this same command line, which --resume auto
# turns into a resume from the last checkpoint (or a start, on the first attempt). A resume
# on fewer processes keeps the global batch in tokens by raising update_freq (said in the log).
srun --kill-on-bad-exit=0 torchrun \
    --nnodes "1:$SLURM_JOB_NUM_NODES" \
    --nproc_per_node "${SLURM_GPUS_PER_NODE:-4}" \
    --rdzv_id "$SLURM_JOB_ID" \
    --rdzv_backend c10d \
    --rdzv_endpoint "$HEAD:$PORT" \
    --max-restarts 3 \
    -m mtkit train "$RECIPE" --run-dir "$RUN_DIR" --resume auto \
        --set train.checkpoint_every_time=15m
