/* train_cmds.h - the trainer's sub-commands of the one binary, on local
 * folders (app/main.c picks them). Each takes the arguments after its own
 * name and returns the exit status: 0 success, 1 failure, 2 usage error. */
#ifndef ALALLO_TRAIN_TRAIN_CMDS_H
#define ALALLO_TRAIN_TRAIN_CMDS_H

int cmd_train(int argc, char **argv);          /* cmd_train.c     */
int cmd_train_dump_dpo(int argc, char **argv); /* dump_dpo.c: --dump-dpo */
int cmd_train_dump_grpo(int argc, char **argv); /* dump_grpo.c: --dump-grpo */
int cmd_bench(int argc, char **argv);          /* cmd_bench.c     */
int cmd_bench_gpu(int argc, char **argv);      /* bench_gpu.c: bench train --device cuda */
int cmd_model(int argc, char **argv);          /* cmd_model.c     */
int cmd_generate_local(int argc, char **argv); /* cmd_generate.c  */
int cmd_export_local(int argc, char **argv);   /* cmd_export.c    */
int cmd_tokenizer(int argc, char **argv);      /* cmd_tokenizer.c */
int cmd_inference(int argc, char **argv);      /* cmd_inference.c: the resident engine */

#endif
