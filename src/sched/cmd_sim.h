/* cmd_sim.h - `alallo sim`, the fleet simulation (sim.h), as a sub-command
 * of the one binary: the exit status as app/cmds.h says. */
#ifndef ALALLO_SCHED_CMD_SIM_H
#define ALALLO_SCHED_CMD_SIM_H

int cmd_sim(int argc, char **argv);

#endif
