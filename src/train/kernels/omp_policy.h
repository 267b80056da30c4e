/* omp_policy.h - how the trainer's OpenMP threads wait.
 *
 * libgomp's default lets an idle thread spin for a while before it sleeps.
 * On a machine whose cores are shared (other trainers, other processes) a
 * spinning thread takes the core from the thread it waits for: measured on
 * a busy 2-core machine, the `small` shape ran 11x faster with passive
 * waiting (703 against 64 tokens/s), and spinning took 83% of the CPU time.
 * libgomp reads the policy once, from the environment, when the program
 * starts, so the only way to set it from inside is to start again.
 */
#ifndef ALALLO_TRAIN_OMP_POLICY_H
#define ALALLO_TRAIN_OMP_POLICY_H

/* Unless OMP_WAIT_POLICY is already set, sets it to "passive" and
 * re-executes this binary (/proc/self/exe) with the same sub-command
 * arguments (argv[0] is the sub-command's name, as cmds.h passes it); the
 * process id stays the same. Returns only when nothing was done or the
 * exec failed (then the run goes on with the default policy). */
void omp_policy_passive(int argc, char **argv);

#endif
