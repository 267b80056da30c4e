/* cmd_worker.h - `alallo worker`, a remote worker (worker.h), as a
 * sub-command of the one binary: the exit status as app/cmds.h says. */
#ifndef ALALLO_WORKER_CMD_WORKER_H
#define ALALLO_WORKER_CMD_WORKER_H

int cmd_worker(int argc, char **argv);

#endif
