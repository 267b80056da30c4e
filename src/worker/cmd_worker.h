/* cmd_worker.h - `alallo worker`, a remote worker (worker.h), as a
 * sub-command of the one binary: the exit status as app/cmds.h says.
 *
 * trainer_cuda: whether this binary, which the worker starts as its
 * trainer, was built with CUDA (worker_config.trainer_cuda). The caller in
 * src/app passes train_device_cuda_built(): the worker layer may not ask
 * src/train itself (scripts/check-layers.sh). */
#ifndef ALALLO_WORKER_CMD_WORKER_H
#define ALALLO_WORKER_CMD_WORKER_H

#include <stdbool.h>

int cmd_worker(int argc, char **argv, bool trainer_cuda);

#endif
