/* attempt_runner.h - `alallo attempt run`: one attempt of an engine (a
 * Slurm job, or a local process), the worker's run/relay/finish without
 * register and claim (docs/worker-protocol.md, "The attempt runner").
 *
 *   alallo attempt run --server URL --attempt ID --token @FILE --work-dir DIR
 *                      [--stop-grace S]
 *
 * 1. POST /internal/attempts/ID/start (idempotent) with its engine id and
 *    node: the fence, the job, the trainer's spec, its threads and the
 *    deadline (seconds left before the engine's time limit, less a lead).
 * 2. Heartbeats POST /internal/attempts/ID/heartbeat every heartbeat_s with
 *    {fence, engine_id, node}; the answer's stop works as a worker's.
 * 3. Runs the trainer in DIR, relays its events and finishes (attempt_run.h),
 *    on the GPUs when the answer's "gpus" (the pool's gres) is above 0 and
 *    this alallo has CUDA; on the CPU with one warning line otherwise.
 *    SIGTERM or SIGINT (preemption, scancel, the time limit) and the
 *    deadline stop the trainer with a checkpoint; the finish then says
 *    stop "move". A 409 (another attempt owns the job): the trainer is
 *    killed and no finish is sent.
 * The token is the attempt's own (it can act for this attempt only).
 *
 * Exit status: 0 the end was reported (or the attempt was fenced), 1 it
 * could not be, 2 bad arguments, 3 the server refused to start it.
 */
#ifndef ALALLO_WORKER_ATTEMPT_RUNNER_H
#define ALALLO_WORKER_ATTEMPT_RUNNER_H

#include <stdbool.h>

/* trainer_cuda: this alallo was built with CUDA (train_device_cuda_built,
 * passed in by src/app): a slot that holds GPUs then trains on them. */
int cmd_attempt(int argc, char **argv, bool trainer_cuda);

#endif
