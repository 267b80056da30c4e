/* cmds.h - the sub-commands of the one binary, build/alallo.
 *
 * Each takes the arguments after its own name (argv[0] is the command name)
 * and returns the process exit status: 0 success, 1 failure, 2 usage error.
 * Owners: api/ serve and accounts; worker/ worker; cli/ the client commands;
 * train/ train, bench, model, generate and export on local folders,
 * tokenizer; sched/ sim.
 */
#ifndef ALALLO_CMDS_H
#define ALALLO_CMDS_H

int cmd_serve(int argc, char **argv);          /* src/api/cmd_serve.c      */
int cmd_accounts(int argc, char **argv);       /* src/api/cmd_accounts.c   */
int cmd_worker(int argc, char **argv);         /* src/worker/cmd_worker.c  */
/* jobs, files, models, estimate, workers, ledger, and generate/export of a
 * model by ID through the API. argv[0] names which. */
int cmd_client(int argc, char **argv);         /* src/cli/cmd_client.c     */
int cmd_train(int argc, char **argv);          /* src/train/cmd_train.c    */
int cmd_bench(int argc, char **argv);          /* src/train/cmd_bench.c    */
int cmd_model(int argc, char **argv);          /* src/train/cmd_model.c    */
int cmd_generate_local(int argc, char **argv); /* src/train/cmd_generate.c */
int cmd_export_local(int argc, char **argv);   /* src/train/cmd_export.c   */
int cmd_tokenizer(int argc, char **argv);      /* src/train/cmd_tokenizer.c */
int cmd_sim(int argc, char **argv);            /* src/sched/cmd_sim.c      */

#endif
