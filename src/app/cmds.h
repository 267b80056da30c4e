/* cmds.h - the sub-commands of the one binary, build/alallo.
 *
 * Each takes the arguments after its own name (argv[0] is the command name)
 * and returns the process exit status: 0 success, 1 failure, 2 usage error.
 * Owners: app/ serve, accounts and store (the only commands that wire several
 * layers together); worker/ worker; cli/ the client commands; train/ train,
 * bench, model, generate and export on local folders, tokenizer; sched/ sim.
 */
#ifndef ALALLO_APP_CMDS_H
#define ALALLO_APP_CMDS_H

#include "cli/cmd_client.h"
#include "sched/cmd_sim.h"
#include "train/cmds/train_cmds.h"
#include "worker/attempt_runner.h"
#include "worker/cmd_worker.h"
#include "worker/serving_runner.h"

int cmd_serve(int argc, char **argv);    /* app/cmd_serve.c    */
int cmd_accounts(int argc, char **argv); /* app/cmd_accounts.c */
int cmd_store(int argc, char **argv);    /* app/cmd_store.c    */

#endif
